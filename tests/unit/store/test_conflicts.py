"""Optimistic locking: concurrent updates of one job never silently overwrite each other."""

from __future__ import annotations

import threading

import pytest

from store import ConflictError, Database
from store.repositories.jobs import ProgressWrite
from store.states import JobState
from tests.unit.store.conftest import submit


def test_stale_session_gets_conflict_and_nothing_is_lost(db: Database) -> None:
    """A unit of work that read a job before another one changed it gets ConflictError on
    write; the winner's change and event survive; a retry on fresh data succeeds."""
    job_id = submit(db)
    with pytest.raises(ConflictError), db.transaction() as loser:
        loaded = loser.jobs.get(job_id)
        assert loaded.version == 1
        with db.transaction() as winner:
            winner.jobs.transition(job_id, JobState.RUNNING, kind="scheduled", reason="won")
        loser.jobs.transition(job_id, JobState.CANCELLED, kind="cancelled", reason="lost")

    with db.transaction() as uow:
        job = uow.jobs.get(job_id)
        kinds = [e.kind for e in uow.jobs.events(job_id)]
    assert job.state is JobState.RUNNING and job.reason == "won"
    assert kinds == ["submitted", "scheduled"]

    with db.transaction() as retry:
        fresh = retry.jobs.get(job_id)
        retry.jobs.transition(
            job_id,
            JobState.CANCELLED,
            kind="cancelled",
            reason="retried",
            expected_version=fresh.version,
        )
    with db.transaction() as uow:
        assert uow.jobs.get(job_id).state is JobState.CANCELLED


def test_expected_version_mismatch_is_a_conflict(db: Database) -> None:
    """Callers holding a domain object can pass its version; a newer row refuses the write."""
    job_id = submit(db)
    with db.transaction() as uow:
        old = uow.jobs.get(job_id)
        uow.jobs.record_progress(job_id, iterations_done=5)
    with pytest.raises(ConflictError), db.transaction() as uow:
        uow.jobs.transition(
            job_id, JobState.RUNNING, kind="s", reason="s", expected_version=old.version
        )


def test_two_threads_updating_one_job_one_wins(db: Database) -> None:
    """Two concurrent units of work that both read version 1 and write: exactly one commits,
    the other raises ConflictError; the stored history has exactly the winner's event."""
    job_id = submit(db)
    barrier = threading.Barrier(2, timeout=10)
    outcomes: list[str] = []
    lock = threading.Lock()

    def worker(target: JobState, reason: str) -> None:
        try:
            with db.transaction() as uow:
                uow.jobs.get(job_id)
                barrier.wait()
                uow.jobs.transition(job_id, target, kind=reason, reason=reason)
            result = "ok"
        except ConflictError:
            result = "conflict"
        with lock:
            outcomes.append(result)

    threads = [
        threading.Thread(target=worker, args=(JobState.RUNNING, "scheduled")),
        threading.Thread(target=worker, args=(JobState.CANCELLED, "cancelled")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(outcomes) == ["conflict", "ok"]
    with db.transaction() as uow:
        job = uow.jobs.get(job_id)
        events = uow.jobs.events(job_id)
    assert job.version == 2
    assert len(events) == 2 and events[1].kind == job.reason


def test_progress_written_over_a_newer_version_is_a_conflict_and_writes_nothing(
    db: Database,
) -> None:
    """write_progress checks each job's version as a flush does: when another unit of work
    changed the job after its counters were read, the write raises ConflictError and the
    winner's change stands."""
    job_id = submit(db)
    other = submit(db, name="other")
    with pytest.raises(ConflictError), db.transaction() as loser:
        targets = loser.jobs.progress_targets([job_id, other])
        with db.transaction() as winner:
            winner.jobs.record_progress(job_id, iterations_done=50)
        loser.jobs.write_progress(
            [ProgressWrite(t.id, t.version, 30, 30, t.attained_service) for t in targets.values()]
        )
    with db.transaction() as uow:
        assert uow.jobs.get(job_id).iterations_done == 50
        assert uow.jobs.get(other).iterations_done == 0
