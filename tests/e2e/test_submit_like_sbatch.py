"""`hctl submit -- CMD` as a Slurm user types it, on a real local cluster: a command runs on
the first try in the directory it was submitted from with the submitting shell's
environment (its virtualenv's python first on PATH), and a preemptible command is warned by
its signal, stopped by a drain, requeued and run again to completion."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.types import TERMINAL_JOB_STATES, JobState
from tests.e2e.conftest import Cluster, two_worker_cluster, wait_for

pytestmark = pytest.mark.e2e

TRAIN = """\
import os
import sys

print("pwd", os.getcwd())
print("exported", os.environ["EXPERIMENT"])
print("shim", os.environ.get("VENV_SHIM", "-"))
"""

# Starts again from scratch on every run: the first waits to be stopped, writing down the
# warning and the SIGTERM that follow; the second completes.
PREEMPTIBLE = """\
import signal
import sys
import time
from pathlib import Path

log = Path("runs.log")
earlier = log.read_text().count("start") if log.exists() else 0


def note(word):
    with log.open("a") as out:
        out.write(f"{word} {time.time():.3f}\\n")


note("start")
if earlier:
    note("done")
    sys.exit(0)
signal.signal(signal.SIGUSR1, lambda *_: note("warned"))


def terminated(*_):
    note("terminated")
    sys.exit(143)


signal.signal(signal.SIGTERM, terminated)
while True:
    time.sleep(0.1)
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    top = Path(tempfile.mkdtemp(prefix="hadar-sbatch-"))
    try:
        with two_worker_cluster(top / "cluster") as started:
            yield started
    finally:
        shutil.rmtree(top, ignore_errors=True)


def fresh_project(cluster: Cluster, name: str) -> tuple[Path, dict[str, str]]:
    """A new directory with a virtualenv-like bin/python first on PATH, and the environment
    of a shell in it (hctl's config, a variable the user exported)."""
    project = cluster.local.state_dir.parent / name
    (project / "venv" / "bin").mkdir(parents=True)
    shim = project / "venv" / "bin" / "python"
    shim.write_text(f'#!/bin/sh\nVENV_SHIM=1 exec {sys.executable} "$@"\n')
    shim.chmod(0o755)
    shell = {k: v for k, v in os.environ.items() if k not in ("HADAR_MASTER", "HADAR_TOKEN", "PWD")}
    shell.update(
        {
            "HADAR_CONFIG": str(cluster.local.config_path),
            "PATH": f"{shim.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "EXPERIMENT": "lr-sweep-7",
        }
    )
    return project, shell


def submit(project: Path, shell: dict[str, str], *args: str) -> int:
    """`hctl submit --parsable ARGS` run in `project` by a shell with `shell`."""
    done = subprocess.run(
        [sys.executable, "-m", "clients.cli.main", "submit", "--parsable", *args],
        cwd=project,
        env=shell,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def test_a_command_runs_where_and_with_what_it_was_submitted(cluster: Cluster) -> None:
    """`hctl submit --gpus 1 -- python train.py` needs no other flag: it completes on the
    first try, run by the virtualenv's python in the submitting directory with the
    exported variable, and `hctl show` says where it ran."""
    project, shell = fresh_project(cluster, "project")
    (project / "train.py").write_text(TRAIN)
    job_id = submit(project, shell, "--gpus", "1", "--", "python", "train.py")
    done = cluster.wait_state(job_id, TERMINAL_JOB_STATES, timeout=90)
    assert done.state is JobState.COMPLETED, done.reason
    assert done.retries == 0
    logs = cluster.hctl("logs", str(job_id))
    assert logs.returncode == 0, logs.stderr
    assert f"pwd {project}" in logs.stdout
    assert "exported lr-sweep-7" in logs.stdout
    assert "shim 1" in logs.stdout
    shown = cluster.hctl("show", str(job_id))
    assert f"workdir {project}" in shown.stdout


def test_a_preemptible_command_is_warned_stopped_requeued_and_completes(
    cluster: Cluster,
) -> None:
    """With --preemptible --signal USR1@3, draining the job's node warns the command with
    SIGUSR1, sends SIGTERM 3 s later, requeues it, and the command runs again from the
    start on the other node (same directory) and completes."""
    project, shell = fresh_project(cluster, "preempt")
    (project / "job.py").write_text(PREEMPTIBLE)
    job_id = submit(project, shell, "--preemptible", "--signal", "USR1@3", "--", "python", "job.py")
    runs = project / "runs.log"
    wait_for(lambda: runs.exists() and "start" in runs.read_text(), 60, "the first run")
    running = cluster.wait_state(job_id, {JobState.RUNNING}, timeout=30)
    node = running.tasks[0].node
    drained = cluster.hctl("drain", node, "--reason", "preemption test")
    assert drained.returncode == 0, drained.stderr
    try:
        done = cluster.wait_state(job_id, TERMINAL_JOB_STATES, timeout=120)
    finally:
        cluster.hctl("resume", node)
    assert done.state is JobState.COMPLETED, done.reason
    assert done.preemptions >= 1 and done.retries == 0
    events = [line.split() for line in runs.read_text().splitlines()]
    assert [word for word, _ in events] == ["start", "warned", "terminated", "start", "done"]
    at = {word: float(when) for word, when in events if word in ("warned", "terminated")}
    assert at["terminated"] - at["warned"] >= 2.5
