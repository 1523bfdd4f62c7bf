"""What scheduling policies learned, and the completions they have not been told yet."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from store.models import CompletionNoticeRow, PolicyMemoryRow, utcnow


class PolicyMemoryRepository:
    def __init__(self, session: Session) -> None:
        self._session = session

    def get(self, policy: str) -> dict[str, Any] | None:
        """The memory stored for ``policy``, or None."""
        row = self._session.get(PolicyMemoryRow, policy)
        return dict(row.memory) if row is not None else None

    def save(self, policy: str, memory: Mapping[str, Any], *, now: datetime | None = None) -> None:
        """Replace the memory stored for ``policy``."""
        row = self._session.get(PolicyMemoryRow, policy)
        if row is None:
            row = PolicyMemoryRow(policy=policy)
            self._session.add(row)
        row.memory = dict(memory)
        row.updated_at = now or utcnow()
        self._session.flush()

    def notify_completed(self, job_id: int, at: datetime) -> None:
        """Remember that ``job_id`` completed at ``at`` until the policy is told."""
        self._session.add(CompletionNoticeRow(job_id=job_id, completed_at=at))

    def completions(self) -> list[tuple[int, datetime]]:
        """(job id, completed at) of the completions not told yet, oldest first."""
        query = select(CompletionNoticeRow.job_id, CompletionNoticeRow.completed_at).order_by(
            CompletionNoticeRow.completed_at, CompletionNoticeRow.job_id
        )
        return [(job_id, at) for job_id, at in self._session.execute(query)]

    def forget_completions(self, job_ids: Collection[int]) -> None:
        """The policy has been told about these completions."""
        if job_ids:
            self._session.execute(
                delete(CompletionNoticeRow).where(CompletionNoticeRow.job_id.in_(list(job_ids)))
            )
