"""`hctl logs -f` on a real local cluster: it follows the job, not one attempt. Started on
a pending job it waits, prints each line within 2 s of the job writing it, goes on with the
next attempt when a drain moves the job to another node (a header per attempt, and the
worker's `hadar:` line saying why the first one stopped and where the job resumes), and
exits 0 once the job has completed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from clients.types import Dependency, JobSpec, JobState, Program
from tests.e2e.conftest import Cluster, two_worker_cluster, wait_for

pytestmark = pytest.mark.e2e

# A managed script that prints when it wrote each line (same host, same clock) and is slow
# enough to be seen running across a drain.
TICKER = """\
import time

import torch
from torch import nn
from torch.nn import functional as F

from worker.runtime import TrainingRun, seed_everything

seed_everything(0)
model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
run = TrainingRun.from_env(model, optimizer, default_batch_size=8, default_iterations=30)
for step in run.steps():
    for micro in step.micro_batches():
        x = torch.randn(micro.size, 4)
        y = torch.zeros(micro.size, dtype=torch.long)
        micro.backward(F.cross_entropy(run.model(x), y))
    print(f"tick {step.iteration} {time.time():.3f}")
    time.sleep(0.2)
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with two_worker_cluster(tmp_path_factory.mktemp("follow") / "cluster") as started:
        yield started


class Follower:
    """`hctl logs -f JOB` in the background: each line it prints, with when it arrived."""

    def __init__(self, cluster: Cluster, job_id: int) -> None:
        env = {
            **{k: v for k, v in os.environ.items() if k not in ("HADAR_MASTER", "HADAR_TOKEN")},
            "HADAR_CONFIG": str(cluster.local.config_path),
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "clients.cli.main", "logs", str(job_id), "-f"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.out: list[tuple[float, str]] = []
        self.err: list[tuple[float, str]] = []
        assert self.process.stdout is not None and self.process.stderr is not None
        self._readers = [
            threading.Thread(target=self._read, args=(self.process.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(self.process.stderr, self.err), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: IO[str], into: list[tuple[float, str]]) -> None:
        for line in stream:
            into.append((time.time(), line.rstrip("\n")))

    def lines(self, which: list[tuple[float, str]]) -> list[str]:
        return [line for _, line in which]

    def finish(self, timeout: float) -> int:
        code = self.process.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout=5)
        return code


def test_logs_follow_waits_for_a_pending_job_and_follows_it_across_a_drain(
    cluster: Cluster, tmp_path: Path
) -> None:
    """hctl logs -f on a job that waits for another: it says the job is pending, prints
    the ticks as the job writes them (each within 2 s), prints both attempts under their
    own headers when a drain preempts the job and it runs again on the other node, with the
    `hadar:` line naming the drain and the checkpoint it resumes from, and exits 0 once the
    job has completed."""
    script = tmp_path / "ticker.py"
    script.write_text(TICKER)
    blocker = cluster.submit_argv("--iterations", "1", "--", "sleep", "3")
    job_id = cluster.submit_spec(
        JobSpec(
            name="ticker",
            program=Program.script([sys.executable, str(script)]),
            iterations=30,
            dependencies=(Dependency("afterok", blocker),),
        )
    )
    follower = Follower(cluster, job_id)
    wait_for(
        lambda: any("is pending" in line for line in follower.lines(follower.err)),
        30,
        "hctl to say the job is pending",
    )
    assert cluster.job(job_id).state is JobState.PENDING

    def ticks() -> list[tuple[float, str]]:
        return [(at, line) for at, line in follower.out if line.startswith("tick ")]

    wait_for(lambda: len(ticks()) >= 3, 120, "three ticks of the first attempt")
    first = cluster.job(job_id)
    assert first.state is JobState.RUNNING
    (node,) = {task.node for task in first.tasks}
    drained = cluster.hctl("drain", node, "--reason", "maintenance")
    assert drained.returncode == 0, drained.stderr

    code = follower.finish(timeout=180)
    stdout, stderr = follower.lines(follower.out), follower.lines(follower.err)
    assert code == 0, (stdout, stderr)
    assert cluster.job(job_id).state is JobState.COMPLETED

    for arrived, line in ticks():
        written = float(line.split()[2])
        assert arrived - written < 2.0, f"{line!r} arrived {arrived - written:.1f} s late"
    headers = [line for line in stdout if line.startswith("==> ")]
    other = next(n for n in ("local-1", "local-2") if n != node)
    assert len(headers) == 2, stdout
    assert re.fullmatch(rf"==> job {job_id} attempt 1 on {node} \(lease \d+\) <==", headers[0])
    assert re.fullmatch(rf"==> job {job_id} attempt 2 on {other} \(lease \d+\) <==", headers[1])
    # Ticks of both attempts, each under its own header; the second resumes where the
    # first one's checkpoint left off, so no iteration is missing.
    second_at = stdout.index(headers[1])
    before = [int(line.split()[1]) for line in stdout[:second_at] if line.startswith("tick ")]
    after = [int(line.split()[1]) for line in stdout[second_at:] if line.startswith("tick ")]
    assert before and after, stdout
    assert after[-1] == 29 and set(range(30)) <= set(before) | set(after)
    (note,) = [line for line in stderr if line.startswith("hadar: ")]
    assert re.fullmatch(
        rf"hadar: preempted in round \d+ \(node {node} is draining\); "
        rf"resumes from checkpoint at iteration {after[0]}",
        note,
    ), note
