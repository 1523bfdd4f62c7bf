"""The notifications outbox and users' default webhooks in the store (SQLite and
PostgreSQL): which ends owe a call, in the transaction that ends the job, and how attempts
are recorded."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from store import Database
from store.domain import NewJob
from store.states import JobState, NotificationStatus
from tests.unit.store.conftest import make_spec

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def submit(
    db: Database, *, user: str = "alice", url: str = "", on: tuple[JobState, ...] = ()
) -> int:
    spec = dataclasses.replace(make_spec(), notify_url=url, notify_on=on)
    with db.transaction() as uow:
        job, _ = uow.jobs.add(NewJob(user=user, spec=spec))
    return job.id


def end(db: Database, job_id: int, state: JobState) -> None:
    with db.transaction() as uow:
        if state is not JobState.CANCELLED:
            uow.jobs.transition(job_id, JobState.RUNNING, kind="scheduled", reason="placed")
        uow.jobs.transition(job_id, state, kind=state.value.lower(), reason="ended")


def owed(db: Database, job_id: int) -> list[tuple[str, JobState]]:
    with db.transaction() as uow:
        return [(n.url, n.job_state) for n in uow.notifications.for_job(job_id)]


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (JobState.COMPLETED, True),
        (JobState.FAILED, True),
        (JobState.TIMEOUT, True),
        (JobState.CANCELLED, False),
    ],
)
def test_a_jobs_own_webhook_is_owed_a_call_for_the_default_end_states(
    db: Database, state: JobState, expected: bool
) -> None:
    """With no notify_on, completion, failure and timeout owe a call; a cancellation not."""
    job_id = submit(db, url="https://hooks.example.org/a")
    end(db, job_id, state)
    assert owed(db, job_id) == ([("https://hooks.example.org/a", state)] if expected else [])


def test_the_call_is_stored_with_the_end_or_not_at_all(db: Database) -> None:
    """A transaction that ends the job and then fails leaves neither the end nor the call."""
    job_id = submit(db, url="https://hooks.example.org/a")
    with pytest.raises(RuntimeError), db.transaction() as uow:
        uow.jobs.transition(job_id, JobState.RUNNING, kind="scheduled", reason="placed")
        uow.jobs.transition(job_id, JobState.FAILED, kind="failed", reason="exit 1")
        raise RuntimeError("crash before commit")
    assert owed(db, job_id) == []
    with db.transaction() as uow:
        assert uow.jobs.get(job_id).state is JobState.PENDING
        assert uow.notifications.due(datetime.now(UTC) + timedelta(days=1)) == []


def test_the_owners_default_serves_jobs_without_a_webhook_and_notify_on_applies(
    db: Database,
) -> None:
    """A job naming no URL uses its owner's default with the default's states; a job's own
    notify_on applies to whichever URL is used; another user's default is not used; a job
    that asked for no notification gets none."""
    with db.transaction() as uow:
        uow.notifications.set_default("alice", "https://d.example.org/x", [JobState.FAILED])
    plain = submit(db)
    end(db, plain, JobState.COMPLETED)
    assert owed(db, plain) == []
    failing = submit(db)
    end(db, failing, JobState.FAILED)
    assert owed(db, failing) == [("https://d.example.org/x", JobState.FAILED)]
    cancelled = submit(db, on=(JobState.CANCELLED,))
    end(db, cancelled, JobState.CANCELLED)
    assert owed(db, cancelled) == [("https://d.example.org/x", JobState.CANCELLED)]
    bobs = submit(db, user="bob")
    end(db, bobs, JobState.FAILED)
    assert owed(db, bobs) == []
    with db.transaction() as uow:
        spec = dataclasses.replace(make_spec(), no_notify=True)
        quiet, _ = uow.jobs.add(NewJob(user="alice", spec=spec))
    end(db, quiet.id, JobState.FAILED)
    assert owed(db, quiet.id) == []
    own = submit(db, url="https://own.example.org/")
    end(db, own, JobState.FAILED)
    assert owed(db, own) == [("https://own.example.org/", JobState.FAILED)]


def test_defaults_are_set_replaced_and_cleared(db: Database) -> None:
    """Setting twice keeps the last; clearing says whether there was one."""
    with db.transaction() as uow:
        uow.notifications.set_default("alice", "https://a.example.org/1", [])
        uow.notifications.set_default("alice", "https://a.example.org/2", [JobState.TIMEOUT])
    with db.transaction() as uow:
        default = uow.notifications.default_for("alice")
        assert default is not None
        assert (default.url, default.on) == ("https://a.example.org/2", (JobState.TIMEOUT,))
        assert uow.notifications.clear_default("alice")
        assert not uow.notifications.clear_default("alice")
        assert uow.notifications.default_for("alice") is None


def test_attempts_are_recorded_until_delivered_or_given_up(db: Database) -> None:
    """A retry moves the next attempt time (the call is not due before it); delivery and
    giving up end the call; every attempt is kept in order."""
    first = submit(db, url="https://hooks.example.org/a")
    second = submit(db, url="https://hooks.example.org/b")
    end(db, first, JobState.COMPLETED)
    end(db, second, JobState.FAILED)
    now = datetime.now(UTC)
    with db.transaction() as uow:
        due = uow.notifications.due(now + timedelta(seconds=1))
        assert [n.job_id for n in due] == [first, second]
        a, b = due
        assert a.status is NotificationStatus.PENDING and a.attempts == 0
        uow.notifications.record_attempt(
            a.id, at=now, status_code=500, error="HTTP 500", delivered=False,
            retry_at=now + timedelta(seconds=30),
        )  # fmt: skip
        uow.notifications.record_attempt(
            b.id, at=now, status_code=0, error="refused", delivered=False, retry_at=None
        )
    with db.transaction() as uow:
        assert uow.notifications.due(now + timedelta(seconds=29)) == []
        assert uow.notifications.next_due_at() == now + timedelta(seconds=30)
        (retried,) = uow.notifications.due(now + timedelta(seconds=30))
        later = now + timedelta(seconds=30)
        done = uow.notifications.record_attempt(
            retried.id, at=later, status_code=204, error="", delivered=True, retry_at=None
        )
        assert done.status is NotificationStatus.DELIVERED and done.delivered_at == later
        assert [(h.status_code, h.error) for h in done.history] == [(500, "HTTP 500"), (204, "")]
        assert done.attempts == 2 and done.next_attempt_at is None
        (gave_up,) = uow.notifications.for_job(second)
        assert gave_up.status is NotificationStatus.GAVE_UP and gave_up.last_error == "refused"
        assert uow.notifications.next_due_at() is None
