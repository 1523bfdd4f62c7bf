"""Tasks: a job's presence on one node for one lease."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from store.domain import NewTask, Task
from store.errors import NotFoundError
from store.models import TaskRow, utcnow
from store.repositories import convert
from store.states import FINISHED_TASK_STATES, ExitKind, TaskState

_FINISHED = [s.value for s in FINISHED_TASK_STATES]


class TaskRepository:
    def __init__(self, session: Session) -> None:
        self._session = session

    def _row(self, task_id: int) -> TaskRow:
        row = self._session.get(TaskRow, task_id)
        if row is None:
            raise NotFoundError("task", task_id)
        return row

    def add(self, new: NewTask, *, now: datetime | None = None) -> Task:
        row = TaskRow(
            job_id=new.job_id,
            task_index=new.task_index,
            node_name=new.node,
            lease=new.lease,
            gpu_indices=list(new.gpu_indices),
            gpu_type=new.gpu_type,
            state=new.state.value,
            rank_offset=new.rank_offset,
            local_batch_sizes=list(new.local_batch_sizes),
            accumulation_steps=new.accumulation_steps,
            num_copies=new.num_copies,
            copy_index=new.copy_index,
            shared_with_job_id=new.shared_with_job_id,
            round=new.round,
            iteration_budget=new.iteration_budget,
            created_at=now or utcnow(),
        )
        self._session.add(row)
        self._session.flush()
        return convert.task(row)

    def get(self, task_id: int) -> Task:
        return convert.task(self._row(task_id))

    def find(self, job_id: int, task_index: int, lease: int) -> Task | None:
        query = select(TaskRow).where(
            TaskRow.job_id == job_id, TaskRow.task_index == task_index, TaskRow.lease == lease
        )
        row = self._session.scalars(query).one_or_none()
        return convert.task(row) if row is not None else None

    def active(self) -> list[Task]:
        """Tasks that hold GPUs now, ordered by job and index."""
        query = (
            select(TaskRow)
            .where(TaskRow.state.not_in(_FINISHED))
            .order_by(TaskRow.job_id, TaskRow.task_index)
        )
        return [convert.task(row) for row in self._session.scalars(query)]

    def active_for_job(self, job_id: int) -> list[Task]:
        query = (
            select(TaskRow)
            .where(TaskRow.job_id == job_id, TaskRow.state.not_in(_FINISHED))
            .order_by(TaskRow.task_index)
        )
        return [convert.task(row) for row in self._session.scalars(query)]

    def active_on_node(self, node: str) -> list[Task]:
        query = (
            select(TaskRow)
            .where(TaskRow.node_name == node, TaskRow.state.not_in(_FINISHED))
            .order_by(TaskRow.job_id, TaskRow.task_index)
        )
        return [convert.task(row) for row in self._session.scalars(query)]

    def for_job(self, job_id: int) -> list[Task]:
        """Every task the job ever had, oldest lease first."""
        query = select(TaskRow).where(TaskRow.job_id == job_id).order_by(TaskRow.id)
        return [convert.task(row) for row in self._session.scalars(query)]

    def latest_lease(self, job_id: int) -> int:
        value = self._session.execute(
            select(func.max(TaskRow.lease)).where(TaskRow.job_id == job_id)
        ).scalar_one_or_none()
        return int(value or 0)

    def set_state(
        self,
        task_id: int,
        state: TaskState,
        *,
        now: datetime | None = None,
        exit_kind: ExitKind | None = None,
        exit_code: int | None = None,
    ) -> Task:
        row = self._row(task_id)
        at = now or utcnow()
        row.state = state.value
        if state in (TaskState.STARTING, TaskState.RUNNING) and row.acknowledged_at is None:
            row.acknowledged_at = at
        if state in FINISHED_TASK_STATES:
            row.finished_at = at
        if exit_kind is not None:
            row.exit_kind = exit_kind.value
        if exit_code is not None:
            row.exit_code = exit_code
        self._session.flush()
        return convert.task(row)

    def extend(self, task_id: int, *, round: int, iteration_budget: int) -> Task:
        """Keep a task for another lease period (its fencing token does not change)."""
        row = self._row(task_id)
        row.round = round
        row.iteration_budget = iteration_budget
        self._session.flush()
        return convert.task(row)
