"""Accounting in the store: every ended attempt leaves a usage record; time limits and
history queries (SQLite and PostgreSQL)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from store import Database
from store.domain import NewJob, NewTask
from store.states import ExitKind, JobState, TaskState
from tests.unit.store.conftest import make_spec, submit
from tests.unit.store.test_cluster import register

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def place(db: Database, job_id: int, lease: int, gpus: tuple[int, ...] = (0, 1)) -> int:
    with db.transaction() as uow:
        task = uow.tasks.add(
            NewTask(
                job_id=job_id,
                task_index=0,
                node="n1",
                lease=lease,
                gpu_indices=gpus,
                gpu_type="v100",
                rank_offset=0,
                local_batch_sizes=(16,) * len(gpus),
            ),
            now=T0,
        )
    return task.id


def test_an_ended_attempt_is_recorded_with_its_gpu_seconds_and_exit(db: Database) -> None:
    """A task that started and exited leaves one record: user, GPU type, GPUs, start at
    the acknowledgement, end at the exit, GPU-seconds = seconds x GPUs, exit code."""
    register(db)
    job_id = submit(db, user="bob")
    task_id = place(db, job_id, lease=1)
    with db.transaction() as uow:
        uow.tasks.set_state(task_id, TaskState.STARTING, now=T0 + timedelta(seconds=10))
        assert [r.task_id for r in uow.usage.running()] == [task_id]
    with db.transaction() as uow:
        uow.tasks.set_state(
            task_id,
            TaskState.EXITED,
            now=T0 + timedelta(seconds=70),
            exit_kind=ExitKind.FAILED,
            exit_code=3,
        )
    with db.transaction() as uow:
        (record,) = uow.usage.ended()
        assert uow.usage.running() == []
        assert uow.usage.ended_totals() == {("bob", "v100"): 120.0}
    assert (record.job_id, record.user, record.gpu_type, record.num_gpus) == (
        job_id,
        "bob",
        "v100",
        2,
    )
    assert record.started_at == T0 + timedelta(seconds=10)
    assert record.ended_at == T0 + timedelta(seconds=70)
    assert record.gpu_seconds(T0) == 120.0
    assert (record.end_state, record.exit_kind, record.exit_code) == (
        TaskState.EXITED,
        ExitKind.FAILED,
        3,
    )


def test_a_task_never_started_uses_nothing_and_a_lost_one_is_extended(db: Database) -> None:
    """A task written off before any worker took it leaves no record; one written off
    while running is recorded up to then, and extended (not duplicated) when it ends
    later."""
    register(db)
    job_id = submit(db)
    never = place(db, job_id, lease=1)
    ran = place(db, job_id, lease=2)
    with db.transaction() as uow:
        uow.tasks.set_state(never, TaskState.LOST, now=T0 + timedelta(seconds=5))
        uow.tasks.set_state(ran, TaskState.RUNNING, now=T0)
    with db.transaction() as uow:
        uow.tasks.set_state(ran, TaskState.LOST, now=T0 + timedelta(seconds=30))
    with db.transaction() as uow:
        assert [r.gpu_seconds(T0) for r in uow.usage.ended()] == [60.0]
        uow.tasks.set_state(
            ran, TaskState.EXITED, now=T0 + timedelta(seconds=50), exit_kind=ExitKind.COMPLETED
        )
    with db.transaction() as uow:
        (record,) = uow.usage.ended()
    assert (record.task_id, record.gpu_seconds(T0), record.end_state) == (
        ran,
        100.0,
        TaskState.EXITED,
    )


def test_usage_queries_filter_by_user_period_and_job(db: Database) -> None:
    """ended() keeps records overlapping [since, until] of the user asked; for_jobs()
    returns ended and running attempts of the jobs asked."""
    register(db, gpus=4)
    alice = submit(db, user="alice")
    bob = submit(db, user="bob", name="b")
    first = place(db, alice, lease=1, gpus=(0,))
    second = place(db, bob, lease=2, gpus=(1,))
    third = place(db, alice, lease=3, gpus=(2,))
    with db.transaction() as uow:
        for task_id in (first, second, third):
            uow.tasks.set_state(task_id, TaskState.RUNNING, now=T0)
        uow.tasks.set_state(first, TaskState.EXITED, now=T0 + timedelta(hours=1))
        uow.tasks.set_state(second, TaskState.EXITED, now=T0 + timedelta(hours=3))
    with db.transaction() as uow:
        assert [r.task_id for r in uow.usage.ended(user="alice")] == [first]
        late = uow.usage.ended(since=T0 + timedelta(hours=2))
        assert [r.task_id for r in late] == [second]
        assert uow.usage.ended(until=T0 - timedelta(seconds=1)) == []
        assert {r.task_id for r in uow.usage.for_jobs([alice])} == {first, third}
        assert [r.user for r in uow.usage.running(user="alice")] == ["alice"]
        assert uow.usage.running(user="bob") == []


def test_time_limits_round_trip_and_time_limited_jobs_are_found(db: Database) -> None:
    """A spec's time limit is stored; time_limited() lists only jobs with a limit in the
    states asked."""
    limited = dataclasses.replace(make_spec("limited"), time_limit_s=1800)
    with db.transaction() as uow:
        job, _ = uow.jobs.add(NewJob(user="alice", spec=limited))
    plain = submit(db)
    with db.transaction() as uow:
        assert uow.jobs.get(job.id).spec.time_limit_s == 1800
        assert [j.id for j in uow.jobs.time_limited([JobState.PENDING])] == [job.id]
        assert uow.jobs.time_limited([JobState.RUNNING]) == []
        assert uow.jobs.get(plain).spec.time_limit_s == 0


def test_history_lists_ended_jobs_newest_first_with_filters(db: Database) -> None:
    """history() returns only terminal jobs, newest id first, filtered by user, end time
    and state, and pages by id."""
    ids = [submit(db, user="alice" if i % 2 == 0 else "bob", name=f"j{i}") for i in range(5)]
    ends = {
        ids[0]: JobState.COMPLETED,
        ids[1]: JobState.FAILED,
        ids[2]: JobState.TIMEOUT,
        ids[3]: JobState.CANCELLED,
    }
    with db.transaction() as uow:
        for number, (job_id, state) in enumerate(ends.items()):
            uow.jobs.transition(job_id, JobState.RUNNING, kind="scheduled", reason="r", at=T0)
            uow.jobs.transition(
                job_id, state, kind="end", reason="end", at=T0 + timedelta(hours=number)
            )
    with db.transaction() as uow:
        assert [j.id for j in uow.jobs.history()] == [ids[3], ids[2], ids[1], ids[0]]
        assert [j.id for j in uow.jobs.history(user="alice")] == [ids[2], ids[0]]
        assert [j.id for j in uow.jobs.history(states=[JobState.TIMEOUT])] == [ids[2]]
        recent = uow.jobs.history(since=T0 + timedelta(hours=2))
        assert [j.id for j in recent] == [ids[3], ids[2]]
        page = uow.jobs.history(before_id=ids[2], limit=1)
        assert [j.id for j in page] == [ids[1]]


def test_a_lost_task_whose_node_returns_and_stops_it_keeps_one_record(db: Database) -> None:
    """LOST -> STOPPING (its node came back still running it) -> EXITED: one record, ending
    at the real exit."""
    register(db)
    job_id = submit(db)
    task_id = place(db, job_id, lease=1, gpus=(0,))
    with db.transaction() as uow:
        uow.tasks.set_state(task_id, TaskState.RUNNING, now=T0)
        uow.tasks.set_state(task_id, TaskState.LOST, now=T0 + timedelta(seconds=10))
    with db.transaction() as uow:
        uow.tasks.set_state(task_id, TaskState.STOPPING, now=T0 + timedelta(seconds=20))
        assert uow.usage.running() == []
    with db.transaction() as uow:
        uow.tasks.set_state(
            task_id, TaskState.EXITED, now=T0 + timedelta(seconds=40), exit_kind=ExitKind.STOPPED
        )
    with db.transaction() as uow:
        (record,) = uow.usage.ended()
    assert record.gpu_seconds(T0) == 40.0


def test_ended_attempts_of_unfinished_jobs_leave_out_those_of_ended_jobs(db: Database) -> None:
    """The ended attempts of the jobs not in a terminal state, oldest first, equal the
    records asked for by those jobs' ids; a job that ended is left out, one that never ran
    has none."""
    register(db, gpus=4)
    preempted, done, fresh = (submit(db, name=n) for n in ("a", "b", "c"))
    for lease, job_id in enumerate((preempted, done, preempted), start=1):
        task_id = place(db, job_id, lease=lease, gpus=(lease,))
        with db.transaction() as uow:
            uow.tasks.set_state(task_id, TaskState.STARTING, now=T0 + timedelta(seconds=lease))
            uow.tasks.set_state(
                task_id,
                TaskState.EXITED,
                now=T0 + timedelta(seconds=60),
                exit_kind=ExitKind.STOPPED,
            )
    with db.transaction() as uow:
        uow.jobs.transition(done, JobState.CANCELLED, kind="cancelled", reason="by alice")
    with db.transaction() as uow:
        records = uow.usage.ended_of_unfinished_jobs()
        assert records == uow.usage.ended(job_ids=[preempted, fresh])
    assert [(r.job_id, r.lease) for r in records] == [(preempted, 1), (preempted, 3)]
