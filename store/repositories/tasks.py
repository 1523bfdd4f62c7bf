"""Tasks: a job's presence on one node for one lease."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import cast

from sqlalchemy import Select, bindparam, func, or_, select, update
from sqlalchemy.orm import Session

from store.domain import NewTask, Task
from store.errors import InvalidTaskTransitionError, NotFoundError
from store.models import JobRow, TaskRow, UsageRow, utcnow
from store.repositories import convert
from store.session_writes import flush_pending
from store.states import FINISHED_TASK_STATES, ExitKind, TaskState, can_task_transition
from store.task_changes import PLACEMENT_UNCHANGED

# Task ids per UPDATE of a round's extensions (well under every database's bound-parameter cap).
_EXTEND_BATCH = 500

_FINISHED = [s.value for s in FINISHED_TASK_STATES]
_TASKS = TaskRow.metadata.tables[TaskRow.__tablename__]
# Built once: constructing a statement costs more than running it.
_ACTIVE = (
    select(_TASKS)
    .where(_TASKS.c.state.not_in(_FINISHED))
    .order_by(_TASKS.c.job_id, _TASKS.c.task_index)
)
# The active tasks of the jobs that have an assigned task and on the nodes that have one.
_ASSIGNED = _TASKS.c.state == TaskState.ASSIGNED.value
_AROUND_ASSIGNED = (
    select(_TASKS)
    .where(
        _TASKS.c.state.not_in(_FINISHED),
        or_(
            _TASKS.c.job_id.in_(select(_TASKS.c.job_id).where(_ASSIGNED)),
            _TASKS.c.node_name.in_(select(_TASKS.c.node_name).where(_ASSIGNED)),
        ),
    )
    .order_by(_TASKS.c.job_id, _TASKS.c.task_index)
)
_BY_JOBS_AND_LEASES = select(_TASKS).where(
    _TASKS.c.job_id.in_(bindparam("jobs", expanding=True)),
    _TASKS.c.lease.in_(bindparam("leases", expanding=True)),
)


class TaskRepository:
    def __init__(self, session: Session) -> None:
        self._session = session
        # Rows read in this unit of work stay referenced (the identity map holds them
        # weakly), so changing a task read moments ago costs no second SELECT.
        self._seen: dict[int, TaskRow] = {}

    def _keep(self, row: TaskRow) -> TaskRow:
        self._seen[row.id] = row
        return row

    def _row(self, task_id: int) -> TaskRow:
        row = self._session.get(TaskRow, task_id)
        if row is None:
            raise NotFoundError("task", task_id)
        return self._keep(row)

    def _many(self, query: Select[TaskRow]) -> list[Task]:
        return [convert.task(self._keep(row)) for row in self._session.scalars(query)]

    def add(self, new: NewTask, *, now: datetime | None = None) -> Task:
        row = self._new_row(new, now)
        self._session.add(row)
        self._session.flush()
        return convert.task(row)

    def add_many(self, new: Sequence[NewTask], *, now: datetime | None = None) -> None:
        """Insert many tasks in one statement batch (no ids returned)."""
        self._session.add_all([self._new_row(n, now) for n in new])

    @staticmethod
    def _new_row(new: NewTask, now: datetime | None) -> TaskRow:
        return TaskRow(
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

    def get(self, task_id: int) -> Task:
        return convert.task(self._row(task_id))

    def get_many(self, task_ids: Collection[int]) -> dict[int, Task]:
        """Tasks by id, in one query (missing ids are left out)."""
        if not task_ids:
            return {}
        found = self._many(select(TaskRow).where(TaskRow.id.in_(list(task_ids))))
        return {task.id: task for task in found}

    def find(self, job_id: int, task_index: int, lease: int) -> Task | None:
        query = select(TaskRow).where(
            TaskRow.job_id == job_id, TaskRow.task_index == task_index, TaskRow.lease == lease
        )
        row = self._session.scalars(query).one_or_none()
        return convert.task(self._keep(row)) if row is not None else None

    def find_many(self, keys: Collection[tuple[int, int, int]]) -> dict[tuple[int, int, int], Task]:
        """Tasks by (job id, task index, lease), in one query read as plain columns (missing
        keys are left out): a progress report finds its tasks this way every few seconds
        per worker, and it seldom changes them."""
        if not keys:
            return {}
        wanted = set(keys)
        flush_pending(self._session)
        rows = self._session.connection().execute(
            _BY_JOBS_AND_LEASES,
            {"jobs": sorted({k[0] for k in wanted}), "leases": sorted({k[2] for k in wanted})},
        )
        found: dict[tuple[int, int, int], Task] = {}
        for row in rows:
            key = (row.job_id, row.task_index, row.lease)
            if key in wanted:
                # A returned row has every column under its attribute's name, as a TaskRow.
                found[key] = convert.task(cast(TaskRow, row))
        return found

    def active(self) -> list[Task]:
        """Tasks that hold GPUs now, ordered by job and index, read as plain columns: every
        reader only reads them (a round reads every running task and extends them in one
        statement), and a task changed later is loaded then."""
        return self._read(_ACTIVE)

    def around_assigned(self) -> list[Task]:
        """:meth:`active`, but only the tasks that bear on starting the ASSIGNED ones: every
        active task of a job that has an assigned task (its placement, older leases) and
        every one on a node that has one (what holds its GPUs). A round starts a few tasks
        among hundreds running; reading only these keeps its hand-out short."""
        return self._read(_AROUND_ASSIGNED)

    def _read(self, statement: Select[tuple[object, ...]]) -> list[Task]:
        """The tasks ``statement`` selects (whole rows), as plain columns."""
        flush_pending(self._session)
        # A returned row has every column under its attribute's name, as a TaskRow.
        rows = self._session.connection().execute(statement)
        return [convert.task(cast(TaskRow, row)) for row in rows]

    def any_in(self, state: TaskState) -> bool:
        """Whether some task is in `state` (one indexed lookup, no row loaded)."""
        query = select(TaskRow.id).where(TaskRow.state == state.value).limit(1)
        return self._session.execute(query).first() is not None

    def busy_gpus(self) -> set[tuple[str, int]]:
        """(node, GPU index) of every GPU an active task holds, read as plain columns."""
        query = select(TaskRow.node_name, TaskRow.gpu_indices).where(
            TaskRow.state.not_in(_FINISHED)
        )
        return {
            (node, index) for node, indices in self._session.execute(query) for index in indices
        }

    def placements(self) -> dict[tuple[int, int, int], str]:
        """(job id, task index, lease) -> node of every active task, in one query that
        loads no rows (for the master's index of what runs where)."""
        query = select(TaskRow.job_id, TaskRow.task_index, TaskRow.lease, TaskRow.node_name).where(
            TaskRow.state.not_in(_FINISHED)
        )
        return {
            (job_id, task_index, lease): node
            for job_id, task_index, lease, node in self._session.execute(query)
        }

    def active_for_job(self, job_id: int) -> list[Task]:
        query = (
            select(TaskRow)
            .where(TaskRow.job_id == job_id, TaskRow.state.not_in(_FINISHED))
            .order_by(TaskRow.task_index)
        )
        return self._many(query)

    def active_for_jobs(self, job_ids: Collection[int]) -> dict[int, list[Task]]:
        """The active tasks of each of these jobs (in task order; jobs without any are
        absent), in one query."""
        if not job_ids:
            return {}
        query = (
            select(TaskRow)
            .where(TaskRow.job_id.in_(list(job_ids)), TaskRow.state.not_in(_FINISHED))
            .order_by(TaskRow.job_id, TaskRow.task_index)
        )
        found: dict[int, list[Task]] = {}
        for task in self._many(query):
            found.setdefault(task.job_id, []).append(task)
        return found

    def active_on_node(self, node: str) -> list[Task]:
        query = (
            select(TaskRow)
            .where(TaskRow.node_name == node, TaskRow.state.not_in(_FINISHED))
            .order_by(TaskRow.job_id, TaskRow.task_index)
        )
        return self._many(query)

    def lost_on_nodes(self, nodes: Collection[str], since: datetime) -> list[Task]:
        """Tasks on `nodes` written off (LOST) at or after `since`, newest first."""
        if not nodes:
            return []
        query = (
            select(TaskRow)
            .where(
                TaskRow.node_name.in_(list(nodes)),
                TaskRow.state == TaskState.LOST.value,
                TaskRow.finished_at >= since,
            )
            .order_by(TaskRow.finished_at.desc(), TaskRow.id)
        )
        return self._many(query)

    def for_job(self, job_id: int) -> list[Task]:
        """Every task the job ever had, oldest lease first."""
        query = select(TaskRow).where(TaskRow.job_id == job_id).order_by(TaskRow.id)
        return self._many(query)

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
        """The one way a task changes state. Raises InvalidTaskTransitionError for a move
        the task life (ALLOWED_TASK_TRANSITIONS) does not allow."""
        row = self._row(task_id)
        from_state = TaskState(row.state)
        if not can_task_transition(from_state, state):
            raise InvalidTaskTransitionError(task_id, row.job_id, from_state.value, state.value)
        at = now or utcnow()
        # A task written off (LOST) may come back (STOPPING) and end again later.
        ended_before = row.finished_at is not None
        row.state = state.value
        if state in (TaskState.STARTING, TaskState.RUNNING) and row.acknowledged_at is None:
            row.acknowledged_at = at
        if state in FINISHED_TASK_STATES:
            row.finished_at = at
        if exit_kind is not None:
            row.exit_kind = exit_kind.value
        if exit_code is not None:
            row.exit_code = exit_code
        if state in FINISHED_TASK_STATES:
            self._account(row, at, written_off=ended_before)
        # No flush: the session flushes before its next query and at commit, so a round
        # that changes hundreds of tasks sends them in one batch.
        return convert.task(row)

    def _account(self, row: TaskRow, ended_at: datetime, *, written_off: bool) -> None:
        """Keep what the ended task used. It ran from its worker's acknowledgement (or, when
        its exit report overtook that, from its creation); a task written off before any
        worker took it used nothing. A task written off (LOST) that ends again later (its
        exit arrives, or its node returned still running it and it stopped) ran until
        then: its record is extended."""
        started = row.acknowledged_at
        if started is None and row.exit_kind is not None:
            started = row.created_at
        if started is None:
            return
        num_gpus = len(row.gpu_indices or ())
        seconds = max(0.0, (ended_at - started).total_seconds())
        if written_off:
            existing = self._session.scalars(
                select(UsageRow).where(UsageRow.task_id == row.id)
            ).one_or_none()
            if existing is not None:
                existing.ended_at = max(ended_at, started)
                existing.gpu_seconds = seconds * num_gpus
                existing.end_state = row.state
                existing.exit_kind = row.exit_kind
                existing.exit_code = row.exit_code
                return
        job = self._session.get(JobRow, row.job_id)
        self._session.add(
            UsageRow(
                task_id=row.id,
                job_id=row.job_id,
                user=job.user if job is not None else "",
                node_name=row.node_name,
                lease=row.lease,
                gpu_type=row.gpu_type,
                num_gpus=num_gpus,
                started_at=started,
                ended_at=max(ended_at, started),
                gpu_seconds=seconds * num_gpus,
                end_state=row.state,
                exit_kind=row.exit_kind,
                exit_code=row.exit_code,
            )
        )

    def extend_many(self, task_ids: Collection[int], *, round: int) -> None:
        """Keep many tasks for another lease period, in a few statements, none through the
        unit of work's rows (a round extends every running task; their rows, if loaded,
        keep the round they were read with)."""
        ids = sorted(task_ids)
        for start in range(0, len(ids), _EXTEND_BATCH):
            self._session.execute(
                update(TaskRow)
                .where(TaskRow.id.in_(ids[start : start + _EXTEND_BATCH]))
                .values(round=round, iteration_budget=0)
                .execution_options(synchronize_session=False, **{PLACEMENT_UNCHANGED: True})
            )
