"""Which of a job's attempts ran, as `hctl logs` tells them (master.jobs.logs.attempts_of)."""

from __future__ import annotations

from datetime import UTC, datetime

from master.jobs.logs import attempts_of
from store.domain import Task
from store.states import ExitKind, ProgramKind, TaskState
from tests.unit.master.test_pinning import make_job

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def task(lease: int, state: TaskState, *, acked: bool, exit_kind: ExitKind | None) -> Task:
    return Task(
        id=lease,
        job_id=1,
        task_index=0,
        node="n1",
        lease=lease,
        gpu_indices=(0,),
        gpu_type="v100",
        state=state,
        rank_offset=0,
        local_batch_sizes=(32,),
        accumulation_steps=1,
        num_copies=1,
        copy_index=0,
        shared_with_job_id=0,
        round=lease,
        iteration_budget=0,
        created_at=NOW,
        acknowledged_at=NOW if acked else None,
        exit_kind=exit_kind,
        exit_code=0 if exit_kind is ExitKind.COMPLETED else None,
        finished_at=NOW,
    )


def test_a_task_whose_exit_overtook_its_acknowledgement_ran() -> None:
    """A command that exits at once reports its exit before the worker's acknowledgement
    is stored: that attempt ran (its output is read); one written off unacknowledged and
    with no exit reported never started."""
    job = make_job(1, ProgramKind.COMMAND)
    refused = task(1, TaskState.LOST, acked=False, exit_kind=None)
    fast = task(2, TaskState.EXITED, acked=False, exit_kind=ExitKind.COMPLETED)
    first, second = attempts_of(job, [refused, fast], [])
    assert first.start_failure != ""
    assert second.start_failure == ""
