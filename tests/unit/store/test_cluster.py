"""Nodes, GPUs, tasks, leases and rounds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from store import Database, NotFoundError, UnitOfWork
from store.domain import Gpu, NewTask
from store.states import ExitKind, GpuHealth, NodeState, TaskState
from tests.unit.store.conftest import submit

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def register(db: Database, name: str = "n1", gpus: int = 2, now: datetime = T0) -> None:
    with db.transaction() as uow:
        uow.nodes.upsert(
            name,
            address=f"{name}:7000",
            gpus=[Gpu(index=i, type="v100", memory_bytes=16 << 30) for i in range(gpus)],
            agent_version="1.0",
            workloads=["resnet", "lstm", "resnet"],
            now=now,
        )


def test_upsert_registers_then_updates_gpus(db: Database) -> None:
    """Re-registration replaces the GPU list (removed GPUs disappear) and keeps one node."""
    register(db, gpus=3)
    with db.transaction() as uow:
        _, previous = uow.nodes.upsert(
            "n1", address="n1:7001", gpus=[Gpu(index=0, type="k80")], now=T0
        )
        assert previous is NodeState.READY
    with db.transaction() as uow:
        nodes = uow.nodes.all()
    assert len(nodes) == 1
    assert nodes[0].address == "n1:7001"
    assert [(g.index, g.type) for g in nodes[0].gpus] == [(0, "k80")]


def test_workloads_are_deduplicated(db: Database) -> None:
    register(db)
    with db.transaction() as uow:
        assert uow.nodes.get("n1").workloads == ("lstm", "resnet")


def test_drain_survives_reregistration_but_unreachable_does_not(db: Database) -> None:
    """An admin's drain sticks across a worker restart; a lost node that returns is READY."""
    register(db, "a")
    register(db, "b")
    with db.transaction() as uow:
        uow.nodes.set_state("a", NodeState.DRAINING, "maintenance")
        uow.nodes.set_state("b", NodeState.UNREACHABLE, "node b lost")
    register(db, "a")
    register(db, "b")
    with db.transaction() as uow:
        assert uow.nodes.get("a").state is NodeState.DRAINING
        assert uow.nodes.get("a").reason == "maintenance"
        assert uow.nodes.get("b").state is NodeState.READY


def test_heartbeat_updates_liveness_and_health(db: Database) -> None:
    """Heartbeats refresh the timestamp and GPU health; silent nodes are found; an unknown
    or unreachable node gets None (it must register again)."""
    register(db, "a", now=T0)
    register(db, "b", now=T0)
    with db.transaction() as uow:
        node = uow.nodes.heartbeat(
            "a",
            now=T0 + timedelta(seconds=30),
            gpus=[Gpu(index=1, type="v100", health=GpuHealth.UNHEALTHY, utilization=0.5)],
        )
        assert node is not None and node.gpus[1].health is GpuHealth.UNHEALTHY
        assert uow.nodes.heartbeat("nope") is None
        silent = uow.nodes.silent_since(T0 + timedelta(seconds=10))
        assert [n.name for n in silent] == ["b"]
        uow.nodes.set_state("b", NodeState.UNREACHABLE, "lost")
        assert uow.nodes.heartbeat("b") is None


def test_tasks_track_leases_and_states(db: Database) -> None:
    """Tasks are active until EXITED/LOST; (job, index, lease) is unique; leases grow."""
    register(db)
    job_id = submit(db)
    with db.transaction() as uow:
        lease = uow.next_lease()
        task = uow.tasks.add(
            NewTask(
                job_id=job_id,
                task_index=0,
                node="n1",
                lease=lease,
                gpu_indices=(0, 1),
                gpu_type="v100",
                rank_offset=0,
                local_batch_sizes=(64, 64),
                round=1,
            )
        )
    with db.transaction() as uow:
        assert [t.id for t in uow.tasks.active_on_node("n1")] == [task.id]
        assert uow.tasks.any_in(TaskState.ASSIGNED)
        assert not uow.tasks.any_in(TaskState.RUNNING)
        assert uow.tasks.find(job_id, 0, lease) == task
        assert uow.tasks.latest_lease(job_id) == lease
        running = uow.tasks.set_state(task.id, TaskState.RUNNING)
        assert running.acknowledged_at is not None
        uow.tasks.set_state(task.id, TaskState.EXITED, exit_kind=ExitKind.FAILED, exit_code=3)
    with db.transaction() as uow:
        assert uow.tasks.active() == []
        assert not uow.tasks.any_in(TaskState.ASSIGNED)
        (old,) = uow.tasks.for_job(job_id)
        assert old.exit_kind is ExitKind.FAILED and old.exit_code == 3
        assert uow.next_lease() > lease


def test_leases_are_strictly_increasing_across_units_of_work(db: Database) -> None:
    with db.transaction() as uow:
        first = [uow.next_lease() for _ in range(3)]
    with db.transaction() as uow:
        second = uow.next_lease()
    assert first == sorted(set(first)) and second > first[-1]


def test_rounds_are_numbered_and_the_last_is_found(db: Database) -> None:
    with db.transaction() as uow:
        assert uow.rounds.last() is None
        r1 = uow.rounds.add(policy="fifo", started_at=T0, plan={"jobs": {}}, actions=0)
        r2 = uow.rounds.add(policy="gavel", started_at=T0, plan={"jobs": {"1": [0]}}, actions=2)
        uow.rounds.finish(r2.number, duration_s=0.25, dispatch_failures=1)
    with db.transaction() as uow:
        last = uow.rounds.last()
    assert r2.number == r1.number + 1
    assert last is not None and last.number == r2.number
    assert last.plan == {"jobs": {"1": [0]}} and last.dispatch_failures == 1
    with pytest.raises(NotFoundError), db.transaction() as uow:
        uow.rounds.get(999)


def test_addresses_and_liveness_read_without_gpus(db: Database) -> None:
    """The cheap reads used on hot paths agree with the full node objects."""
    register(db, "a")
    with db.transaction() as uow:
        uow.nodes.set_state("a", NodeState.DRAINING, "x")
        assert uow.nodes.addresses() == {"a": ("a:7000", NodeState.DRAINING)}
        assert uow.nodes.liveness("a") == (
            NodeState.DRAINING,
            {0: GpuHealth.HEALTHY, 1: GpuHealth.HEALTHY},
        )
        assert uow.nodes.liveness("ghost") is None


def test_heard_writes_many_nodes_liveness_in_one_call(db: Database) -> None:
    """A batch of heartbeats moves each node's time forward (never back), writes the
    reported GPUs' utilization (not health, and not GPUs the node does not have), and
    leaves unreachable and unknown nodes alone."""
    register(db, "a", now=T0)
    register(db, "b", now=T0 + timedelta(seconds=60))
    register(db, "c", now=T0)
    with db.transaction() as uow:
        uow.nodes.set_state("c", NodeState.UNREACHABLE, "lost")
    reported = [
        Gpu(index=0, type="v100", health=GpuHealth.UNHEALTHY, utilization=0.25),
        Gpu(index=7, type="v100", utilization=0.5),
    ]
    with db.transaction() as uow:
        written = uow.nodes.heard(
            {
                "a": (T0 + timedelta(seconds=30), reported),
                "b": (T0 + timedelta(seconds=30), [Gpu(index=1, type="v100", utilization=1.0)]),
                "c": (T0 + timedelta(seconds=30), reported),
                "ghost": (T0 + timedelta(seconds=30), reported),
            }
        )
        assert written == 2
    with db.transaction() as uow:
        a, b, c = (uow.nodes.get(name) for name in ("a", "b", "c"))
    assert a.last_heartbeat == T0 + timedelta(seconds=30)
    assert [(g.utilization, g.health) for g in a.gpus] == [
        (0.25, GpuHealth.HEALTHY),
        (0.0, GpuHealth.HEALTHY),
    ]
    assert b.last_heartbeat == T0 + timedelta(seconds=60)
    assert [g.utilization for g in b.gpus] == [0.0, 1.0]
    assert c.last_heartbeat == T0 and [g.utilization for g in c.gpus] == [0.0, 0.0]


def test_capacity_lists_the_gpus_and_workloads_of_nodes_not_lost(db: Database) -> None:
    """What submissions are validated against: every GPU (type, memory) and workload of the
    nodes that are not unreachable; a drained node still counts (it comes back)."""
    register(db, "a", gpus=2)
    register(db, "b", gpus=1)
    with db.transaction() as uow:
        uow.nodes.upsert(
            "c", address="c:7000", gpus=[Gpu(index=0, type="k80")], workloads=["lstm"], now=T0
        )
        uow.nodes.upsert(
            "d", address="d:7000", gpus=[Gpu(index=0, type="a100")], workloads=["bert"], now=T0
        )
        uow.nodes.set_state("c", NodeState.DRAINED, "maintenance")
        uow.nodes.set_state("d", NodeState.UNREACHABLE, "lost")
    with db.transaction() as uow:
        gpus, workloads = uow.nodes.capacity()
    assert sorted(gpus) == [("k80", 0)] + [("v100", 16 << 30)] * 3
    assert workloads == {"lstm", "resnet"}


def test_the_tasks_around_the_assigned_ones_are_those_of_their_jobs_and_nodes(
    db: Database,
) -> None:
    """around_assigned gives every active task of a job with an assigned task (on any
    node) and every active task on a node with one; not the others, and none ended."""
    for name in ("n1", "n2", "n3"):
        register(db, name, gpus=4)
    spread, beside, elsewhere, ended = (submit(db) for _ in range(4))

    def add(uow: UnitOfWork, job_id: int, node: str, index: int, gpus: tuple[int, ...]) -> int:
        return uow.tasks.add(
            NewTask(
                job_id=job_id,
                task_index=index,
                node=node,
                lease=uow.next_lease(),
                gpu_indices=gpus,
                gpu_type="v100",
                rank_offset=0,
                local_batch_sizes=(64,) * len(gpus),
                round=1,
            )
        ).id

    with db.transaction() as uow:
        # The assigned task is on n1; its job has a running task on n2.
        assigned = add(uow, spread, "n1", 0, (0,))
        other_half = add(uow, spread, "n2", 1, (0,))
        on_its_node = add(uow, beside, "n1", 0, (1,))
        unrelated = add(uow, elsewhere, "n3", 0, (0,))
        gone = add(uow, ended, "n1", 0, (2,))
    with db.transaction() as uow:
        for task_id in (other_half, on_its_node, unrelated, gone):
            uow.tasks.set_state(task_id, TaskState.RUNNING)
        uow.tasks.set_state(gone, TaskState.EXITED, exit_kind=ExitKind.COMPLETED, exit_code=0)
    with db.transaction() as uow:
        around = {t.id for t in uow.tasks.around_assigned()}
        assert around == {assigned, other_half, on_its_node}
        assert {t.id for t in uow.tasks.active()} == {assigned, other_half, on_its_node, unrelated}
        uow.tasks.set_state(assigned, TaskState.RUNNING)
    with db.transaction() as uow:
        assert uow.tasks.around_assigned() == []
