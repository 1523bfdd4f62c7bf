"""Reads of the unfinished jobs with a memo (store.job_memo): each read returns exactly
what a plain read returns, loads only the rows changed since the memo's last read, and
never remembers what a unit of work has written but not committed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from store import Database
from store.domain import Job, NewJob
from store.job_memo import JobMemo
from store.session_writes import has_written
from store.states import JobState
from tests.unit.store.conftest import make_spec, submit


def plain(db: Database) -> list[Job]:
    with db.transaction() as uow:
        return uow.jobs.list_unfinished()


def remembered(db: Database, memo: JobMemo) -> list[Job]:
    with db.transaction() as uow:
        return uow.jobs.list_unfinished(memo=memo)


def loads(db: Database, memo: JobMemo) -> int:
    """Rows a read with `memo` loads, after checking it returns what a plain read does."""
    before = memo.rows_loaded
    assert remembered(db, memo) == plain(db)
    return memo.rows_loaded - before


def test_a_read_with_a_memo_loads_only_what_changed_and_returns_what_the_store_holds(
    db: Database,
) -> None:
    """After each change (a submission, a state change, progress, a waiting reason written
    in bulk, a note, a cancellation, an array) the read with the memo equals a plain read,
    and it loaded only the rows that changed; an unchanged store loads nothing."""
    memo = JobMemo()
    ids = [submit(db, name=f"job-{i}") for i in range(6)]
    assert loads(db, memo) == 6
    assert loads(db, memo) == 0

    new = submit(db, name="late")
    assert loads(db, memo) == 1

    with db.transaction() as uow:
        uow.jobs.transition(ids[0], JobState.RUNNING, kind="scheduled", reason="placed")
    assert loads(db, memo) == 1

    with db.transaction() as uow:
        uow.jobs.record_progress(ids[0], iterations_done=40, service_delta=3.0, reported=True)
    assert loads(db, memo) == 1
    (running,) = [j for j in remembered(db, memo) if j.id == ids[0]]
    assert (running.state, running.iterations_done, running.reports_progress) == (
        JobState.RUNNING,
        40,
        True,
    )

    # A waiting reason is written without a new version: it is read on every read.
    with db.transaction() as uow:
        uow.jobs.set_waiting_reasons({ids[1]: "waiting: no GPU", new: "waiting: no GPU"})
    assert loads(db, memo) == 0
    reasons = {j.id: j.reason for j in remembered(db, memo)}
    assert reasons[ids[1]] == reasons[new] == "waiting: no GPU"

    with db.transaction() as uow:
        uow.jobs.note(ids[2], kind="extended", reason="noted")
        uow.jobs.transition(ids[3], JobState.CANCELLED, kind="cancelled", reason="by alice")
    assert loads(db, memo) == 1
    assert ids[3] not in {j.id for j in remembered(db, memo)}

    with db.transaction() as uow:
        elements, _ = uow.jobs.add_array(
            NewJob(user="bob", spec=replace(make_spec("arr"), array="0-2%1")), [0, 1, 2]
        )
    assert loads(db, memo) == 3

    with db.transaction() as uow:
        uow.jobs.transition(ids[0], JobState.PREEMPTED, kind="preempted", reason="moved")
        uow.jobs.transition(elements[1].id, JobState.RUNNING, kind="scheduled", reason="placed")
    assert loads(db, memo) == 2


def test_jobs_by_id_and_array_elements_with_a_memo_equal_plain_reads(db: Database) -> None:
    """get_many and array_elements with a memo return what they return without one, for
    unfinished jobs (from the memo) and ended ones (loaded) alike (only the rows they read
    are counted)."""
    memo = JobMemo()
    ids = [submit(db, name=f"job-{i}") for i in range(3)]
    with db.transaction() as uow:
        elements, _ = uow.jobs.add_array(
            NewJob(user="bob", spec=replace(make_spec("arr"), array="0-3")), [0, 1, 2, 3]
        )
        uow.jobs.transition(ids[2], JobState.CANCELLED, kind="cancelled", reason="by alice")
        uow.jobs.transition(elements[3].id, JobState.CANCELLED, kind="cancelled", reason="x")
    remembered(db, memo)
    loaded = memo.rows_loaded
    array = elements[0].spec.array_job_id
    with db.transaction() as uow:
        uow.jobs.set_waiting_reasons({ids[0]: "waiting: held"})
        uow.jobs.record_progress(ids[1], iterations_done=5)
    wanted = [*ids, elements[2].id, 999_999]
    with db.transaction() as uow:
        by_memo = uow.jobs.get_many(wanted, memo=memo)
        arrays_by_memo = uow.jobs.array_elements([array, ids[0]], memo=memo)
    with db.transaction() as uow:
        assert by_memo == uow.jobs.get_many(wanted)
        assert arrays_by_memo == uow.jobs.array_elements([array, ids[0]])
    assert by_memo[ids[0]].reason == "waiting: held"
    assert by_memo[ids[1]].iterations_done == 5
    assert [j.spec.array_index for j in arrays_by_memo[array]] == [0, 1, 2, 3]
    # Read in full: ids[1] (changed), ids[2] and elements[3] (finished: never remembered).
    assert memo.rows_loaded == loaded + 3


def test_jobs_read_by_id_with_a_memo_are_remembered_for_the_next_read(db: Database) -> None:
    """A round reads its running jobs by id every time: the first read through a memo that
    never read the queue loads them, the next ones only those changed since; a finished
    job is loaded every time (never remembered), and every read equals a plain one."""
    memo = JobMemo()
    ids = [submit(db, name=f"job-{i}") for i in range(3)]
    with db.transaction() as uow:
        uow.jobs.transition(ids[2], JobState.CANCELLED, kind="cancelled", reason="by alice")

    def read() -> int:
        before = memo.rows_loaded
        with db.transaction() as uow:
            by_memo = uow.jobs.get_many(ids, memo=memo)
        with db.transaction() as uow:
            assert by_memo == uow.jobs.get_many(ids)
        return memo.rows_loaded - before

    assert read() == 3
    assert read() == 1
    with db.transaction() as uow:
        uow.jobs.record_progress(ids[0], iterations_done=9)
    assert read() == 2
    assert read() == 1


def test_what_a_unit_of_work_wrote_is_never_remembered(db: Database) -> None:
    """A read with a memo in a unit of work that has written sees its own changes but
    leaves the memo alone: after that unit of work rolls back and another change commits
    the same version, the memo's reads still return what was committed."""
    memo = JobMemo()
    job_id = submit(db)
    remembered(db, memo)
    with pytest.raises(RuntimeError), db.transaction() as uow:
        uow.jobs.transition(job_id, JobState.RUNNING, kind="scheduled", reason="placed")
        assert has_written(uow.session)
        (seen,) = uow.jobs.list_unfinished(memo=memo)
        assert seen.state is JobState.RUNNING
        raise RuntimeError("roll back")
    with db.transaction() as uow:
        # The same version the rolled back transition had.
        uow.jobs.record_progress(job_id, iterations_done=7)
    (job,) = remembered(db, memo)
    assert (job.state, job.iterations_done) == (JobState.PENDING, 7)
    assert [job] == plain(db)


def test_a_bulk_update_counts_as_a_write_until_the_transaction_ends(db: Database) -> None:
    """has_written: false in a fresh unit of work, true after an UPDATE statement, still
    true after a savepoint inside it ends, false again in the next unit of work."""
    job_id = submit(db)
    with db.transaction() as uow:
        assert not has_written(uow.session)
        uow.jobs.list_unfinished()
        assert not has_written(uow.session)
        uow.jobs.set_waiting_reasons({job_id: "waiting: x"})
        assert has_written(uow.session)
        with uow.savepoint():
            uow.jobs.note(job_id, kind="noted", reason="y")
        assert has_written(uow.session)
    with db.transaction() as uow:
        assert not has_written(uow.session)


def test_the_memo_is_dropped_and_every_row_read_again_after_its_interval(db: Database) -> None:
    """Past its full-read interval the memo answers nothing: the next read loads every
    unfinished row again, and the one after that nothing."""
    now = [0.0]
    memo = JobMemo(full_read_every_s=60.0, clock=lambda: now[0])
    for i in range(3):
        submit(db, name=f"job-{i}")
    assert loads(db, memo) == 3
    now[0] = 59.0
    assert loads(db, memo) == 0
    now[0] = 60.0
    assert loads(db, memo) == 3
    assert loads(db, memo) == 0


def test_a_long_queue_that_gained_many_jobs_loads_only_those_rows(db: Database) -> None:
    """More jobs changed than one statement reads by id, yet few among the unfinished
    jobs (a long queue and a thousand submissions since the last round): the read loads
    those rows by id, not every unfinished row again, and returns what the store holds."""

    def add(count: int) -> None:
        with db.transaction() as uow:
            uow.jobs.add_many(
                [(NewJob(user="alice", spec=make_spec("q")), ()) for _ in range(count)]
            )

    add(1500)
    memo = JobMemo()
    remembered(db, memo)
    add(600)
    loaded = memo.rows_loaded
    jobs = remembered(db, memo)
    assert memo.rows_loaded - loaded == 600
    assert jobs == plain(db)
