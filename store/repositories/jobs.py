"""Jobs, their state transitions and their event history."""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Row,
    Text,
    bindparam,
    exists,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.exc import StaleDataError

from store.domain import Job, JobEvent, JobSpec, NewJob
from store.errors import (
    AlreadyExistsError,
    ConflictError,
    InvalidTransitionError,
    NotFoundError,
)
from store.job_memo import JobMemo
from store.models import CompletionNoticeRow, IdempotencyKeyRow, JobEventRow, JobRow, utcnow
from store.repositories import convert, listing
from store.repositories.notifications import NotificationRepository
from store.session_writes import flush_pending, has_written, mark_written
from store.states import REQUEUABLE_JOB_STATES, TERMINAL_JOB_STATES, JobState, can_transition

_LIVE = [s.value for s in JobState if s not in TERMINAL_JOB_STATES]
# Ids per statement when rows are read by id with a memo; when more than this many rows
# changed and they are most of the unfinished jobs, a read of the unfinished jobs reads
# every one of them in one statement instead.
_LOAD_BY_ID_MAX = 500
# The tables themselves, for inserts that skip the ORM's unit of work.
_KEYS = IdempotencyKeyRow.metadata.tables[IdempotencyKeyRow.__tablename__]
_EVENTS = JobEventRow.metadata.tables[JobEventRow.__tablename__]
_JOBS = JobRow.metadata.tables[JobRow.__tablename__]
_WAITING_REASON = "waiting for the next scheduling round"
# What storing a progress report reads of its job, and the write of its counters: plain
# columns and a version-checked UPDATE, without the ORM's loading and flush (most of a
# report's cost when every worker reports every few seconds).
_PROGRESS_TARGETS = select(
    _JOBS.c.id,
    _JOBS.c.state,
    _JOBS.c.version,
    _JOBS.c.iterations,
    _JOBS.c.job_type,
    _JOBS.c.num_gpus,
    _JOBS.c.iterations_done,
    _JOBS.c.checkpoint_iterations,
    _JOBS.c.attained_service,
    _JOBS.c.reports_progress,
).where(_JOBS.c.id.in_(bindparam("ids", expanding=True)))
_WRITE_PROGRESS = (
    update(_JOBS)
    .where(_JOBS.c.id == bindparam("b_id"), _JOBS.c.version == bindparam("b_version"))
    .values(
        iterations_done=bindparam("b_done"),
        checkpoint_iterations=bindparam("b_checkpoint"),
        attained_service=bindparam("b_service"),
        reports_progress=True,
        version=_JOBS.c.version + 1,
    )
)


# Waiting reasons, written in bulk: a round at a long queue changes thousands (every job
# behind the head names it). Through SQLAlchemy's executemany each row's parameters are
# processed in Python (29 ms of CPU for 4,600 rows on SQLite, 47 ms on PostgreSQL, 125 ms
# there from start to end); the driver's own executemany on SQLite takes 15 ms, and one
# statement over two arrays on PostgreSQL 11 ms (60 ms to the end). A reason is advisory
# text: no new version, and a job that left the waiting states keeps its own.
_REASONS_SQLITE = (
    f"UPDATE {_JOBS.name} SET reason = ? WHERE id = ? AND reason != ? AND state IN ({{marks}})"
)
_REASONS_POSTGRES = text(
    f"UPDATE {_JOBS.name} AS j SET reason = u.reason "
    "FROM unnest(CAST(:ids AS bigint[]), CAST(:reasons AS text[])) AS u(id, reason) "
    "WHERE j.id = u.id AND j.reason != u.reason AND j.state = ANY(CAST(:states AS text[]))"
)


@dataclass(frozen=True, slots=True)
class ProgressTarget:
    """What storing a progress report needs of its job (:meth:`JobRepository.progress_targets`)."""

    id: int
    state: JobState
    version: int
    iterations: int
    job_type: str
    num_gpus: int
    iterations_done: int
    checkpoint_iterations: int
    attained_service: float
    reports_progress: bool


@dataclass(frozen=True, slots=True)
class ProgressWrite:
    """A job's progress counters as they are to be stored, with the version they were
    computed from (:meth:`JobRepository.write_progress`)."""

    job_id: int
    version: int
    iterations_done: int
    checkpoint_iterations: int
    attained_service: float


# Built once: constructing a statement costs more than running it (a RETURNING of every
# column; IN lists, expanded when run). The keys' two IN lists are matched as pairs by the
# caller of _KEYED.
_INSERT_PLAIN = insert(_JOBS).returning(*_JOBS.c, sort_by_parameter_order=True)
_INSERT_KEYS = insert(_KEYS)
_INSERT_EVENTS = insert(_EVENTS)
_KEYED = select(
    IdempotencyKeyRow.user,
    IdempotencyKeyRow.key,
    IdempotencyKeyRow.job_id,
    IdempotencyKeyRow.spec_digest,
).where(
    IdempotencyKeyRow.key.in_(bindparam("keys", expanding=True)),
    IdempotencyKeyRow.user.in_(bindparam("users", expanding=True)),
)


class JobRepository:
    def __init__(self, session: Session) -> None:
        self._session = session
        # Rows this unit of work has read stay referenced (the session's identity map holds
        # them weakly) so a later write in the same unit of work is checked against the
        # version it read, not against a fresh reload.
        self._seen: dict[int, JobRow] = {}

    def _keep(self, row: JobRow) -> JobRow:
        self._seen[row.id] = row
        return row

    def _flush(self, job_id: int) -> None:
        # The version column makes a lost update visible here: the UPDATE matched no row
        # because another unit of work committed a newer version first.
        try:
            self._session.flush()
        except StaleDataError as exc:
            raise ConflictError(f"job {job_id} was changed concurrently; reload and retry") from exc

    # -- reading -----------------------------------------------------------------------

    def _row(self, job_id: int, expected_version: int | None = None) -> JobRow:
        row = self._session.get(JobRow, job_id)
        if row is None:
            raise NotFoundError("job", job_id)
        self._keep(row)
        if expected_version is not None and row.version != expected_version:
            raise ConflictError(
                f"job {job_id} changed: version {row.version}, expected {expected_version}"
            )
        return row

    def get(self, job_id: int) -> Job:
        return convert.job(self._row(job_id))

    def find(self, job_id: int) -> Job | None:
        row = self._session.get(JobRow, job_id)
        return convert.job(self._keep(row)) if row is not None else None

    def query(
        self,
        *,
        user: str = "",
        states: Collection[JobState] = (),
        after_id: int = 0,
        limit: int | None = None,
        array_job_id: int = 0,
    ) -> list[Job]:
        """Jobs ordered by id, optionally filtered by owner, state and array, paged by id."""
        query = select(JobRow).where(JobRow.id > after_id).order_by(JobRow.id)
        if user:
            query = query.where(JobRow.user == user)
        if array_job_id:
            query = query.where(JobRow.array_job_id == array_job_id)
        if states:
            query = query.where(JobRow.state.in_([s.value for s in states]))
        if limit is not None:
            query = query.limit(limit)
        return [convert.job(self._keep(row)) for row in self._session.scalars(query)]

    def listing(
        self,
        *,
        user: str = "",
        states: Collection[JobState] = (),
        after_id: int = 0,
        limit: int | None = None,
        array_job_id: int = 0,
    ) -> list[Job]:
        """What :meth:`query` returns, read as plain columns: many times faster for long
        listings, but nothing read is kept for a later write's version check, so a unit of
        work that changes the jobs it reads uses :meth:`query`."""
        query = listing.listing_query(
            user=user, states=states, after_id=after_id, limit=limit, array_job_id=array_job_id
        )
        return listing.listed_jobs(self._session, query)

    def history(
        self,
        *,
        user: str = "",
        since: datetime | None = None,
        states: Collection[JobState] = (),
        before_id: int = 0,
        limit: int | None = None,
    ) -> list[Job]:
        """Ended jobs, newest id first, optionally filtered by owner, end time and (terminal)
        state, paged by id."""
        wanted = [s.value for s in (states or TERMINAL_JOB_STATES) if s in TERMINAL_JOB_STATES]
        query = select(JobRow).where(JobRow.state.in_(wanted)).order_by(JobRow.id.desc())
        if before_id:
            query = query.where(JobRow.id < before_id)
        if user:
            query = query.where(JobRow.user == user)
        if since is not None:
            query = query.where(JobRow.finished_at >= since)
        if limit is not None:
            query = query.limit(limit)
        return [convert.job(self._keep(row)) for row in self._session.scalars(query)]

    def time_limited(self, states: Collection[JobState]) -> list[Job]:
        """Jobs in these states that have a time limit, ordered by id."""
        query = (
            select(JobRow)
            .where(JobRow.state.in_([s.value for s in states]), JobRow.time_limit_s > 0)
            .order_by(JobRow.id)
        )
        return [convert.job(self._keep(row)) for row in self._session.scalars(query)]

    def list_unfinished(self, *, memo: JobMemo | None = None) -> list[Job]:
        """Every job not in a terminal state, ordered by id.

        With a `memo` (store.job_memo), rows it holds at their current version are not
        loaded again, and the memo is then given what was read. It is used only while the
        unit of work has written nothing: its reads are then all committed state."""
        if memo is None or has_written(self._session):
            query = select(JobRow).where(JobRow.state.in_(_LIVE)).order_by(JobRow.id)
            return [convert.job(self._keep(row)) for row in self._session.scalars(query)]
        stamps = self._stamps(JobRow.state.in_(_LIVE))
        jobs = self._remembered(stamps, memo, live_only=True)
        ordered = [jobs[job_id] for job_id, _, _ in stamps if job_id in jobs]
        memo.keep(ordered)
        return ordered

    def hold_candidates(self, *, memo: JobMemo | None = None) -> list[Job]:
        """The unfinished jobs a hold can apply to, ordered by id: those with dependencies,
        held by someone, elements of an array with a cap on running elements, and jobs
        requeued before (see master.jobs.holds). The database picks them out, so a long
        queue of plain jobs costs the check nothing.

        With a `memo`, rows it holds at their current version are not loaded again; the
        memo is not changed (it holds every unfinished job, these are some)."""
        where = (
            JobRow.state.in_(_LIVE),
            or_(
                sql_cast(JobRow.dependencies, Text) != "[]",
                JobRow.held_by != "",
                JobRow.array_max_running > 0,
                JobRow.requeues > 0,
            ),
        )
        if memo is None or has_written(self._session):
            query = select(JobRow).where(*where).order_by(JobRow.id)
            return [convert.job(self._keep(row)) for row in self._session.scalars(query)]
        stamps = self._stamps(*where)
        jobs = self._remembered(stamps, memo, live_only=True)
        return [jobs[job_id] for job_id, _, _ in stamps if job_id in jobs]

    def _stamps(self, *where: ColumnElement[bool]) -> list[tuple[int, int, str]]:
        """(id, version, reason) of the jobs matching `where`, by id: what tells whether a
        job read before is still the job the row holds (see store.job_memo)."""
        query = select(JobRow.id, JobRow.version, JobRow.reason).where(*where)
        rows = self._session.execute(query.order_by(JobRow.id))
        return [(int(job_id), int(version), str(reason)) for job_id, version, reason in rows]

    def _remembered(
        self,
        stamps: Sequence[tuple[int, int, str]],
        memo: JobMemo,
        *,
        live_only: bool,
        add: bool = False,
    ) -> dict[int, Job]:
        """The jobs of `stamps` (id, version, reason): from the memo where it holds the
        version, the others from their rows (unfinished ones only, with `live_only`), by
        id, and with `add` remembered in the memo too. The rows read are counted in the
        memo (`rows_loaded`)."""
        known = memo.known()
        jobs: dict[int, Job] = {}
        stale: list[int] = []
        for job_id, version, reason in stamps:
            job = known.get(job_id)
            if job is None or job.version != version:
                stale.append(job_id)
            else:
                jobs[job_id] = job if job.reason == reason else replace(job, reason=reason)
        # A row may have changed since its stamp was read (each statement reads the latest
        # commit): the row loaded is newer and wins; one that ended meanwhile is left out.
        # Read as plain columns: the callers have written nothing in this unit of work
        # (has_written), and building ORM objects for rows nobody changes here cost half
        # of such a read.
        if live_only and len(stale) > _LOAD_BY_ID_MAX and 2 * len(stale) > len(stamps):
            # Most rows (an empty memo): one statement, not a long list of ids. Fewer are
            # read by id, a few hundred at a time, even when many: a long queue that
            # gained a thousand submissions since the last read loads those, not the
            # whole queue.
            wanted = set(stale)
            query = select(_JOBS).where(_JOBS.c.state.in_(_LIVE))
            every = self._session.connection().execute(query).all()
            fetched = len(every)
            rows = [row for row in every if row.id in wanted]
        else:
            rows = self._rows_by_id(stale, live_only=live_only)
            fetched = len(rows)
        loaded = [convert.job(cast(JobRow, row)) for row in rows]
        for job in loaded:
            jobs[job.id] = job
        if add:
            memo.add(job for job in loaded if job.state not in TERMINAL_JOB_STATES)
        memo.count_loaded(fetched)
        return jobs

    def array_elements(
        self, array_job_ids: Collection[int], *, memo: JobMemo | None = None
    ) -> dict[int, list[Job]]:
        """Per array id, its elements ordered by index (arrays that do not exist are left
        out). With a `memo`, the elements it holds at their current version are taken from
        it (see get_many)."""
        if not array_job_ids:
            return {}
        if memo is not None and not has_written(self._session):
            ids = sorted(set(array_job_ids))
            stamps: list[tuple[int, int, str]] = []
            for start in range(0, len(ids), _LOAD_BY_ID_MAX):
                chunk = ids[start : start + _LOAD_BY_ID_MAX]
                stamps.extend(self._stamps(JobRow.array_job_id.in_(chunk)))
            jobs = self._remembered(stamps, memo, live_only=False)
            elements: dict[int, list[Job]] = {}
            for job in sorted(jobs.values(), key=lambda j: j.spec.array_index or 0):
                elements.setdefault(job.spec.array_job_id, []).append(job)
            return elements
        query = (
            select(JobRow)
            .where(JobRow.array_job_id.in_(list(array_job_ids)))
            .order_by(JobRow.array_job_id, JobRow.array_index)
        )
        found: dict[int, list[Job]] = {}
        for row in self._session.scalars(query):
            found.setdefault(int(row.array_job_id or 0), []).append(convert.job(self._keep(row)))
        return found

    def get_many(self, job_ids: Collection[int], *, memo: JobMemo | None = None) -> dict[int, Job]:
        """Jobs by id (missing ids are left out). With a `memo`, those it holds at their
        current version are taken from it (as list_unfinished does), and those read are
        added to it, so that the next read of the same jobs (every round reads the running
        ones) loads only what changed. Such a job's row is not loaded in this unit of
        work: a later change to it is checked against the version current then, not the
        one read here."""
        if not job_ids:
            return {}
        if memo is None or has_written(self._session):
            query = select(JobRow).where(JobRow.id.in_(list(job_ids)))
            return {row.id: convert.job(self._keep(row)) for row in self._session.scalars(query)}
        ids = sorted(set(job_ids))
        stamps: list[tuple[int, int, str]] = []
        for start in range(0, len(ids), _LOAD_BY_ID_MAX):
            stamps.extend(self._stamps(JobRow.id.in_(ids[start : start + _LOAD_BY_ID_MAX])))
        return self._remembered(stamps, memo, live_only=False, add=True)

    def read_many(self, job_ids: Collection[int]) -> dict[int, Job]:
        """Jobs by id (missing ids are left out), read as plain columns for a unit of work
        that changes none of them: unlike `get_many`, no row is kept for later changes."""
        if not job_ids:
            return {}
        flush_pending(self._session)
        return {
            row.id: convert.job(cast(JobRow, row))
            for row in self._rows_by_id(sorted(set(job_ids)), live_only=False)
        }

    def _rows_by_id(self, ids: Sequence[int], *, live_only: bool) -> list[Row[Any]]:
        """The jobs table's rows of `ids` (unfinished ones only, with `live_only`), a few
        hundred ids per statement. A returned row has every column under its attribute's
        name, as a JobRow does."""
        connection = self._session.connection()
        rows: list[Row[Any]] = []
        for start in range(0, len(ids), _LOAD_BY_ID_MAX):
            chunk = select(_JOBS).where(_JOBS.c.id.in_(ids[start : start + _LOAD_BY_ID_MAX]))
            if live_only:
                chunk = chunk.where(_JOBS.c.state.in_(_LIVE))
            rows.extend(connection.execute(chunk))
        return rows

    def count_by_state(self, *, user: str = "") -> dict[JobState, int]:
        """Jobs per state, of one user when `user` is given."""
        query = select(JobRow.state, func.count()).group_by(JobRow.state)
        if user:
            query = query.where(JobRow.user == user)
        rows = self._session.execute(query)
        counts = dict.fromkeys(JobState, 0)
        for state, count in rows:
            counts[JobState(state)] = int(count)
        return counts

    def find_by_idempotency_key(self, user: str, key: str, spec_digest: str = "") -> Job | None:
        """The job `user` submitted with this idempotency key, if any (an array's first
        element). AlreadyExistsError when it was submitted with a spec of another digest."""
        job_id = self._keyed_job_id(user, key, spec_digest)
        return self.get(job_id) if job_id is not None else None

    def _keyed_job_id(self, user: str, key: str, spec_digest: str) -> int | None:
        existing = self._session.get(IdempotencyKeyRow, (user, key))
        if existing is None:
            return None
        if spec_digest and existing.spec_digest and existing.spec_digest != spec_digest:
            raise key_reused(key, self.get(existing.job_id))
        return existing.job_id

    def keyed(self, keys: Collection[tuple[str, str]]) -> dict[tuple[str, str], StoredKey]:
        """The job stored under each (user, idempotency key) of `keys` that was used, in one
        query."""
        if not keys:
            return {}
        # Plain rows through the session's connection: the ORM's execution path costs
        # several times the statement on every submission.
        rows = self._session.connection().execute(
            _KEYED,
            {"keys": sorted({key for _, key in keys}), "users": sorted({u for u, _ in keys})},
        )
        return {
            (user, key): StoredKey(int(job_id), digest or "")
            for user, key, job_id, digest in rows
            if (user, key) in keys
        }

    def any_in_states(self, states: Collection[JobState]) -> bool:
        """Whether some job is in one of `states`: an existence check, which the state
        index answers. Asking for the first such job by id instead walks the jobs before it
        in id order; under the control-plane benchmark's load on PostgreSQL (28,000 waiting
        jobs behind 1,800 running and ended ones) that took 90 ms at the median."""
        wanted = [s.value for s in states]
        if not wanted:
            return False
        return bool(
            self._session.execute(select(exists().where(JobRow.state.in_(wanted)))).scalar()
        )

    def waiting_counts(self, users: Collection[str]) -> dict[str, int]:
        """Per user of `users`, their jobs waiting to run (PENDING or PREEMPTED)."""
        if not users:
            return {}
        waiting = (JobState.PENDING.value, JobState.PREEMPTED.value)
        query = (
            select(JobRow.user, func.count())
            .where(JobRow.user.in_(list(users)), JobRow.state.in_(waiting))
            .group_by(JobRow.user)
        )
        counts = dict.fromkeys(users, 0)
        for user, count in self._session.execute(query):
            counts[user] = int(count)
        return counts

    # -- writing -----------------------------------------------------------------------

    def add(self, new: NewJob, *, now: datetime | None = None) -> tuple[Job, bool]:
        """Insert a PENDING job and its `submitted` event.

        With an idempotency key already used by the same user, returns the job created the
        first time and False instead of inserting a duplicate.
        """
        if new.idempotency_key:
            existing = self._keyed_job_id(new.user, new.idempotency_key, new.spec_digest)
            if existing is not None:
                return self.get(existing), False
        [job] = self.add_many([(new, ())], now=now)
        return job, True

    def add_array(
        self, new: NewJob, indices: Sequence[int], *, now: datetime | None = None
    ) -> tuple[list[Job], bool]:
        """Insert one PENDING job per index, in index order, each with its `submitted`
        event; the first element's id becomes the array's id (stored on every element).
        `new.spec.env` gets the element's HADAR_ARRAY_* variables added, and `%A`/`%a` in
        its output files are replaced.

        With an idempotency key already used by the same user, returns the array created the
        first time and False.
        """
        if new.idempotency_key:
            existing = self._keyed_job_id(new.user, new.idempotency_key, new.spec_digest)
            if existing is not None:
                first = self.get(existing)
                elements = self.array_elements([first.spec.array_job_id])
                return elements.get(first.spec.array_job_id, [first]), False
        if not indices:
            raise ValueError("an array needs at least one index")
        at = now or utcnow()
        head: JobRow | None = None
        rows: list[JobRow] = []
        for index in indices:
            row = self._pending_row(new.user, at)
            array_id = head.id if head is not None else 0
            convert.fill_spec(row, element_spec(new.spec, array_id, index, len(indices)))
            self._session.add(row)
            if head is None:
                # The array's id is its first element's, known once that row is inserted.
                self._session.flush()
                head = row
                convert.fill_spec(row, element_spec(new.spec, row.id, index, len(indices)))
            rows.append(row)
        assert head is not None
        self._session.flush()
        if new.idempotency_key:
            self._session.add(
                IdempotencyKeyRow(
                    user=new.user,
                    key=new.idempotency_key,
                    job_id=head.id,
                    spec_digest=new.spec_digest or None,
                )
            )
        if new.hold:
            for row in rows:
                row.held_by = new.user
                row.reason = hold_reason(new.user, row.id)
        for row in rows:
            self._add_event(
                row.id,
                at,
                JobState.PENDING,
                JobState.PENDING,
                "submitted",
                f"submitted by {new.user} as element {head.id}_{row.array_index} of array "
                f"{head.id}",
                0,
            )
        self._session.flush()
        return [convert.job(row) for row in rows], True

    def add_many(
        self, items: Sequence[tuple[NewJob, Sequence[int]]], *, now: datetime | None = None
    ) -> list[Job]:
        """Insert several submissions at once: per item a PENDING job, or with indices one
        element per index as `add_array` does, each with its `submitted` event and its
        idempotency key. Ids follow the order of `items`, an array's elements next to each
        other. Returns each item's job (an array's first element).

        Keys are not looked up here: the caller has checked them (`keyed`), and a key used
        twice fails the unit of work."""
        at = now or utcnow()
        if all(not indices and not new.hold for new, indices in items):
            return self._add_plain(items, at)
        firsts: list[JobRow] = []
        # Every inserted row, with the event reason that goes with it.
        inserted: list[tuple[JobRow, str]] = []
        for new, indices in items:
            if not indices:
                row = self._pending_row(new.user, at)
                convert.fill_spec(row, new.spec)
                self._session.add(row)
                firsts.append(row)
                inserted.append((row, f"submitted by {new.user}"))
                continue
            count = len(indices)
            head = self._pending_row(new.user, at)
            convert.fill_spec(head, element_spec(new.spec, 0, indices[0], count))
            self._session.add(head)
            # The array's id is its first element's, known once that row is inserted (with
            # the rows of the items before it, in one statement).
            self._session.flush()
            convert.fill_spec(head, element_spec(new.spec, head.id, indices[0], count))
            firsts.append(head)
            rows = [head]
            for index in indices[1:]:
                row = self._pending_row(new.user, at)
                convert.fill_spec(row, element_spec(new.spec, head.id, index, count))
                self._session.add(row)
                rows.append(row)
            inserted.extend(
                (
                    row,
                    f"submitted by {new.user} as element {head.id}_{row.array_index} of "
                    f"array {head.id}",
                )
                for row in rows
            )
        self._session.flush()
        held: set[int] = set()
        for (new, _), first in zip(items, firsts, strict=True):
            if not new.hold:
                continue
            # Every element of a held array is held; the reason names the ids, known now.
            for row, _reason in inserted:
                if row is first or (first.array_job_id and row.array_job_id == first.id):
                    row.held_by = new.user
                    row.reason = hold_reason(new.user, row.id)
                    held.add(row.id)
        if held:
            self._session.flush()
        self._write_keys_and_events(
            [(new, first.id) for (new, _), first in zip(items, firsts, strict=True)],
            [(row.id, reason + (" (held)" if row.id in held else "")) for row, reason in inserted],
            at,
        )
        return [convert.job(row) for row in firsts]

    def _add_plain(self, items: Sequence[tuple[NewJob, Sequence[int]]], at: datetime) -> list[Job]:
        """`add_many` for submissions of one job each, none held (the common case): one
        multi-row INSERT ... RETURNING, without the ORM's unit of work, which cost most of
        a submission's CPU. Nothing in this unit of work needs the rows as ORM objects."""
        if not items:
            return []
        values = [
            {
                **convert.spec_columns(new.spec),
                "user": new.user,
                "state": JobState.PENDING.value,
                "reason": _WAITING_REASON,
                "submitted_at": at,
                # The ORM's version counter starts at 1 on insert.
                "version": 1,
            }
            for new, _ in items
        ]
        # Through the session's connection: nothing of the ORM is involved (nor pending).
        rows = self._session.connection().execute(_INSERT_PLAIN, values).all()
        mark_written(self._session)
        # A returned row has every column under its attribute's name, as a JobRow does.
        jobs = [convert.job(cast(JobRow, row)) for row in rows]
        pairs = [(new, job.id) for (new, _), job in zip(items, jobs, strict=True)]
        self._write_keys_and_events(
            pairs, [(job_id, f"submitted by {new.user}") for new, job_id in pairs], at
        )
        return jobs

    def _write_keys_and_events(
        self,
        stored: Sequence[tuple[NewJob, int]],
        events: Sequence[tuple[int, str]],
        at: datetime,
    ) -> None:
        """The idempotency key of each stored submission (with its job's id), and each
        new job's `submitted` event (id, reason), as plain multi-row inserts: nothing in
        this unit of work reads them back, so they need no ORM bookkeeping."""
        keys = [
            {
                "user": new.user,
                "key": new.idempotency_key,
                "job_id": job_id,
                "created_at": at,
                "spec_digest": new.spec_digest or None,
            }
            for new, job_id in stored
            if new.idempotency_key
        ]
        # Through the session's connection, as plain tables: no ORM execution path.
        connection = self._session.connection()
        if keys:
            connection.execute(_INSERT_KEYS, keys)
        if not events:
            return
        connection.execute(
            _INSERT_EVENTS,
            [
                {
                    "job_id": job_id,
                    "at": at,
                    "from_state": JobState.PENDING.value,
                    "to_state": JobState.PENDING.value,
                    "kind": "submitted",
                    "reason": reason,
                    "round": 0,
                }
                for job_id, reason in events
            ],
        )

    @staticmethod
    def _pending_row(user: str, at: datetime) -> JobRow:
        return JobRow(
            user=user,
            state=JobState.PENDING.value,
            reason=_WAITING_REASON,
            submitted_at=at,
        )

    def transition(
        self,
        job_id: int,
        to_state: JobState,
        *,
        kind: str,
        reason: str,
        round: int = 0,
        expected_version: int | None = None,
        at: datetime | None = None,
        exit_code: int | None = None,
        count_retry: bool = False,
        count_preemption: bool = False,
        count_migration: bool = False,
        flush: bool = True,
    ) -> Job:
        """The one way a job changes state: validates it, stores the event, returns the job.

        Raises InvalidTransitionError for a move the job life does not allow, and
        ConflictError when `expected_version` is given and the job changed since (at once,
        or at commit with `flush=False`, which batches many changes into one flush; the
        returned version is then the one before the write).
        """
        row = self._row(job_id, expected_version)
        from_state = JobState(row.state)
        if not can_transition(from_state, to_state):
            raise InvalidTransitionError(job_id, from_state.value, to_state.value)
        when = at or utcnow()
        row.state = to_state.value
        row.reason = reason
        if to_state is JobState.RUNNING and row.started_at is None:
            row.started_at = when
        if to_state in TERMINAL_JOB_STATES:
            row.finished_at = when
        if to_state is JobState.COMPLETED:
            # The scheduling policy learns from it in the next round (see rounds.py).
            self._session.add(CompletionNoticeRow(job_id=row.id, completed_at=when))
        if exit_code is not None:
            row.exit_code = exit_code
        if count_retry:
            row.retries += 1
        if count_preemption:
            row.preemptions += 1
        if count_migration:
            row.migrations += 1
        self._add_event(row.id, when, from_state, to_state, kind, reason, round)
        if to_state in TERMINAL_JOB_STATES:
            # In this transaction: the job's end and the webhook call owed for it commit
            # together or not at all.
            NotificationRepository(self._session).enqueue_for_end(row, to_state, when)
        if flush:
            self._flush(job_id)
        return convert.job(row)

    def set_hold(
        self, job_id: int, held_by: str, *, reason: str, at: datetime | None = None
    ) -> Job:
        """Hold a waiting job back from scheduling in `held_by`'s name, or release it with
        an empty `held_by`; records the event (kind `held` or `released`) with `reason`.
        A job already in that hold is returned unchanged, with no event."""
        row = self._row(job_id)
        if row.held_by == held_by:
            return convert.job(row)
        state = JobState(row.state)
        row.held_by = held_by
        if held_by:
            row.reason = hold_reason(held_by, row.id)
        else:
            row.reason = "waiting for the next scheduling round"
        kind = "held" if held_by else "released"
        self._add_event(row.id, at or utcnow(), state, state, kind, reason, 0)
        self._flush(job_id)
        return convert.job(row)

    def requeue(
        self,
        job_id: int,
        *,
        reason: str,
        ran_s: float,
        keep_progress: bool,
        held_by: str = "",
        at: datetime | None = None,
    ) -> Job:
        """Put a running or ended job back in the queue (PENDING) to run again: its failed
        attempts forgotten, its end time cleared, its time limit counting the run time after
        `ran_s` (what it has run so far). With `keep_progress` it resumes from its last
        checkpoint; without, its counters restart at 0 (a program that cannot resume).
        `held_by`: held at once in that user's name. Records a `requeued` event."""
        row = self._row(job_id)
        from_state = JobState(row.state)
        if from_state not in REQUEUABLE_JOB_STATES:
            raise InvalidTransitionError(job_id, from_state.value, JobState.PENDING.value)
        when = at or utcnow()
        row.state = JobState.PENDING.value
        row.finished_at = None
        row.retries = 0
        row.requeues += 1
        row.requeued_run_s = max(0.0, ran_s)
        if keep_progress:
            row.iterations_done = row.checkpoint_iterations
        else:
            row.iterations_done = 0
            row.checkpoint_iterations = 0
        row.held_by = held_by
        row.reason = hold_reason(held_by, row.id) if held_by else reason
        self._add_event(row.id, when, from_state, JobState.PENDING, "requeued", reason, 0)
        self._flush(job_id)
        return convert.job(row)

    def update_spec(
        self, job_id: int, spec: JobSpec, *, reason: str, at: datetime | None = None
    ) -> Job:
        """Store a job's changed spec (hctl update) with an `updated` event saying what
        changed."""
        row = self._row(job_id)
        state = JobState(row.state)
        convert.fill_spec(row, spec)
        self._add_event(row.id, at or utcnow(), state, state, "updated", reason, 0)
        self._flush(job_id)
        return convert.job(row)

    def note(
        self,
        job_id: int,
        *,
        kind: str,
        reason: str,
        round: int = 0,
        at: datetime | None = None,
        set_reason: bool = True,
        count_migration: bool = False,
        flush: bool = True,
    ) -> Job:
        """Record an event that does not change the state (extended, waiting, migrated)."""
        row = self._row(job_id)
        state = JobState(row.state)
        if set_reason:
            row.reason = reason
        if count_migration:
            row.migrations += 1
        self._add_event(row.id, at or utcnow(), state, state, kind, reason, round)
        if flush:
            self._flush(job_id)
        return convert.job(row)

    def set_waiting_reason(self, job_id: int, reason: str, *, flush: bool = True) -> Job:
        """Update why a job waits without an event (rounds refresh it every time)."""
        row = self._row(job_id)
        if row.reason != reason:
            row.reason = reason
            if flush:
                self._flush(job_id)
        return convert.job(row)

    def set_waiting_reasons(
        self,
        reasons: Mapping[int, str],
        *,
        states: Collection[JobState] = (JobState.PENDING, JobState.PREEMPTED),
    ) -> int:
        """Set many jobs' reasons in one call, only for jobs still in one of `states` (a job
        that started meanwhile keeps its own reason).

        A reason is advisory text, so these updates neither bump the version nor count as
        changes for optimistic locking. Returns how many rows changed.
        """
        if not reasons:
            return 0
        # Pending changes first, as the ORM's own UPDATE would: a state written in this unit
        # of work decides which rows still wait.
        flush_pending(self._session)
        connection = self._session.connection()
        wanted = sorted(state.value for state in states)
        if connection.dialect.name == "postgresql":
            result = connection.execute(
                _REASONS_POSTGRES,
                {"ids": list(reasons), "reasons": list(reasons.values()), "states": wanted},
            )
        else:
            result = connection.exec_driver_sql(
                _REASONS_SQLITE.format(marks=", ".join("?" * len(wanted))),
                [(reason, job_id, reason, *wanted) for job_id, reason in reasons.items()],
            )
        mark_written(self._session)
        for job_id, reason in reasons.items():
            row = self._seen.get(job_id)
            if row is not None and JobState(row.state) in states:
                # Keep this unit of work's view in step without marking the row dirty.
                set_committed_value(row, "reason", reason)
        return int(result.rowcount)

    def record_progress(
        self,
        job_id: int,
        *,
        iterations_done: int,
        checkpoint_iterations: int | None = None,
        service_delta: float = 0.0,
        reported: bool = False,
        expected_version: int | None = None,
        flush: bool = True,
    ) -> Job:
        """Progress only moves forward: a late report never lowers the counters.

        `reported`: this comes from the program's own progress report (not an exit), which
        marks the job as one that reports progress. With `flush=False` the write waits for
        the unit of work's next flush (a conflict is then raised at commit).
        """
        row = self._row(job_id, expected_version)
        changed = False
        if reported and not row.reports_progress:
            row.reports_progress = True
            changed = True
        if iterations_done > row.iterations_done:
            row.iterations_done = iterations_done
            changed = True
        if checkpoint_iterations is not None and checkpoint_iterations > row.checkpoint_iterations:
            row.checkpoint_iterations = checkpoint_iterations
            changed = True
        if service_delta > 0:
            row.attained_service += service_delta
            changed = True
        if changed and flush:
            self._flush(job_id)
        return convert.job(row)

    def progress_targets(self, job_ids: Collection[int]) -> dict[int, ProgressTarget]:
        """The progress counters, state and size of these jobs, by id (missing ids are left
        out), read as plain columns: no row is loaded into the unit of work."""
        if not job_ids:
            return {}
        rows = self._session.connection().execute(_PROGRESS_TARGETS, {"ids": sorted(job_ids)})
        return {
            row.id: ProgressTarget(
                id=row.id,
                state=JobState(row.state),
                version=row.version,
                iterations=row.iterations,
                job_type=row.job_type,
                num_gpus=row.num_gpus,
                iterations_done=row.iterations_done,
                checkpoint_iterations=row.checkpoint_iterations,
                attained_service=row.attained_service,
                reports_progress=bool(row.reports_progress),
            )
            for row in rows
        }

    def write_progress(self, writes: Sequence[ProgressWrite]) -> None:
        """Store progress counters computed from :meth:`progress_targets` (and mark the jobs
        as reporting progress), in one statement. ConflictError when a job's version moved
        since it was read, as a flush would raise. The jobs' rows must not be loaded in
        this unit of work: they would hold the old version."""
        if not writes:
            return
        params = [
            {
                "b_id": w.job_id,
                "b_version": w.version,
                "b_done": w.iterations_done,
                "b_checkpoint": w.checkpoint_iterations,
                "b_service": w.attained_service,
            }
            for w in writes
        ]
        result = self._session.connection().execute(_WRITE_PROGRESS, params)
        mark_written(self._session)
        if result.rowcount != len(writes):
            ids = sorted(w.job_id for w in writes)
            raise ConflictError(f"jobs {ids} were changed concurrently; reload and retry")

    def record_restart(self, job_id: int, seconds: float, *, flush: bool = True) -> Job:
        """Record how long a placement of the job took to report progress: the mean of this
        and the previous figure, so one slow start (a cold disk cache) weighs half."""
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"restart seconds must be finite and >= 0, got {seconds}")
        row = self._row(job_id)
        row.restart_s = seconds if row.restart_s is None else (row.restart_s + seconds) / 2
        if flush:
            self._flush(job_id)
        return convert.job(row)

    def set_exit_code(self, job_id: int, exit_code: int) -> Job:
        """Record the exit code of a job's last process exit without changing its state
        (a job completed by its progress report exits afterwards)."""
        row = self._row(job_id)
        if row.exit_code != exit_code:
            row.exit_code = exit_code
            self._flush(job_id)
        return convert.job(row)

    def set_failure_output(self, job_id: int, text: str) -> None:
        """Keep what a failed attempt last wrote to standard error (private to the job's
        owner and admins, never part of the reason)."""
        row = self._row(job_id)
        if row.failure_output != text:
            row.failure_output = text
            self._flush(job_id)

    def _add_event(
        self,
        job_id: int,
        at: datetime,
        from_state: JobState,
        to_state: JobState,
        kind: str,
        reason: str,
        round: int,
    ) -> None:
        self._session.add(
            JobEventRow(
                job_id=job_id,
                at=at,
                from_state=from_state.value,
                to_state=to_state.value,
                kind=kind,
                reason=reason,
                round=round,
            )
        )

    # -- history -----------------------------------------------------------------------

    def events(self, job_id: int) -> list[JobEvent]:
        """A job's history, oldest first."""
        query = select(JobEventRow).where(JobEventRow.job_id == job_id).order_by(JobEventRow.id)
        return [convert.job_event(row) for row in self._session.scalars(query)]

    def last_back_in_queue(self, job_ids: Collection[int]) -> dict[int, JobEvent]:
        """Each job's latest event that put it back in the queue to run again: one into
        PREEMPTED (a preemption, a retry, a lost task) or a requeue (into PENDING). Jobs
        that never went back are left out."""
        if not job_ids:
            return {}
        latest = (
            select(func.max(JobEventRow.id))
            .where(
                JobEventRow.job_id.in_(list(job_ids)),
                or_(
                    JobEventRow.to_state == JobState.PREEMPTED.value,
                    JobEventRow.kind == "requeued",
                ),
            )
            .group_by(JobEventRow.job_id)
        )
        query = select(JobEventRow).where(JobEventRow.id.in_(latest))
        return {row.job_id: convert.job_event(row) for row in self._session.scalars(query)}

    def events_after(
        self,
        after_id: int,
        *,
        job_ids: Sequence[int] = (),
        also: Collection[int] = (),
        limit: int = 1000,
    ) -> list[JobEvent]:
        """Events with id > after_id, and those with an id in `also`, oldest first (for
        watchers that poll). Read as plain columns: watchers read every event once, and
        nothing changes them."""
        newer = JobEventRow.id > after_id
        query = select(
            JobEventRow.id,
            JobEventRow.job_id,
            JobEventRow.at,
            JobEventRow.from_state,
            JobEventRow.to_state,
            JobEventRow.kind,
            JobEventRow.reason,
            JobEventRow.round,
        ).where(or_(newer, JobEventRow.id.in_(list(also))) if also else newer)
        if job_ids:
            query = query.where(JobEventRow.job_id.in_(list(job_ids)))
        query = query.order_by(JobEventRow.id).limit(limit)
        return [
            JobEvent(
                id=event_id,
                job_id=job_id,
                at=at,
                from_state=JobState(from_state),
                to_state=JobState(to_state),
                kind=kind,
                reason=reason,
                round=round_number,
            )
            for event_id, job_id, at, from_state, to_state, kind, reason, round_number in (
                self._session.execute(query)
            )
        ]

    def event_ids_after(self, after_id: int) -> list[int]:
        """The ids of the events after `after_id`, in order."""
        query = select(JobEventRow.id).where(JobEventRow.id > after_id).order_by(JobEventRow.id)
        return list(self._session.scalars(query))

    def last_event_id(self) -> int:
        value = self._session.execute(select(func.max(JobEventRow.id))).scalar_one_or_none()
        return int(value or 0)


@dataclass(frozen=True, slots=True)
class StoredKey:
    """What an idempotency key was stored with: its job (an array's first element) and the
    digest of its spec ("" for keys stored before digests were kept: they match any)."""

    job_id: int
    spec_digest: str


def hold_reason(user: str, job_id: int) -> str:
    """Why a held job waits, and the command that lets it run."""
    return f"held by {user} (hctl release {job_id} to let it run)"


def key_reused(key: str, first: Job) -> AlreadyExistsError:
    """The refusal of `key` sent again with a spec other than the one `first` was stored
    with."""
    what = (
        f"array {first.id}"
        if first.spec.array_job_id == first.id and first.spec.array
        else f"job {first.id}"
    )
    return AlreadyExistsError(
        f"idempotency key {key!r} was used for {what} with a different spec; "
        "submit with a new key, or with the same spec to get that job"
    )


def element_spec(spec: JobSpec, array_job_id: int, index: int, count: int) -> JobSpec:
    """An array element's spec: the array's, with the element's identity, its environment
    (HADAR_ARRAY_INDEX, HADAR_ARRAY_JOB_ID, HADAR_ARRAY_TASK_COUNT) and `%A`/`%a` in its
    output files replaced (the workers replace the other sequences)."""
    env = dict(spec.env)
    env.update(
        {
            "HADAR_ARRAY_INDEX": str(index),
            "HADAR_ARRAY_JOB_ID": str(array_job_id),
            "HADAR_ARRAY_TASK_COUNT": str(count),
        }
    )
    return replace(
        spec,
        array_job_id=array_job_id,
        array_index=index,
        env=tuple(sorted(env.items())),
        output=expand_array_pattern(spec.output, array_job_id, index),
        error=expand_array_pattern(spec.error, array_job_id, index),
    )


_PATTERN = re.compile(r"%(.)")


def expand_array_pattern(pattern: str, array_job_id: int, index: int) -> str:
    """`%A` -> the array id, `%a` -> the index; other sequences (`%%` included) are kept for
    the worker."""
    values = {"A": str(array_job_id), "a": str(index)}
    return _PATTERN.sub(lambda m: values.get(m.group(1), m.group(0)), pattern)
