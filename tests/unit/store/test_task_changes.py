"""The task-change generation moves once a transaction that changed where tasks run has
ended, and only then; other changes leave it where it is."""

from __future__ import annotations

from sqlalchemy import Table, update

from store import Database
from store.domain import NewTask
from store.models import TaskRow
from store.states import TaskState
from tests.unit.store.conftest import submit
from tests.unit.store.test_cluster import register


def _task(job_id: int, lease: int, index: int = 0) -> NewTask:
    return NewTask(
        job_id=job_id,
        task_index=index,
        node="n1",
        lease=lease,
        gpu_indices=(index,),
        gpu_type="v100",
        rank_offset=index,
        local_batch_sizes=(32,),
        state=TaskState.RUNNING,
    )


def _add(db: Database, job_id: int, lease: int) -> int:
    with db.transaction() as uow:
        return uow.tasks.add(_task(job_id, lease)).id


def test_a_new_task_moves_the_generation_after_its_commit_not_before(db: Database) -> None:
    register(db)
    job_id = submit(db)
    changes = db.task_changes
    before = changes.generation
    with db.transaction() as uow:
        uow.tasks.add(_task(job_id, 1))
        uow.tasks.add_many([_task(job_id, 2), _task(job_id, 3)])
        uow.session.flush()
        assert changes.generation == before, "moved before the commit"
    assert changes.generation == before + 1
    with db.transaction() as uow:
        assert len(uow.tasks.placements()) == 3


def test_state_changes_move_it_and_other_columns_do_not(db: Database) -> None:
    register(db)
    job_id = submit(db)
    task_id = _add(db, job_id, 1)
    changes = db.task_changes
    before = changes.generation
    with db.transaction() as uow:
        uow.tasks.extend_many([task_id], round=8)
    with db.transaction() as uow:
        assert uow.tasks.get(task_id).round == 8
    with db.transaction() as uow:
        uow.tasks.get(task_id)
        uow.jobs.note(job_id, kind="note", reason="a note", set_reason=False)
    assert changes.generation == before
    with db.transaction() as uow:
        uow.tasks.set_state(task_id, TaskState.STOPPING)
    assert changes.generation == before + 1
    with db.transaction() as uow:
        uow.tasks.set_state(task_id, TaskState.EXITED)
        assert uow.tasks.placements() == {}
    assert changes.generation == before + 2


def test_a_rolled_back_savepoint_does_not_hide_the_changes_made_before_it(
    db: Database,
) -> None:
    register(db)
    job_id = submit(db)
    task_id = _add(db, job_id, 1)
    changes = db.task_changes
    before = changes.generation
    with db.transaction() as uow:
        uow.tasks.set_state(task_id, TaskState.LOST)
        try:
            with uow.savepoint():
                uow.jobs.note(job_id, kind="note", reason="undone", set_reason=False)
                raise RuntimeError("undo the savepoint")
        except RuntimeError:
            pass
    assert changes.generation == before + 1
    with db.transaction() as uow:
        assert uow.tasks.get(task_id).state is TaskState.LOST


def test_statements_on_the_tasks_table_move_it(db: Database) -> None:
    register(db)
    job_id = submit(db)
    task_id = _add(db, job_id, 1)
    changes = db.task_changes
    before = changes.generation
    with db.transaction() as uow:
        uow.session.execute(
            update(TaskRow).where(TaskRow.id == task_id).values(state=TaskState.STOPPING.value)
        )
    assert changes.generation == before + 1
    with db.transaction() as uow:
        table = TaskRow.__table__
        assert isinstance(table, Table)
        uow.session.execute(
            update(table).where(table.c.id == task_id).values(state=TaskState.LOST.value)
        )
    assert changes.generation == before + 2


def test_a_failed_transaction_moves_it_too_and_changes_nothing(db: Database) -> None:
    """(A reader then reads again once, needlessly but harmlessly.)"""
    register(db)
    job_id = submit(db)
    task_id = _add(db, job_id, 1)
    changes = db.task_changes
    before = changes.generation
    try:
        with db.transaction() as uow:
            uow.tasks.set_state(task_id, TaskState.LOST)
            uow.session.flush()
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    assert changes.generation == before + 1
    with db.transaction() as uow:
        assert set(uow.tasks.placements().values()) == {"n1"}
