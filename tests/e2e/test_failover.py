"""Failover between masters on one database, with real processes: the active master is
killed with SIGKILL, or frozen with SIGSTOP (between writes, or inside one), while a standby
runs; the standby takes over, every job completes once, and the old master, back again, is
fenced (on SQLite with its lock file, and on PostgreSQL when HADAR_TEST_POSTGRES_URL is
set)."""

from __future__ import annotations

import json
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from clients.types import JobState
from protos.hadar.v1 import worker_pb2, worker_pb2_grpc
from store import Database
from store.database import normalize_url
from store.leadership import MasterLeases, MasterTerm
from store.testing import POSTGRES_ENV, backends, temporary_database_url
from tests.e2e.conftest import Cluster, TwiceWatcher, wait_for

DONE = {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED}
LEASE_S = 4.0
RENEW_S = 1.0
LEADER_SETTINGS = {"HADAR_LEADER_LEASE_S": str(LEASE_S), "HADAR_LEADER_RENEW_S": str(RENEW_S)}


@pytest.fixture(params=backends())
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | None]:
    """The masters' database: None for the local cluster's own SQLite file, else a fresh
    PostgreSQL schema (dropped after the cluster is down: this fixture is set up first)."""
    if request.param == "sqlite":
        yield None
        return
    with temporary_database_url(request.param, tmp_path) as url:
        yield url


def lease(cluster: Cluster) -> MasterTerm:
    db = Database(cluster.local.database_url)
    try:
        term = MasterLeases(db).current()
    finally:
        db.dispose()
    assert term is not None
    return term


def seen_epoch(cluster: Cluster, node: str) -> int:
    path = cluster.local.state_dir / node / "agent" / "master-epoch.json"
    try:
        return int(json.loads(path.read_text())["epoch"])
    except FileNotFoundError:
        return 0


def worker_stub(cluster: Cluster, node: str) -> tuple[grpc.Channel, Any]:
    channel = grpc.insecure_channel(cluster.local.worker(node).address)
    return channel, worker_pb2_grpc.WorkerStub(channel)  # type: ignore[no-untyped-call]


def listens(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def test_a_standby_takes_over_from_a_killed_master_and_the_old_master_is_fenced(
    database: str | None, start_cluster: Callable[..., Cluster]
) -> None:
    """SIGKILL the active master while jobs run: the standby holds the lease with epoch 2
    within two lease periods, the workers follow it, every job completes with exactly its
    iterations and never runs under two leases at once. An order stamped with the old
    epoch is refused by a worker and stops nothing, and the old master, started again,
    stands by (does not listen, does not take the lease)."""
    cluster = start_cluster(
        "v100:2;k80:2", settings=LEADER_SETTINGS, database=database, standby=True
    )
    first, standby = cluster.local.process("master"), cluster.local.process("master-2")
    before = lease(cluster)
    assert (before.epoch, before.address) == (1, first.address)
    assert not listens(standby.address)
    token = cluster.local.cluster_token_path.read_text().strip()
    auth = (("authorization", f"Bearer {token}"),)

    with TwiceWatcher(cluster.local) as watcher:
        # Each runs on after the takeover (at most 2 * LEASE_S after the kill); the resnet
        # job, on a paced K80 and the slowest, for about half a minute on an idle machine
        # and longer on a busy one (400 iterations took over 4 minutes at a load of 9).
        ids = [
            cluster.submit("recommendation", iterations=1500),
            cluster.submit("lstm", iterations=600),
            cluster.submit("resnet", iterations=100),
        ]
        wait_for(
            lambda: all(cluster.job(i).state == JobState.RUNNING for i in ids),
            120,
            "all jobs to run",
        )
        running = {i: cluster.job(i) for i in ids}
        cluster.local.kill("master", signal.SIGKILL)
        killed_at = time.monotonic()
        wait_for(lambda: lease(cluster).epoch == 2, 2 * LEASE_S + 5, "the standby to take over")
        took = time.monotonic() - killed_at
        after = lease(cluster)
        assert after.address == standby.address
        print(f"takeover {took:.2f} s after SIGKILL (lease {LEASE_S:g} s)")
        assert took <= 2 * LEASE_S, f"takeover took {took:.1f} s"
        cluster.reconnect()

        # A worker that has had an order from the new master refuses the old one's.
        target = next(
            (job for job in running.values() if job.tasks and job.state == JobState.RUNNING),
            None,
        )
        assert target is not None
        node = target.tasks[0].node
        wait_for(lambda: seen_epoch(cluster, node) == 2, 60, f"{node} to follow epoch 2")
        task = target.tasks[0]
        stop = worker_pb2.TaskAssignment(
            job_id=target.id,
            task_index=task.task_index,
            lease=task.lease,
            action=worker_pb2.ASSIGNMENT_ACTION_STOP,
        )
        channel, stub = worker_stub(cluster, node)
        try:
            old_orders: list[tuple[Any, Message]] = [
                (
                    stub.StopTask,
                    worker_pb2.StopTaskRequest(job_id=target.id, checkpoint=False, master_epoch=1),
                ),
                (
                    stub.ApplyAssignments,
                    worker_pb2.ApplyAssignmentsRequest(round=1, assignments=[stop], master_epoch=1),
                ),
            ]
            for method, request in old_orders:
                with pytest.raises(grpc.RpcError) as refused:
                    method(request, metadata=auth, timeout=10)
                assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                assert (refused.value.details() or "").startswith("fenced:")
        finally:
            channel.close()

        cluster.local.restart_master(name="master", wait=False)
        log = Path(cluster.local.process("master").log)
        wait_for(
            lambda: log.read_text().count("standing by") >= 1, 30, "the old master to stand by"
        )
        for job_id in ids:
            job = cluster.wait_state(job_id, DONE, timeout=400)
            assert job.state == JobState.COMPLETED, job.reason
            assert job.iterations_done == job.spec.iterations
        assert not listens(first.address)
        final = lease(cluster)
        assert (final.epoch, final.address) == (2, standby.address)
    assert watcher.samples > 10
    assert watcher.violations == []
    assert len(cluster.client.list_jobs()) == 3
    # The refused stop of the old epoch stopped nothing: the job was never preempted.
    assert cluster.job(target.id).preemptions == running[target.id].preemptions


def test_a_frozen_master_that_wakes_after_its_lease_stops_acting_and_exits(
    database: str | None, start_cluster: Callable[..., Cluster]
) -> None:
    """SIGSTOP the active master for longer than its lease. On PostgreSQL the standby takes
    over meanwhile (epoch 2, within two lease periods); on SQLite the frozen master still
    holds the lock file, so the standby waits. Woken with SIGCONT, the old master finds its
    term over before it acts again and exits saying so; the standby leads with epoch 2, no
    worker ever sees an epoch above 2, and every job completes once."""
    cluster = start_cluster(
        "v100:2;k80:2", settings=LEADER_SETTINGS, database=database, standby=True
    )
    standby = cluster.local.process("master-2")
    first_log = Path(cluster.local.process("master").log)
    with TwiceWatcher(cluster.local) as watcher:
        ids = [
            cluster.submit("recommendation", iterations=1200),
            cluster.submit("lstm", iterations=500),
        ]
        wait_for(
            lambda: all(cluster.job(i).state == JobState.RUNNING for i in ids),
            120,
            "all jobs to run",
        )
        held = lease(cluster)
        cluster.local.kill("master", signal.SIGSTOP)
        frozen_at = time.monotonic()
        try:
            if database is None:
                db = Database(cluster.local.database_url)
                try:
                    wait_for(lambda: MasterLeases(db).expired(held), 2 * LEASE_S, "expiry")
                finally:
                    db.dispose()
                assert lease(cluster).epoch == 1, "the standby took over from a live lock holder"
            else:
                wait_for(lambda: lease(cluster).epoch == 2, 2 * LEASE_S + 5, "the takeover")
                assert time.monotonic() - frozen_at <= 2 * LEASE_S
        finally:
            cluster.local.kill("master", signal.SIGCONT)
        wait_for(
            lambda: "lost the master lease" in first_log.read_text(),
            30,
            "the woken master to give up",
        )
        wait_for(
            lambda: lease(cluster).epoch == 2 and lease(cluster).address == standby.address,
            30,
            "the standby to lead",
        )
        cluster.reconnect()
        for job_id in ids:
            job = cluster.wait_state(job_id, DONE, timeout=400)
            assert job.state == JobState.COMPLETED, job.reason
            assert job.iterations_done == job.spec.iterations
    assert watcher.violations == []
    assert lease(cluster).epoch == 2
    assert {seen_epoch(cluster, node) for node in ("local-1", "local-2")} <= {0, 1, 2}
    assert "exiting so that a restart stands by" in first_log.read_text()


@pytest.fixture
def postgres(tmp_path: Path) -> Iterator[str]:
    """A fresh PostgreSQL schema for the masters (set up before the cluster, so dropped
    after it is down)."""
    if "postgresql" not in backends():
        pytest.skip(f"needs {POSTGRES_ENV}: row locks of the lease are PostgreSQL's")
    with temporary_database_url("postgresql", tmp_path) as url:
        yield url


def test_a_master_frozen_inside_a_write_is_replaced_within_two_lease_periods(
    postgres: str, start_cluster: Callable[..., Cluster]
) -> None:
    """SIGSTOP the active master while one of its write transactions holds the lease row
    share-locked. To freeze it there for certain, the test holds the nodes table in
    EXCLUSIVE mode until a heartbeat write of the master (which share-locks the lease row
    first, as every write does) waits on it, stops the master, checks that the lease row is
    locked, and lets the write finish: the master's own session then sits idle inside its
    transaction, as a master frozen between two statements does. The server ends that
    transaction after one lease period, the standby leads within two lease periods, and
    the frozen write never commits. Woken, the old master finds its term over, stores no
    round, and exits; the standby keeps epoch 2."""
    cluster = start_cluster(
        "v100:1;k80:1", settings=LEADER_SETTINGS, database=postgres, standby=True
    )
    first, standby = cluster.local.process("master"), cluster.local.process("master-2")
    first_log = Path(first.log)
    assert lease(cluster).epoch == 1
    engine = create_engine(normalize_url(postgres))
    try:
        with engine.connect() as holder, engine.connect() as probe:
            holder.execute(text("LOCK TABLE nodes IN EXCLUSIVE MODE"))

            def blocked_writer() -> int | None:
                found = probe.execute(
                    text(
                        "SELECT pid FROM pg_locks "
                        "WHERE relation = 'nodes'::regclass AND NOT granted"
                    )
                ).first()
                probe.rollback()
                return None if found is None else int(found.pid)

            wait_for(lambda: blocked_writer() is not None, 30, "a write of the master to wait")
            writer = blocked_writer()
            cluster.local.kill("master", signal.SIGSTOP)
            frozen_at = time.monotonic()
            try:
                with pytest.raises(OperationalError, match="could not obtain lock"):
                    probe.execute(text("SELECT 1 FROM master_lease WHERE id = 1 FOR UPDATE NOWAIT"))
                probe.rollback()
                # The write goes on and its transaction stays open: the master is stopped.
                holder.rollback()
                wait_for(lambda: lease(cluster).epoch == 2, 2 * LEASE_S + 10, "the takeover")
                took = time.monotonic() - frozen_at
                print(f"takeover {took:.2f} s after SIGSTOP inside a write (lease {LEASE_S:g} s)")
                assert took <= 2 * LEASE_S, f"takeover took {took:.1f} s"
                assert lease(cluster).address == standby.address

                def writer_gone() -> bool:
                    alive = probe.execute(
                        text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"),
                        {"pid": writer},
                    ).scalar_one()
                    probe.rollback()
                    return int(alive) == 0

                # Ended by the server, not by the master: the write was rolled back.
                wait_for(writer_gone, 10, "the server to end the frozen transaction")
            finally:
                woken_at = first_log.stat().st_size
                cluster.local.kill("master", signal.SIGCONT)
    finally:
        engine.dispose()
    wait_for(
        lambda: not any(alive for p, alive in cluster.local.processes() if p.name == "master"),
        30,
        "the woken master to exit",
    )
    after_wake = first_log.read_text()[woken_at:]
    assert "lost the master lease" in after_wake
    assert "exiting so that a restart stands by" in after_wake
    assert "round finished" not in after_wake
    final = lease(cluster)
    assert (final.epoch, final.address) == (2, standby.address)
    cluster.reconnect()
    wait_for(
        lambda: {n.state.value for n in cluster.client.list_nodes()} == {"ready"},
        30,
        "the nodes to follow the new master",
    )
    assert {seen_epoch(cluster, node) for node in ("local-1", "local-2")} <= {0, 1, 2}
