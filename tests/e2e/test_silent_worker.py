"""One silent worker must not stop the others, on a real local cluster (three workers with
two K80s each, 2 s rounds, 10 s leases, a 6 s heartbeat timeout, a 3 s grace), on SQLite
and, when HADAR_TEST_POSTGRES_URL is set, on PostgreSQL. Both scenarios share the cluster
and its four long jobs.

A worker goes silent by SIGSTOP of its agent process alone: its job processes run on, it
answers none of the master's calls and sends no heartbeat. That stands in for a network
partition too (the tests cannot use iptables without root); the only difference is that a
cut-off agent would stop its jobs itself at lease end, where here the job's runtime does
(its lease file), as it would with an agent that has hung.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from clients.localcluster import LocalCluster, parse_worker_groups
from clients.types import JobState, NodeState
from store.database import Database
from store.domain import Round
from store.testing import backends, temporary_database_url
from tests.e2e.conftest import ROUND_S, Cluster, TwiceWatcher, wait_for
from worker.runtime.checkpoint import CheckpointStore, job_directory

pytestmark = pytest.mark.e2e

WORKERS = "k80:2;k80:2;k80:2"
JOBS = 4
# Events that would mean a job was stopped or moved.
DISRUPTIONS = {"preempted", "exited", "node_lost", "lost", "migrated", "late_exit"}


@pytest.fixture(scope="module", params=backends())
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("silent")
    with temporary_database_url(request.param, directory) as url:
        local = LocalCluster(directory / "cluster", database_url=url)
        local.up(
            parse_worker_groups(WORKERS),
            policy="fifo",
            round_seconds=ROUND_S,
            timeout=120,
            master_settings={"HADAR_GRACE_S": "3"},
            worker_settings={"HADAR_WORKER_CHECKPOINT_INTERVAL_S": "2"},
        )
        started = Cluster(local)
        try:
            for _ in range(JOBS):
                started.submit("recommendation", iterations=1_000_000)
            wait_for(lambda: len(placements(started)) == JOBS, 120, "every job to run")
            yield started
        finally:
            record = local.record()
            for worker in record.workers if record is not None else []:
                local.kill(worker.name, signal.SIGCONT)
            started.reconnect()
            local.down(timeout=10)


def placements(cluster: Cluster) -> dict[int, tuple[str, int, int]]:
    """Running job -> (node, lease, preemptions)."""
    out: dict[int, tuple[str, int, int]] = {}
    for job in cluster.client.list_jobs():
        if job.state == JobState.RUNNING and job.tasks:
            task = job.tasks[0]
            out[job.id] = (task.node, task.lease, job.preemptions)
    return out


def disruptions(cluster: Cluster, job_id: int, since: datetime) -> list[tuple[str, str]]:
    return [
        (e.kind, e.reason)
        for e in cluster.client.describe_job(job_id).events
        if e.kind in DISRUPTIONS and e.at is not None and e.at >= since
    ]


def rounds_between(cluster: Cluster, start: datetime, end: datetime) -> list[Round]:
    database = Database(cluster.local.database_url)
    try:
        with database.transaction() as uow:
            return [r for r in uow.rounds.started_since(start) if r.started_at <= end]
    finally:
        database.dispose()


def assert_rounds_kept_their_period(rounds: list[Round]) -> None:
    durations = [r.duration_s for r in rounds]
    print("round durations (s):", [round(d, 3) for d in durations])
    assert len(rounds) >= 3, rounds
    assert max(durations) < ROUND_S, durations
    # Early rounds (a node lost, a job placed) may come between the scheduled ones.
    gaps = [(b.started_at - a.started_at).total_seconds() for a, b in itertools.pairwise(rounds)]
    assert max(gaps) < 2 * ROUND_S, gaps


def output_of(task_dir: Path) -> str:
    """What rank 0 of a task wrote (the runtime logs to standard error)."""
    return "".join(
        (task_dir / name).read_text()
        for name in ("rank-0.out", "rank-0.err")
        if (task_dir / name).exists()
    )


def agent_pid(cluster: Cluster, node: str) -> int:
    return cluster.local.worker(node).pid


def test_a_three_second_silence_restarts_nothing(cluster: Cluster) -> None:
    """A worker silent for 3 s (half the heartbeat timeout) is not lost and stops nothing:
    every job keeps its node and lease, no job's history shows a stop, and the rounds
    keep their period meanwhile and after."""
    before = placements(cluster)
    assert len(before) == JOBS
    victim = before[min(before)][0]
    began = datetime.now(UTC)
    with TwiceWatcher(cluster.local) as watcher:
        os.kill(agent_pid(cluster, victim), signal.SIGSTOP)
        try:
            time.sleep(3.0)  # the silence itself, not a wait for something
        finally:
            os.kill(agent_pid(cluster, victim), signal.SIGCONT)
        back = datetime.now(UTC)
        wait_for(
            lambda: len(rounds_between(cluster, back, datetime.now(UTC))) >= 3,
            30,
            "three rounds after the silence",
        )
    assert placements(cluster) == before
    nodes = {n.name: n.state for n in cluster.client.list_nodes()}
    assert set(nodes.values()) == {NodeState.READY}, nodes
    for job_id in before:
        assert disruptions(cluster, job_id, began) == [], job_id
    assert_rounds_kept_their_period(rounds_between(cluster, began, datetime.now(UTC)))
    assert "lease_expired" not in Path(cluster.local.worker(victim).log).read_text()
    assert watcher.samples > 5 and watcher.violations == []


def test_a_frozen_agent_stops_no_healthy_job_and_its_jobs_resume_from_their_checkpoints(
    cluster: Cluster,
) -> None:
    """A worker's agent frozen until its jobs run elsewhere: about 25 s (the node is lost
    6 to 7 s in; its jobs may start elsewhere once their 10 s lease, the 3 s grace and a
    round are over), longer than the heartbeat timeout and the lease together, which is
    all a longer freeze (60 s) would show as well.

    The jobs on the two other workers never stop or move (same node, same lease, no
    preemption, nothing in their history); the frozen node's jobs stop themselves at
    their lease end with a checkpoint and resume on another node from exactly that
    checkpoint; every round meanwhile ends within its period and none is late; once
    thawed, the worker says why its tasks ended, in its log and in the jobs' histories;
    no job ever runs twice."""
    before = placements(cluster)
    by_node: dict[str, list[int]] = {}
    for job_id, (node, _, _) in sorted(before.items()):
        by_node.setdefault(node, []).append(job_id)
    names = [w.name for w in cluster.local.record().workers]  # type: ignore[union-attr]
    free = {name: 2 - len(by_node.get(name, [])) for name in names}
    victim = next(
        node
        for node, jobs in by_node.items()
        if len(by_node) > 1 and sum(free.values()) - free[node] >= len(jobs)
    )
    moving = by_node[victim]
    staying = [j for j in before if j not in moving]
    checkpoints = cluster.local.state_dir / "checkpoints"
    began = datetime.now(UTC)
    with TwiceWatcher(cluster.local) as watcher:
        os.kill(agent_pid(cluster, victim), signal.SIGSTOP)
        try:
            # The runtime stops each job at its lease end (the agent cannot), checkpointing.
            wait_for(
                lambda: not set(moving) & set(cluster.local.job_processes()),
                40,
                f"the jobs on {victim} to stop at their lease end",
            )
            last = {
                j: CheckpointStore(job_directory(checkpoints, str(j))).iterations_on_disk()[0]
                for j in moving
            }

            def resumed() -> bool:
                now = placements(cluster)
                return all(j in now and now[j][0] != victim for j in moving)

            wait_for(resumed, 60, f"the jobs of {victim} to run elsewhere")
            after = placements(cluster)
            for job_id in moving:
                node, lease, _ = after[job_id]
                # Placed is not yet started: the worker makes the folder as the START lands.
                task_dir = (
                    cluster.local.state_dir
                    / node
                    / "tasks"
                    / (f"job-{job_id}.task-0.lease-{lease}")
                )
                wait_for(task_dir.is_dir, 60, f"job {job_id} to start on {node}")
                wait_for(
                    lambda d=task_dir: "resumed from" in output_of(d),  # type: ignore[misc]
                    60,
                    f"job {job_id} to resume on {node}",
                )
                output = output_of(task_dir)
                assert f"ckpt-{last[job_id]}.pt" in output, (job_id, last, output[-2000:])
        finally:
            os.kill(agent_pid(cluster, victim), signal.SIGCONT)
        thawed = datetime.now(UTC)
        print(f"{victim} frozen for {(thawed - began).total_seconds():.1f} s")

        def told() -> bool:
            return all(
                any(kind == "late_exit" for kind, _ in disruptions(cluster, j, began))
                for j in moving
            )

        wait_for(told, 30, f"{victim} to report how its tasks ended")
    assert_rounds_kept_their_period(rounds_between(cluster, began, thawed))
    now = placements(cluster)
    for job_id in staying:
        assert now[job_id] == before[job_id], job_id
        assert disruptions(cluster, job_id, began) == [], job_id
    for job_id in moving:
        reasons = [reason for kind, reason in disruptions(cluster, job_id, began)]
        assert any(reason == f"node {victim} lost" for reason in reasons), reasons
        late = next(r for k, r in disruptions(cluster, job_id, began) if k == "late_exit")
        assert "expired at" in late and "did not run for" in late, late
        assert cluster.job(job_id).checkpoint_iterations >= last[job_id]
    log = Path(cluster.local.worker(victim).log).read_text()
    assert "lease_expired" in log and "did not run for" in log
    assert watcher.samples > 10 and watcher.violations == []
