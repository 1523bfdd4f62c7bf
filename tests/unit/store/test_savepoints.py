"""Savepoints: part of a unit of work undone alone, the rest committed with the transaction."""

from __future__ import annotations

import pytest

from store import Database
from store.states import JobState
from tests.unit.store.conftest import submit


class BoomError(Exception):
    pass


def test_a_failed_savepoint_undoes_only_its_changes(db: Database) -> None:
    """Changes inside a savepoint that raises are undone; changes before and after it, in
    the same unit of work, are committed."""
    first, second, third = submit(db, name="a"), submit(db, name="b"), submit(db, name="c")
    with db.transaction() as uow:
        uow.jobs.transition(first, JobState.RUNNING, kind="scheduled", reason="placed")
        with pytest.raises(BoomError), uow.savepoint():
            uow.jobs.transition(second, JobState.RUNNING, kind="scheduled", reason="placed")
            raise BoomError
        uow.jobs.transition(third, JobState.RUNNING, kind="scheduled", reason="placed")
    with db.transaction() as uow:
        states = [uow.jobs.get(j).state for j in (first, second, third)]
    assert states == [JobState.RUNNING, JobState.PENDING, JobState.RUNNING]


def test_a_savepoint_before_any_write_does_not_commit_the_transaction(db: Database) -> None:
    """A savepoint taken first and released stays part of the unit of work: when the unit
    of work fails afterwards, the savepoint's changes are rolled back with it."""
    job_id = submit(db)
    with pytest.raises(BoomError), db.transaction() as uow:
        uow.jobs.get(job_id)
        with uow.savepoint():
            uow.jobs.transition(job_id, JobState.RUNNING, kind="scheduled", reason="placed")
        raise BoomError
    with db.transaction() as uow:
        assert uow.jobs.get(job_id).state is JobState.PENDING
