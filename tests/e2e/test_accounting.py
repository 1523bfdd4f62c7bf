"""Time limits and accounting on a real local cluster: master and worker processes, real
PyTorch training on CPU, hctl as a user runs it."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from clients.types import TERMINAL_JOB_STATES, JobState
from store import Database
from tests.e2e.conftest import Cluster, wait_for
from worker.runtime.checkpoint import CheckpointStore, job_directory

pytestmark = pytest.mark.e2e

DONE = TERMINAL_JOB_STATES


def test_a_job_with_time_30s_ends_timeout_with_a_resumable_checkpoint_and_usage_adds_up(
    start_cluster: Callable[..., Cluster],
) -> None:
    """`hctl submit --time 30s` on a training job far too long for 30 s: after about 30 s
    of run time it is stopped, ends TIMEOUT with the limit in its reason, and its last
    checkpoint on disk loads and holds the iteration it reached; `hctl wait` exits 104.
    A command job and a short training job complete beside it, and `hctl usage` (by user
    and by GPU type) totals exactly the sum of the three jobs' GPU-seconds, which
    `hctl history` lists with their states and exit codes."""
    cluster = start_cluster(
        "v100:2",
        settings={"HADAR_TIME_LIMIT_CHECK_S": "1"},
        worker_settings={"HADAR_WORKER_CHECKPOINT_INTERVAL_S": "2"},
    )
    limited = cluster.submit_argv(
        "--workload",
        "recommendation",
        "--iterations",
        "10000000",
        "--time",
        "30s",
        "--name",
        "limited",
    )
    command = cluster.submit_argv(
        "--iterations",
        "1",
        "--name",
        "prep",
        "--",
        "python3",
        "-c",
        "import time; time.sleep(3); print('prepared')",
    )
    short = cluster.submit_argv("--workload", "recommendation", "--iterations", "30")

    job = cluster.wait_state(limited, DONE, timeout=240)
    assert job.state == JobState.TIMEOUT, job.reason
    assert job.reason.startswith("time limit 00:00:30 reached after 00:00:3"), job.reason
    waited = cluster.hctl("wait", str(limited))
    assert waited.returncode == 104, (waited.returncode, waited.stderr)

    # The graceful stop checkpointed where the job got to; the runtime resumes from it.
    store = CheckpointStore(job_directory(cluster.local.state_dir / "checkpoints", str(limited)))

    wait_for(lambda: limited not in cluster.local.job_processes(), 60, "the job to stop")

    def checkpoint_reported() -> bool:
        on_disk = store.iterations_on_disk()
        return bool(on_disk) and cluster.job(limited).checkpoint_iterations == on_disk[0]

    wait_for(checkpoint_reported, 30, "the stopped task's checkpoint to be reported")
    final = cluster.client.get_job(limited)
    latest = store.load_latest()
    assert latest is not None
    assert latest.iterations == final.checkpoint_iterations > 0
    assert latest.state["iterations"] == latest.iterations
    assert final.iterations_done == final.checkpoint_iterations
    assert 30 <= final.run_seconds < 60, final.run_seconds

    shown = cluster.hctl("show", str(limited))
    assert shown.returncode == 0, shown.stderr
    assert "timeout" in shown.stdout and "30s of run time" in shown.stdout, shown.stdout

    for job_id in (command, short):
        ended = cluster.wait_state(job_id, DONE, timeout=240)
        assert ended.state == JobState.COMPLETED, (job_id, ended.reason)
    # A job may be COMPLETED by its last progress report before its process has exited; its
    # attempt counts up to now until the exit is reported. Compare once every attempt ended.
    database = Database(cluster.local.database_url)

    def all_ended() -> bool:
        with database.transaction() as uow:
            return not uow.usage.running()

    try:
        wait_for(all_ended, 60, "every attempt to end")
    finally:
        database.dispose()
    jobs = {j: cluster.client.get_job(j) for j in (limited, command, short)}
    assert all(j.gpu_seconds > 0 for j in jobs.values()), jobs
    # The command never reports progress; its GPU time is its run time on its one GPU.
    assert jobs[command].gpu_seconds >= 3.0
    total = sum(j.gpu_seconds for j in jobs.values())

    for grouping in ("user", "type"):
        result = cluster.hctl("usage", "--by", grouping, "--json")
        assert result.returncode == 0, result.stderr
        usage = json.loads(result.stdout)["usage"]
        assert usage["total_gpu_seconds"] == pytest.approx(total, rel=1e-9)
        assert sum(r["gpu_seconds"] for r in usage["rows"]) == pytest.approx(total, rel=1e-9)
        if grouping == "type":
            assert [r["key"] for r in usage["rows"]] == ["v100"]
    table = cluster.hctl("usage")
    assert table.returncode == 0, table.stderr
    assert f"{total / 3600:.2f}" in table.stdout.splitlines()[-1], table.stdout

    result = cluster.hctl("history", "--json")
    assert result.returncode == 0, result.stderr
    history = {e["job"]["id"]: e for e in json.loads(result.stdout)["jobs"]}
    assert set(history) == {limited, command, short}
    assert history[limited]["job"]["state"] == "timeout"
    assert history[command]["job"]["state"] == "completed"
    assert history[command]["job"]["exit_code"] == 0
    for job_id, job_now in jobs.items():
        assert history[job_id]["gpu_seconds"] == pytest.approx(job_now.gpu_seconds)
    listed = cluster.hctl("history", "-t", "timeout")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert [row[0] for row in rows] == [str(limited)]


def test_a_command_ignoring_sigterm_is_killed_after_the_grace_at_its_time_limit(
    start_cluster: Callable[..., Cluster],
) -> None:
    """An opaque command that ignores SIGTERM, submitted with `--time 5s`: it ends TIMEOUT
    about 5 s after it started, its process is SIGKILLed once the grace (10 s on a local
    cluster) has passed, and its GPU time covers the grace it held the GPU for."""
    cluster = start_cluster("v100:1", settings={"HADAR_TIME_LIMIT_CHECK_S": "1"})
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('started', flush=True); time.sleep(600)"
    )
    job_id = cluster.submit_argv(
        "--iterations", "1", "--time", "5s", "--", "python3", "-c", stubborn
    )
    wait_for(lambda: job_id in cluster.local.job_processes(), 120, "the command to start")
    job = cluster.wait_state(job_id, DONE, timeout=60)
    assert job.state == JobState.TIMEOUT, job.reason
    assert job.reason.startswith("time limit 00:00:05 reached after 00:00:0"), job.reason
    # Still running through the grace, then killed.
    wait_for(lambda: job_id not in cluster.local.job_processes(), 30, "the SIGKILL")
    database = Database(cluster.local.database_url)

    def ended() -> bool:
        with database.transaction() as uow:
            return not uow.usage.running()

    try:
        wait_for(ended, 30, "the attempt to end")
    finally:
        database.dispose()
    final = cluster.client.get_job(job_id)
    assert final.state == JobState.TIMEOUT
    assert 5 + 8 <= final.gpu_seconds < 5 + 30, final.gpu_seconds
    waited = cluster.hctl("wait", str(job_id))
    assert waited.returncode == 104, waited.stderr
