"""`hctl run` as a program against a real master and fake workers: the job's output as it
is written, its exit code as hctl's, and Ctrl-C cancelling the job."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from clients import HadarClient, JobState
from protos.hadar.v1 import common_pb2
from tests.integration.cli.conftest import Cluster
from tests.integration.cli.fake_worker import FakeWorker
from tests.integration.cli.test_processes import base_env, hctl_process


def placed(cluster: Cluster, deadline_s: float = 30.0) -> tuple[int, FakeWorker]:
    """The job `hctl run` submitted, once a round has placed it, and its worker."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        cluster.round()
        for worker in cluster.workers.values():
            if worker.tasks:
                (job,) = worker.tasks
                return job, worker
        time.sleep(0.1)
    raise AssertionError("hctl run's job was never submitted and placed")


def run_process(cluster: Cluster, tmp_path: Path, *argv: str) -> subprocess.Popen[str]:
    env = base_env(tmp_path) | {
        "HADAR_MASTER": cluster.address,
        "HADAR_TOKEN": cluster.tokens["alice"],
    }
    return hctl_process(["run", "--gpus", "1", "--", *argv], env)


def test_run_prints_the_jobs_output_and_exits_with_its_exit_code(
    cluster: Cluster, tmp_path: Path
) -> None:
    """What the job writes to stdout comes out on hctl's stdout, its stderr on stderr, and
    hctl exits with the job's own exit code (3), not a code of its own."""
    process = run_process(cluster, tmp_path, "sh", "-c", "echo epoch 1; exit 3")
    job, worker = placed(cluster)
    worker.write_log(job, "epoch 1\n")
    worker.write_log(job, "warning: slow loader\n", stderr=True)
    worker.exit(job, common_pb2.EXIT_KIND_FAILED, exit_code=3)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 3, err
    assert out == "epoch 1\n"
    assert "warning: slow loader\n" in err
    assert f"job {job} (sh) submitted; waiting for GPUs" in err
    assert f"job {job} failed" in err


def test_ctrl_c_cancels_the_job_and_exits_130(cluster: Cluster, tmp_path: Path) -> None:
    """Interrupting hctl run cancels its job, whose history names why, and hctl exits 130
    as an interrupted program does."""
    process = run_process(cluster, tmp_path, "sleep", "600")
    job, worker = placed(cluster)
    worker.write_log(job, "started\n")
    assert process.stdout is not None
    assert process.stdout.readline() == "started\n"
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 130
    assert process.stderr is not None
    err = process.stderr.read()
    assert f"job {job} cancelled" in err and "Traceback" not in err
    with HadarClient(cluster.address, token=cluster.tokens["alice"]) as client:
        cancelled = client.get_job(job)
    assert cancelled.state is JobState.CANCELLED
    assert "hctl run was interrupted" in cancelled.reason
