"""Webhook notifications: users' default webhooks and the outbox of calls owed.

A job that reaches an end state its webhook asks for gets an outbox row in the same
transaction (JobRepository.transition calls `enqueue_for_end`): the master's sender
delivers it later, at least once, and records every attempt here.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.domain import Notification, NotificationAttempt, NotifyDefault
from store.errors import NotFoundError
from store.models import JobRow, NotificationRow, NotifyDefaultRow, utcnow
from store.states import DEFAULT_NOTIFY_ON, JobState, NotificationStatus


def _default(row: NotifyDefaultRow) -> NotifyDefault:
    return NotifyDefault(
        user=row.user,
        url=row.url,
        on=tuple(JobState(s) for s in row.on_states or ()),
        updated_at=row.updated_at,
    )


def _notification(row: NotificationRow) -> Notification:
    return Notification(
        id=row.id,
        job_id=row.job_id,
        user=row.user,
        url=row.url,
        job_state=JobState(row.job_state),
        status=NotificationStatus(row.status),
        attempts=row.attempts,
        created_at=row.created_at,
        next_attempt_at=row.next_attempt_at,
        delivered_at=row.delivered_at,
        last_error=row.last_error,
        history=tuple(
            NotificationAttempt(
                at=datetime.fromisoformat(item["at"]),
                status_code=int(item.get("status_code", 0)),
                error=str(item.get("error", "")),
            )
            for item in row.history or ()
        ),
    )


class NotificationRepository:
    def __init__(self, session: Session) -> None:
        self._session = session

    # -- users' defaults -----------------------------------------------------------------

    def default_for(self, user: str) -> NotifyDefault | None:
        row = self._session.get(NotifyDefaultRow, user)
        return _default(row) if row is not None else None

    def set_default(
        self, user: str, url: str, on: Sequence[JobState], *, now: datetime | None = None
    ) -> NotifyDefault:
        row = self._session.get(NotifyDefaultRow, user)
        if row is None:
            row = NotifyDefaultRow(user=user)
            self._session.add(row)
        row.url = url
        row.on_states = [s.value for s in on]
        row.updated_at = now or utcnow()
        self._session.flush()
        return _default(row)

    def clear_default(self, user: str) -> bool:
        """Forget a user's default; False when they had none."""
        row = self._session.get(NotifyDefaultRow, user)
        if row is None:
            return False
        self._session.delete(row)
        self._session.flush()
        return True

    # -- the outbox ----------------------------------------------------------------------

    def enqueue_for_end(self, job: JobRow, state: JobState, at: datetime) -> bool:
        """Owe a webhook call for a job that just reached `state`, when its own webhook (or
        else its owner's default) asks for that state. The job's `notify_on` applies to
        whichever URL is used. Returns whether a call was owed."""
        if job.no_notify:
            return False
        url = job.notify_url
        on = [JobState(s) for s in job.notify_on or ()]
        if not url:
            default = self._session.get(NotifyDefaultRow, job.user)
            if default is None:
                return False
            url = default.url
            on = on or [JobState(s) for s in default.on_states or ()]
        if state not in (on or DEFAULT_NOTIFY_ON):
            return False
        row = NotificationRow(
            job_id=job.id,
            user=job.user,
            url=url,
            job_state=state.value,
            status=NotificationStatus.PENDING.value,
            attempts=0,
            created_at=at,
            # Due at once, whatever time the caller's change is dated.
            next_attempt_at=min(at, utcnow()),
            last_error="",
            history=[],
        )
        # Not flushed here: a caller batching job changes flushes them all together.
        self._session.add(row)
        return True

    def due(self, now: datetime, *, limit: int = 100) -> list[Notification]:
        """Pending calls whose next attempt is due, oldest first."""
        query = (
            select(NotificationRow)
            .where(
                NotificationRow.status == NotificationStatus.PENDING.value,
                NotificationRow.next_attempt_at <= now,
            )
            .order_by(NotificationRow.next_attempt_at, NotificationRow.id)
            .limit(limit)
        )
        return [_notification(row) for row in self._session.scalars(query)]

    def next_due_at(self, *, excluding: Collection[int] = ()) -> datetime | None:
        """When the earliest pending call (other than `excluding`, calls in flight) is due;
        None when none is pending."""
        query = (
            select(NotificationRow.next_attempt_at)
            .where(NotificationRow.status == NotificationStatus.PENDING.value)
            .order_by(NotificationRow.next_attempt_at)
            .limit(1)
        )
        if excluding:
            query = query.where(NotificationRow.id.not_in(list(excluding)))
        return self._session.scalars(query).first()

    def record_attempt(
        self,
        notification_id: int,
        *,
        at: datetime,
        status_code: int,
        error: str,
        delivered: bool,
        retry_at: datetime | None,
    ) -> Notification:
        """Store one attempt's outcome: delivered, to be retried at `retry_at`, or (neither)
        given up."""
        row = self._session.get(NotificationRow, notification_id)
        if row is None:
            raise NotFoundError("notification", notification_id)
        row.attempts += 1
        row.history = [
            *(row.history or ()),
            {"at": at.isoformat(), "status_code": status_code, "error": error},
        ]
        row.last_error = error
        if delivered:
            row.status = NotificationStatus.DELIVERED.value
            row.delivered_at = at
            row.next_attempt_at = None
        elif retry_at is not None:
            row.next_attempt_at = retry_at
        else:
            row.status = NotificationStatus.GAVE_UP.value
            row.next_attempt_at = None
        self._session.flush()
        return _notification(row)

    def for_job(self, job_id: int) -> list[Notification]:
        query = (
            select(NotificationRow)
            .where(NotificationRow.job_id == job_id)
            .order_by(NotificationRow.id)
        )
        return [_notification(row) for row in self._session.scalars(query)]
