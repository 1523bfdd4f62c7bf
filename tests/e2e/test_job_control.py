"""Job control on a real local cluster (master and worker processes, real training on CPU,
hctl as a user runs it): a TIMEOUT job requeued resumes from its checkpoint, a job
submitted held runs once released, and a waiting job's expected start is shown."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta

import pytest

from clients.localcluster import LocalCluster, parse_worker_groups
from clients.types import TERMINAL_JOB_STATES, JobState
from tests.e2e.conftest import ROUND_S, Cluster, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    local = LocalCluster(tmp_path_factory.mktemp("control") / "cluster")
    local.up(
        parse_worker_groups("v100:2"),
        policy="fifo",
        round_seconds=ROUND_S,
        master_settings={"HADAR_TIME_LIMIT_CHECK_S": "1", "HADAR_FORECAST_INTERVAL_S": "1"},
        worker_settings={"HADAR_WORKER_CHECKPOINT_INTERVAL_S": "2"},
        timeout=120,
    )
    built = Cluster(local)
    try:
        yield built
    finally:
        built.reconnect()
        local.down(timeout=10)


def test_requeue_of_a_timeout_job_resumes_from_its_checkpoint(cluster: Cluster) -> None:
    """A training job submitted with `--time 10s` ends TIMEOUT with a checkpoint; `hctl
    requeue` puts it back, its time limit counts anew (it runs another 10 s and ends
    TIMEOUT again, not at once), and the output of its second attempt opens with a `hadar:`
    line naming the requeue and its checkpoint, and says it resumed from that checkpoint or
    a later one (never from scratch)."""
    job_id = cluster.submit_argv(
        "--workload", "recommendation", "--iterations", "10000000", "--time", "10s"
    )
    first = cluster.wait_state(job_id, TERMINAL_JOB_STATES, timeout=180)
    assert first.state == JobState.TIMEOUT, first.reason
    # The stop saved a checkpoint; its iteration count is reported with the process's exit.
    wait_for(lambda: job_id not in cluster.local.job_processes(), 120, "the job to stop")
    wait_for(lambda: cluster.job(job_id).checkpoint_iterations > 0, 60, "its checkpoint reported")
    reported = cluster.job(job_id).checkpoint_iterations

    requeued = cluster.hctl("requeue", str(job_id), "--reason", "more time")
    assert requeued.returncode == 0, requeued.stderr
    # The stop's own checkpoint may be reported after a periodic one: the count only grows.
    named = re.search(r"resumes from its checkpoint at iteration (\d+)", requeued.stdout)
    assert named is not None, requeued.stdout
    checkpoint = int(named.group(1))
    assert checkpoint >= reported, (checkpoint, reported)
    second = cluster.wait_state(job_id, TERMINAL_JOB_STATES, timeout=180)
    assert second.state == JobState.TIMEOUT, second.reason
    assert second.requeues == 1 and second.run_seconds >= 20, second.run_seconds
    # Its second run went on from there: its own stop saved a later checkpoint.
    wait_for(
        lambda: cluster.job(job_id).checkpoint_iterations > checkpoint,
        60,
        "the second run's checkpoint to be reported",
    )

    # The runtime names the checkpoint it resumed from (the master's count only grows, so
    # it cannot tell a resume from a restart at 0).
    chunks = list(cluster.client.stream_logs(job_id))
    output = {
        attempt: b"".join(c.data for c in chunks if c.attempt == attempt).decode(errors="replace")
        for attempt in (1, 2)
    }
    assert "resumed from" not in output[1], output
    resumed = [int(n) for n in re.findall(r"resumed from \S*ckpt-(\d+)\.pt", output[2])]
    assert len(resumed) == 1 and resumed[0] >= checkpoint, (checkpoint, output)
    # The worker opened the second attempt's output with the requeue: who, why, from where.
    note = re.search(
        r"hadar: requeued by \S+ after it ended TIMEOUT: more time; resumes from checkpoint "
        r"at iteration (\d+)\n",
        output[2],
    )
    assert note is not None and int(note.group(1)) >= checkpoint, output[2]
    limit = cluster.hctl("show", str(job_id))
    assert "since its last requeue" in limit.stdout, limit.stdout
    kinds = [e.kind for e in cluster.client.describe_job(job_id).events]
    assert kinds.count("timeout") == 2 and "requeued" in kinds, kinds


def test_a_job_submitted_held_runs_only_once_released(cluster: Cluster) -> None:
    """`hctl submit --hold` stores the job held: `hctl show` says why it waits and it is
    not started over several rounds; `hctl release` lets it run to completion."""
    job_id = cluster.submit_argv("--hold", "--iterations", "1", "--", "sh", "-c", "echo ran")
    held = cluster.job(job_id)
    assert held.held_by and "hctl release" in held.reason
    shown = cluster.hctl("show", str(job_id))
    assert f"hctl release {job_id}" in shown.stdout, shown.stdout

    def rounds() -> int:
        last = cluster.client.cluster_status().last_round
        return last.number if last is not None else 0

    seen = rounds()
    wait_for(lambda: rounds() >= seen + 2, 30, "two more rounds")
    assert cluster.job(job_id).state == JobState.PENDING
    released = cluster.hctl("release", str(job_id))
    assert released.returncode == 0, released.stderr
    done = cluster.wait_state(job_id, TERMINAL_JOB_STATES, timeout=120)
    assert done.state == JobState.COMPLETED, done.reason


def test_queue_start_shows_when_a_waiting_job_is_expected_to_start(cluster: Cluster) -> None:
    """squeue --start: a job waiting behind one that holds both GPUs with a 1-minute limit
    is expected to start about when that limit ends; `hctl queue --start` lists it with
    that START time and `--json` carries it as expected_start."""
    blocker = cluster.submit_argv("--gpus", "2", "--time", "1m", "--", "sleep", "50")
    wait_for(lambda: cluster.job(blocker).state == JobState.RUNNING, 60, "the blocker to run")
    waiting = cluster.submit_argv("--gpus", "2", "--", "sh", "-c", "echo next")
    try:
        wait_for(lambda: cluster.job(waiting).expected_start is not None, 30, "an expected start")
        started, expected = cluster.job(blocker).started_at, cluster.job(waiting).expected_start
        assert started is not None and expected is not None
        assert started + timedelta(seconds=50) <= expected <= started + timedelta(seconds=80), (
            started,
            expected,
        )
        listed = cluster.hctl("queue", "--start")
        assert listed.returncode == 0, listed.stderr
        header, *rows = listed.stdout.splitlines()
        assert "START" in header.split()
        (row,) = [r for r in rows if r.split()[0] == str(waiting)]
        assert row.split()[header.split().index("START")] != "-", listed.stdout
        shown = json.loads(cluster.hctl("queue", "--start", "--json").stdout)
        (entry,) = [j for j in shown["jobs"] if j["id"] == waiting]
        assert entry["expected_start"], entry
    finally:
        for job_id in (waiting, blocker):
            cluster.hctl("cancel", str(job_id))
