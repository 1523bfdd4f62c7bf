"""Task states change only along the task life's table, checked at every change."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from store import Database
from store.domain import NewTask
from store.errors import InvalidTaskTransitionError
from store.models import TaskRow
from store.repositories import convert
from store.states import ALLOWED_TASK_TRANSITIONS, FINISHED_TASK_STATES, TaskState
from tests.unit.store.conftest import submit
from tests.unit.store.test_cluster import register


def test_every_pair_of_task_states_is_allowed_exactly_as_the_table_says(db: Database) -> None:
    """Walks all 36 (from, to) pairs: a move in the table is stored, any other (a task
    stopping twice, an exited task coming back) raises and changes nothing."""
    register(db)
    job_id = submit(db)
    refused: list[tuple[TaskState, TaskState]] = []
    lease = 0
    for from_state in TaskState:
        for to_state in TaskState:
            lease += 1
            with db.transaction() as uow:
                task = uow.tasks.add(
                    NewTask(
                        job_id=job_id,
                        task_index=0,
                        node="n1",
                        lease=lease,
                        gpu_indices=(0,),
                        gpu_type="v100",
                        rank_offset=0,
                        local_batch_sizes=(32,),
                        state=from_state,
                    )
                )
            with db.transaction() as uow:
                try:
                    changed = uow.tasks.set_state(task.id, to_state)
                except InvalidTaskTransitionError as exc:
                    assert str(exc) == (
                        f"task {task.id} of job {job_id}: cannot go from {from_state.value} "
                        f"to {to_state.value}"
                    )
                    refused.append((from_state, to_state))
                else:
                    assert changed.state is to_state
            with db.transaction() as uow:
                stored = uow.tasks.get(task.id).state
            expected = to_state if to_state in ALLOWED_TASK_TRANSITIONS[from_state] else from_state
            assert stored is expected, (from_state, to_state)
    allowed = sum(len(targets) for targets in ALLOWED_TASK_TRANSITIONS.values())
    assert len(refused) == 36 - allowed
    assert (TaskState.STOPPING, TaskState.STOPPING) in refused
    assert (TaskState.EXITED, TaskState.RUNNING) in refused


def test_the_table_knows_every_state_and_exited_is_final() -> None:
    """Every state has an entry; EXITED leads nowhere; every state can reach EXITED."""
    assert set(ALLOWED_TASK_TRANSITIONS) == set(TaskState)
    assert ALLOWED_TASK_TRANSITIONS[TaskState.EXITED] == frozenset()
    reach = {TaskState.EXITED}
    changed = True
    while changed:
        before = len(reach)
        reach |= {s for s, targets in ALLOWED_TASK_TRANSITIONS.items() if targets & reach}
        changed = len(reach) != before
    assert reach == set(TaskState)


@pytest.mark.parametrize("state", list(TaskState))
def test_no_state_moves_to_itself(state: TaskState) -> None:
    """A repeated change is a bug in its caller, not a no-op: the table has no self-moves."""
    assert state not in ALLOWED_TASK_TRANSITIONS[state]


def test_active_tasks_read_as_plain_columns_equal_those_read_as_rows(db: Database) -> None:
    """active, read as plain columns, returns what the ORM's rows hold (every task holding
    GPUs, by job and index, every field), including a change made earlier in the same unit
    of work, and a task it returned can still be changed there."""
    register(db)
    jobs = [submit(db, name=f"job-{i}") for i in range(3)]
    with db.transaction() as uow:
        for lease, (job_id, state) in enumerate(
            [
                (jobs[2], TaskState.RUNNING),
                (jobs[0], TaskState.ASSIGNED),
                (jobs[1], TaskState.EXITED),
                (jobs[0], TaskState.STOPPING),
            ],
            start=1,
        ):
            uow.tasks.add(
                NewTask(
                    job_id=job_id,
                    task_index=lease % 2,
                    node="n1",
                    lease=lease,
                    gpu_indices=(lease, lease + 4),
                    gpu_type="v100",
                    rank_offset=0,
                    local_batch_sizes=(32, 16),
                    state=state,
                )
            )
    with db.transaction() as uow:
        first = uow.tasks.active()
        assert [(t.job_id, t.task_index) for t in first] == [
            (jobs[0], 0),
            (jobs[0], 0),
            (jobs[2], 1),
        ]
        assigned = next(t for t in first if t.state is TaskState.ASSIGNED)
        uow.tasks.set_state(assigned.id, TaskState.STARTING)
        plain = uow.tasks.active()
        rows = uow.session.scalars(
            select(TaskRow)
            .where(TaskRow.state.not_in([s.value for s in FINISHED_TASK_STATES]))
            .order_by(TaskRow.job_id, TaskRow.task_index)
        )
        assert plain == [convert.task(row) for row in rows]
        assert next(t for t in plain if t.id == assigned.id).state is TaskState.STARTING
        uow.tasks.set_state(plain[-1].id, TaskState.STOPPING)
    with db.transaction() as uow:
        assert uow.tasks.get(plain[-1].id).state is TaskState.STOPPING
