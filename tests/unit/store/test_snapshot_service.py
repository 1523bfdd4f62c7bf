"""The daemon's job views carry the service each job received, from the accounting records,
as the simulator's do: las and hare order jobs by it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from master.rounds.snapshot import read_round_input
from master.scheduling.policies.las import LasPolicy
from master.scheduling.throughput import ThroughputModel
from store import Database
from store.domain import NewTask
from store.states import ExitKind, JobState, TaskState
from tests.unit.store.conftest import submit
from tests.unit.store.test_cluster import register

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def place(db: Database, job_id: int, lease: int, gpu_type: str, gpus: int) -> int:
    with db.transaction() as uow:
        return uow.tasks.add(
            NewTask(
                job_id=job_id,
                task_index=0,
                node="n1",
                lease=lease,
                gpu_indices=tuple(range(gpus)),
                gpu_type=gpu_type,
                rank_offset=0,
                local_batch_sizes=(16,) * gpus,
            ),
            now=T0,
        ).id


def test_views_carry_gpu_seconds_per_type_and_run_time_of_every_attempt(db: Database) -> None:
    """An ended attempt (2 v100s for 60 s) and a running one (1 k80 for 30 s so far) give
    {v100: 120, k80: 30} GPU-seconds and 90 s of run time; a job that never ran has none."""
    register(db)
    ran = submit(db, user="alice")
    fresh = submit(db, user="bob", name="resnet-b")
    first = place(db, ran, 1, "v100", 2)
    with db.transaction() as uow:
        uow.tasks.set_state(first, TaskState.STARTING, now=T0)
        uow.tasks.set_state(
            first, TaskState.EXITED, now=T0 + timedelta(seconds=60), exit_kind=ExitKind.STOPPED
        )
        uow.jobs.transition(ran, JobState.RUNNING, kind="scheduled", reason="test", at=T0)
    second = place(db, ran, 2, "k80", 1)
    with db.transaction() as uow:
        uow.tasks.set_state(second, TaskState.STARTING, now=T0 + timedelta(seconds=100))
    now = T0 + timedelta(seconds=130)
    with db.transaction() as uow:
        views = {
            v.id: v for v in read_round_input(uow, ThroughputModel(), 60.0, now=now).snapshot.jobs
        }
    assert dict(views[ran].gpu_seconds_by_type) == pytest.approx({"v100": 120.0, "k80": 30.0})
    assert views[ran].run_seconds == pytest.approx(90.0)
    assert dict(views[fresh].gpu_seconds_by_type) == {}
    assert views[fresh].run_seconds == 0.0
    # las puts the job that received more than its first threshold in a lower queue.
    las = LasPolicy(queue_thresholds=(100.0,))
    assert las.queue_of(views[ran], now.timestamp()) > las.queue_of(views[fresh], now.timestamp())
