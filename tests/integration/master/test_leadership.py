"""Exactly one active master per database: the standby, the takeover, the term's deadline,
and a deposed master that neither schedules nor writes (SQLite and PostgreSQL)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy import text

from master.daemon import Master
from master.process.leadership import Leadership, NotLeaderError, Role, idle_transaction_limit_s
from protos.hadar.v1 import common_pb2, hadar_pb2
from store import Database, UnitOfWork
from store.leadership import MasterLeases
from store.migrate import upgrade
from store.testing import POSTGRES_ENV, backends, temporary_database_url
from tests.integration.master.conftest import Cluster, make_settings
from tests.integration.master.fakes import wait_for

REPO = Path(__file__).resolve().parents[3]


def resnet() -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name="r", num_gpus=1, iterations=100, workload=common_pb2.WorkloadProgram(name="resnet")
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_second_master_stands_by_then_takes_over_with_the_next_epoch(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A second master on the same database neither listens nor schedules while the first
    is active; when the first stops it becomes active with epoch 2, and its orders to the
    workers carry epoch 2 where the first's carried epoch 1."""
    first = cluster.master()
    assert first.leadership.role is Role.ACTIVE and first.leadership.epoch == 1
    worker = cluster.worker(first, "n1", num_gpus=2)
    api = cluster.api(first)
    job = api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=resnet())).job
    first.run_round()
    assert job.id in worker.running_jobs()
    assert set(worker.epochs) == {1}

    second = Master(make_settings(cluster.database, tmp_path, leader_renew_s=0.1))
    ports: list[int] = []
    starting = threading.Thread(target=lambda: ports.append(second.start()))
    starting.start()
    try:
        wait_for(lambda: second.leadership.waiting_for, what="the second master to stand by")
        assert second.leadership.role is Role.STANDBY
        assert second.port == 0
        with pytest.raises(NotLeaderError):
            second.run_round()

        cluster.masters.remove(first)
        first.stop(grace=0.5)
        starting.join(timeout=30)
        assert not starting.is_alive()
        cluster.masters.append(second)
        assert ports and ports[0] > 0
        assert second.leadership.role.value == "active"
        assert second.leadership.epoch == 2
        worker.epochs.clear()
        second.run_round()
        assert worker.epochs and set(worker.epochs) == {2}
        assert job.id in worker.running_jobs()
    finally:
        second._signalled.set()
        starting.join(timeout=30)
        if second not in cluster.masters:
            second.stop(grace=0.5)


def test_a_master_whose_lease_was_taken_stops_scheduling_and_writing(cluster: Cluster) -> None:
    """Once another master holds a later term, the old one finds out at its next renewal:
    it is deposed, its rounds are refused, a submission gets UNAVAILABLE and is not stored,
    and it serves nothing else either (a read, a worker's heartbeat: UNAVAILABLE)."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=2)
    api = cluster.api(master)
    other = Database(cluster.database)
    try:
        usurper = MasterLeases(other).acquire("usurper", "elsewhere:1", 3600, force=True)
        assert usurper is not None and usurper.epoch == 2
        master.leadership.renew()
        assert master.leadership.role is Role.DEPOSED
        assert "another master took the lease" in master.deposed_reason
        with pytest.raises(NotLeaderError):
            master.run_round()
        with pytest.raises(grpc.RpcError) as refused:
            api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=resnet()))
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        with other.transaction() as uow:
            assert uow.jobs.query(limit=10) == []
        with pytest.raises(grpc.RpcError) as read:
            api.ListJobs(hadar_pb2.ListJobsRequest())
        assert read.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.RpcError) as beat:
            worker.heartbeat()
        assert beat.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        other.dispose()


def test_a_worker_refusing_an_order_as_fenced_makes_the_master_step_down(
    cluster: Cluster,
) -> None:
    """A worker that answers "fenced" has obeyed a newer master: the master that sent the
    order stops acting at once, within that very round (recording the answers is refused),
    without waiting for its next renewal; its next round is refused too."""
    master = cluster.master()
    worker = cluster.worker(master, "n1", num_gpus=2)
    api = cluster.api(master)
    api.SubmitJob(hadar_pb2.SubmitJobRequest(spec=resnet()))
    worker.follows_epoch = 2
    with pytest.raises(NotLeaderError):
        master.run_round()
    assert worker.epochs == []
    assert master.leadership.role is Role.DEPOSED
    assert "refused an order" in master.deposed_reason
    assert "fenced:" in master.deposed_reason
    with pytest.raises(NotLeaderError):
        master.run_round()


@pytest.mark.parametrize("backend", backends())
def test_an_active_master_that_cannot_renew_stops_acting_at_its_deadline(
    backend: str, tmp_path: Path
) -> None:
    """The term's deadline runs from before the last successful renewal: one lease period
    later, unrenewed, fence() refuses and the master is deposed (once), before any standby
    may take the lease in the database."""
    with temporary_database_url(backend, tmp_path) as url:
        database = Database(url)
        upgrade(database.url, engine=database.engine)
        clock = FakeClock()
        lost: list[str] = []
        leader = Leadership(
            database, address="a:1", lease_s=10, renew_s=3, on_lost=lost.append, clock=clock
        )
        try:
            term = leader.try_lead()
            assert term is not None and term.epoch == 1
            clock.now += 9.9
            assert leader.fence() == 1
            leader.renew()
            clock.now += 9.9
            assert leader.fence() == 1
            clock.now += 0.2
            with pytest.raises(NotLeaderError, match="deposed"):
                leader.fence()
            with pytest.raises(NotLeaderError):
                leader.fence()
            assert leader.role is Role.DEPOSED
            assert len(lost) == 1 and "not renewed within 10 s" in lost[0]
        finally:
            leader.release()
            database.dispose()


@pytest.mark.parametrize("backend", backends())
def test_a_renewal_after_the_deadline_does_not_revive_the_term(
    backend: str, tmp_path: Path
) -> None:
    """A master that wakes past its deadline (it was frozen) is deposed by its next renewal
    even though nobody has taken the lease yet: a standby may already be acting on it."""
    with temporary_database_url(backend, tmp_path) as url:
        database = Database(url)
        upgrade(database.url, engine=database.engine)
        clock = FakeClock()
        lost: list[str] = []
        leader = Leadership(
            database, address="a:1", lease_s=10, renew_s=3, on_lost=lost.append, clock=clock
        )
        try:
            assert leader.try_lead() is not None
            clock.now += 10.5
            leader.renew()
            assert leader.role is Role.DEPOSED
            assert len(lost) == 1
            current = MasterLeases(database).current()
            assert current is not None and current.holder == leader.holder
        finally:
            leader.release()
            database.dispose()


def test_on_sqlite_the_lock_file_keeps_a_second_master_out_until_the_first_lets_go(
    tmp_path: Path,
) -> None:
    """With SQLite, a second master is refused by the lock file beside the database even
    once the first's lease has expired; the moment the first lets go (it exits or stops)
    the second leads, without waiting for any lease, with the next epoch."""
    url = f"sqlite:///{tmp_path / 'hadar.db'}"
    database = Database(url)
    upgrade(database.url, engine=database.engine)
    first = Leadership(database, address="a:1", lease_s=0.2, renew_s=0.1, on_lost=print)
    second = Leadership(database, address="b:1", lease_s=0.2, renew_s=0.1, on_lost=print)
    try:
        assert first.try_lead() is not None
        lease = MasterLeases(database).current()
        assert lease is not None
        wait_for(lambda: MasterLeases(database).expired(lease), what="the lease to expire")
        assert second.try_lead() is None
        assert "hadar.db.master-lock is locked by" in second.waiting_for
        assert "a:1" in second.waiting_for
        first.release()
        term = second.try_lead()
        assert term is not None and term.epoch == 2
        assert (tmp_path / "hadar.db.master-lock").read_text().split()[1] == "b:1"
    finally:
        first.release()
        second.release()
        database.dispose()


def test_under_systemd_a_standby_is_ready_says_so_and_reports_its_takeover(
    cluster: Cluster, tmp_path: Path
) -> None:
    """`hadar-master run` on a database whose lease another master holds tells systemd
    READY=1 with STATUS "standby: the active master is ..." (so `systemctl start` returns);
    once the active master stops, it reports "active master, epoch 2", and on SIGTERM it
    stops as usual."""
    active = cluster.master(listen="127.0.0.1:0")
    notify_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify_path))
    sock.settimeout(180)  # a loaded machine imports slowly
    state = tmp_path / "standby-state"
    state.mkdir()
    env = dict(
        os.environ,
        NOTIFY_SOCKET=str(notify_path),
        STATE_DIRECTORY=str(state),
        HADAR_LEADER_RENEW_S="0.2",
        HADAR_LEADER_LEASE_S="1",
        HADAR_CLUSTER_TOKEN="cluster-secret",
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "master.cli",
            "--listen",
            "127.0.0.1:0",
            "--database",
            cluster.database,
            "--metrics-port",
            "-1",
            "--log-format",
            "json",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        ready = sock.recv(512).decode()
        assert ready.startswith("READY=1\nSTATUS=standby: "), ready
        assert "127.0.0.1:0" in ready or "master-lock is locked by" in ready, ready
        cluster.masters.remove(active)
        active.stop(grace=0.5)
        assert sock.recv(512) == b"STATUS=active master, epoch 2"
        assert sock.recv(512) == b"READY=1"
        process.send_signal(signal.SIGTERM)
        assert sock.recv(512) == b"STOPPING=1"
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        sock.close()


POSTGRES_ONLY = pytest.mark.skipif(
    "postgresql" not in backends(), reason=f"needs {POSTGRES_ENV} (PostgreSQL row locks)"
)


@POSTGRES_ONLY
def test_a_standby_takes_over_from_a_master_frozen_inside_a_write(tmp_path: Path) -> None:
    """A master frozen halfway through a write keeps the lease row locked (FOR KEY SHARE)
    and renews no more. The server ends that transaction once it has been idle for a lease
    period, so the standby leads within two lease periods instead of waiting for the
    writer; the write, resumed, commits nothing, and the old master has stopped acting."""
    # The takeover waits for PostgreSQL to end the idle transaction, then for the standby's
    # next try: a 2 s lease left too little room for those on a busy machine (5.1 s).
    lease_s, renew_s = 4.0, 1.0
    with temporary_database_url("postgresql", tmp_path) as url:
        cluster = Cluster(url, tmp_path)
        standby_db = Database(url)
        try:
            master = cluster.master(leader_lease_s=lease_s, leader_renew_s=renew_s)
            with master.database.session() as session:
                limit = session.execute(
                    text("SELECT setting FROM pg_settings WHERE name = :name"),
                    {"name": "idle_in_transaction_session_timeout"},
                ).scalar_one()
            assert int(limit) == int(idle_transaction_limit_s(lease_s) * 1000)

            inside, resume = threading.Event(), threading.Event()
            outcome: list[BaseException | None] = []

            def frozen_write(uow: UnitOfWork) -> None:
                uow.tokens.create("late-writer", admin=False, description="")
                uow.session.flush()
                inside.set()
                resume.wait(60)

            def write() -> None:
                try:
                    master.tx.write(frozen_write, jobs=False)
                except BaseException as exc:  # what the resumed write ran into
                    outcome.append(exc)
                else:
                    outcome.append(None)

            # The freeze stops the whole process: its renewals too, until it resumes.
            renew = master.leadership._leases.renew

            def frozen_renew(*args: Any, **kwargs: Any) -> Any:
                if inside.is_set():
                    resume.wait(60)
                return renew(*args, **kwargs)

            master.leadership._leases.renew = frozen_renew  # type: ignore[method-assign]
            writer = threading.Thread(target=write)
            writer.start()
            standby = Leadership(
                standby_db, address="b:1", lease_s=lease_s, renew_s=renew_s, on_lost=print
            )
            stop = threading.Event()
            led: list[float] = []

            def elect() -> None:
                if standby.wait_to_lead(stop):
                    led.append(time.monotonic())

            try:
                assert inside.wait(30)
                frozen_at = time.monotonic()
                electing = threading.Thread(target=elect)
                electing.start()
                electing.join(timeout=2 * lease_s + 5)
                took = (led[0] - frozen_at) if led else None
                print(f"takeover {took} s after the write froze (lease {lease_s:g} s)")
                assert took is not None and took <= 2 * lease_s, took
                assert standby.epoch == 2
            finally:
                stop.set()
                resume.set()
                writer.join(timeout=30)
            wait_for(
                lambda: master.leadership.role is Role.DEPOSED,
                what="the resumed master to find its term over",
            )
            assert outcome and outcome[0] is not None, "the frozen write committed"
            with standby_db.transaction() as uow:
                assert uow.tokens.find_user("late-writer") is None
            with pytest.raises(NotLeaderError):
                master.tx.write(lambda uow: uow.tokens.create("later", admin=False), jobs=False)
            standby.release()
        finally:
            cluster.close()
            standby_db.dispose()


@POSTGRES_ONLY
def test_a_standby_does_not_queue_behind_a_lock_on_an_expired_lease(tmp_path: Path) -> None:
    """An attempt to take an expired lease whose row another transaction still locks ends
    after one renew interval, changes nothing, and says why the standby waits; once the
    lock is gone the next attempt leads."""
    with temporary_database_url("postgresql", tmp_path) as url:
        database = Database(url)
        upgrade(database.url, engine=database.engine)
        old = MasterLeases(database).acquire("old", "a:1", lease_s=0.1)
        assert old is not None
        wait_for(lambda: MasterLeases(database).expired(old), what="the lease to expire")
        standby = Leadership(database, address="b:1", lease_s=2, renew_s=0.3, on_lost=print)
        holder = database.engine.connect()
        try:
            holder.execute(text("SELECT epoch FROM master_lease WHERE id = 1 FOR SHARE"))
            tried: list[object] = []
            attempt = threading.Thread(target=lambda: tried.append(standby.try_lead()))
            attempt.start()
            attempt.join(timeout=0.3 + 2)
            assert tried == [None], "the attempt waited for the lock"
            assert "has run out, but an unfinished transaction still locks it" in (
                standby.waiting_for
            )
            assert "a:1 (epoch 1)" in standby.waiting_for
            holder.rollback()
            attempt.join(timeout=30)
            term = standby.try_lead()
            assert term is not None and term.epoch == 2
        finally:
            holder.close()
            standby.release()
            database.dispose()
