"""Accounting: what each attempt of each job used, for usage reports and history."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from store.domain import UsageRecord
from store.models import JobRow, TaskRow, UsageRow
from store.repositories import convert
from store.states import FINISHED_TASK_STATES, TERMINAL_JOB_STATES, JobState

_FINISHED = [s.value for s in FINISHED_TASK_STATES]


class UsageRepository:
    def __init__(self, session: Session) -> None:
        self._session = session

    def ended(
        self,
        *,
        user: str = "",
        since: datetime | None = None,
        until: datetime | None = None,
        job_ids: Collection[int] | None = None,
    ) -> list[UsageRecord]:
        """Stored records of ended attempts that overlap [since, until], oldest first."""
        query = select(UsageRow).order_by(UsageRow.started_at, UsageRow.id)
        if user:
            query = query.where(UsageRow.user == user)
        if since is not None:
            query = query.where(UsageRow.ended_at >= since)
        if until is not None:
            query = query.where(UsageRow.started_at <= until)
        if job_ids is not None:
            query = query.where(UsageRow.job_id.in_(list(job_ids)))
        return [convert.usage(row) for row in self._session.scalars(query)]

    def extend(self, task_id: int, until: datetime) -> None:
        """A task written off (LOST) whose exit report came later held its GPUs until then:
        its record ends there instead (never earlier than it did)."""
        row = self._session.scalars(
            select(UsageRow).where(UsageRow.task_id == task_id)
        ).one_or_none()
        if row is None or row.ended_at >= until:
            return
        row.ended_at = until
        row.gpu_seconds = max(0.0, (until - row.started_at).total_seconds()) * row.num_gpus

    def ended_of_unfinished_jobs(self) -> list[UsageRecord]:
        """Stored records of the ended attempts of every job not in a terminal state,
        oldest first (as :meth:`ended`). Joined on the jobs' state rather than passed their
        ids: a round asks this for thousands of waiting jobs."""
        live = [s.value for s in JobState if s not in TERMINAL_JOB_STATES]
        query = (
            select(UsageRow)
            .join(JobRow, JobRow.id == UsageRow.job_id)
            .where(JobRow.state.in_(live))
            .order_by(UsageRow.started_at, UsageRow.id)
        )
        return [convert.usage(row) for row in self._session.scalars(query)]

    def running(
        self, *, user: str = "", job_ids: Collection[int] | None = None
    ) -> list[UsageRecord]:
        """Attempts still holding GPUs that a worker has started, as records without an
        end. A task written off and back (LOST, then STOPPING) already has a record, which
        its end extends; it is not counted twice."""
        query = (
            select(TaskRow, JobRow.user)
            .join(JobRow, JobRow.id == TaskRow.job_id)
            .where(
                TaskRow.state.not_in(_FINISHED),
                TaskRow.acknowledged_at.is_not(None),
                TaskRow.finished_at.is_(None),
            )
            .order_by(TaskRow.id)
            # A round reads the tasks earlier in the same session: rows already loaded
            # must be refreshed, or one acknowledged since would keep its stale None.
            .execution_options(populate_existing=True)
        )
        if user:
            query = query.where(JobRow.user == user)
        if job_ids is not None:
            query = query.where(TaskRow.job_id.in_(list(job_ids)))
        out: list[UsageRecord] = []
        for task, owner in self._session.execute(query):
            assert task.acknowledged_at is not None
            out.append(
                UsageRecord(
                    task_id=task.id,
                    job_id=task.job_id,
                    user=owner,
                    node=task.node_name,
                    lease=task.lease,
                    gpu_type=task.gpu_type,
                    num_gpus=len(task.gpu_indices or ()),
                    started_at=task.acknowledged_at,
                    ended_at=None,
                )
            )
        return out

    def ended_totals(self) -> dict[tuple[str, str], float]:
        """GPU-seconds of every ended attempt, per (user, GPU type)."""
        query = select(UsageRow.user, UsageRow.gpu_type, func.sum(UsageRow.gpu_seconds)).group_by(
            UsageRow.user, UsageRow.gpu_type
        )
        return {
            (user, gpu): float(total or 0.0) for user, gpu, total in self._session.execute(query)
        }

    def for_jobs(self, job_ids: Collection[int]) -> list[UsageRecord]:
        """Every attempt of these jobs, ended or running."""
        if not job_ids:
            return []
        return self.ended(job_ids=job_ids) + self.running(job_ids=job_ids)
