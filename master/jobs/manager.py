"""Jobs as people and workers change them: submission, cancellation, progress and exits."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from master.errors import InvalidArgumentError, PermissionDeniedError, UnavailableError
from master.jobs.lifecycle import (
    StopOrder,
    fail_attempt,
    lose_job_placement,
    release_finished_job,
    release_tasks,
)
from master.jobs.limits import SubmitRateLimiter
from master.jobs.notifications import check_url
from master.jobs.submissions import Stored, Submission, store
from master.jobs.timelimits import apply_time_limit
from master.jobs.validation import (
    ClusterFacts,
    spec_digest,
    validate_idempotency_key,
    validate_spec,
)
from master.nodes.dispatch import Dispatcher
from master.process.groupcommit import GroupCommitter, GroupStats
from master.process.transactions import Transactor
from master.scheduling.memory import memory_by_type
from master.scheduling.throughput import ThroughputModel, plausible_rate
from master.settings import Settings
from protos.arrays import parse_array
from protos.hadar.v1 import common_pb2
from store import UnitOfWork
from store.domain import Job, JobEvent, NewJob, Task
from store.repositories.jobs import ProgressTarget, ProgressWrite
from store.repositories.throughput import Measured
from store.states import ExitKind, JobState, TaskState, is_terminal

log = structlog.get_logger(__name__)

FACTS_TTL_S = 5.0
# Characters of a failed process's last stderr line kept for `hctl show`.
FAILURE_OUTPUT_MAX = 1000


@dataclass(frozen=True, slots=True)
class Caller:
    """Who makes a request: a user (maybe an admin) or the cluster's workers."""

    user: str
    admin: bool = False


@dataclass(frozen=True, slots=True)
class ProgressUpdate:
    job_id: int
    task_index: int
    lease: int
    iterations_done: int
    iterations_per_s: float
    checkpoint_iterations: int
    gpu_type: str


@dataclass(frozen=True, slots=True)
class TaskExit:
    node: str
    job_id: int
    task_index: int
    lease: int
    kind: ExitKind
    exit_code: int | None
    signal: int
    iterations_done: int
    message: str
    # The runtime refused the job's setup: no retry can pass.
    contract_error: bool = False


@dataclass(frozen=True, slots=True)
class _ProgressReport:
    """One worker's ReportProgress call, as it waits for its group's transaction."""

    node: str
    updates: tuple[ProgressUpdate, ...]
    now: datetime
    wall: float


@dataclass(slots=True)
class _ProgressApplied:
    """What storing one report did: per update whether its lease is stale, the stops its
    job's completion orders, and whether a job finished."""

    stale: list[bool]
    orders: list[StopOrder]
    finished: bool


@dataclass(slots=True)
class _Counters:
    """A job's progress counters as a group's reports move them, with the rule of
    `JobRepository.record_progress`: counts only move forward, service adds up."""

    target: ProgressTarget
    iterations_done: int
    checkpoint_iterations: int
    attained_service: float
    reports_progress: bool
    changed: bool = False

    @classmethod
    def of(cls, target: ProgressTarget) -> _Counters:
        return cls(
            target,
            target.iterations_done,
            target.checkpoint_iterations,
            target.attained_service,
            target.reports_progress,
        )

    def add(self, iterations_done: int, checkpoint_iterations: int, service: float) -> None:
        if not self.reports_progress:
            self.reports_progress = self.changed = True
        if iterations_done > self.iterations_done:
            self.iterations_done = iterations_done
            self.changed = True
        if checkpoint_iterations > self.checkpoint_iterations:
            self.checkpoint_iterations = checkpoint_iterations
            self.changed = True
        if service > 0:
            self.attained_service += service
            self.changed = True

    def write(self) -> ProgressWrite:
        return ProgressWrite(
            job_id=self.target.id,
            version=self.target.version,
            iterations_done=self.iterations_done,
            checkpoint_iterations=self.checkpoint_iterations,
            attained_service=self.attained_service,
        )


def completion_reason(job: Job, exit_code: int | None) -> str:
    """Why a job whose process exited cleanly is COMPLETED: its iterations when its program
    reports progress, else (opaque commands, plain scripts) only its exit code says so."""
    code = "" if exit_code is None else f"exit {exit_code}"
    if job.reports_progress and job.iterations_done:
        return f"completed ({job.iterations_done} iterations" + (f", {code})" if code else ")")
    return f"completed ({code})" if code else "completed"


class JobManager:
    def __init__(
        self,
        tx: Transactor,
        dispatcher: Dispatcher,
        settings: Settings,
        base_model: ThroughputModel,
        on_change: Callable[[], None],
        on_capacity: Callable[[bool], None],
        nodes_version: Callable[[], int] = lambda: 0,
    ) -> None:
        self._tx = tx
        self._nodes_version = nodes_version
        self._facts_cache: tuple[int, float, ClusterFacts] | None = None
        self._facts_lock = threading.Lock()
        self._dispatcher = dispatcher
        self._settings = settings
        self._base_model = base_model
        self._on_change = on_change
        # Called when a job waits (False) or GPUs were freed (True): the daemon may start
        # an early round.
        self._on_capacity = on_capacity
        self._accepting = True
        self._rate = SubmitRateLimiter(
            settings.submit_rate_per_user, settings.submit_burst_per_user
        )
        # Submissions are stored in groups: one transaction for all those that arrive
        # while the previous group commits. The groups are stored one at a time, which
        # also keeps the per-user pending limit exact.
        self._submissions: GroupCommitter[Submission, Stored] = GroupCommitter(self._store)
        # Progress reports likewise: at 200 workers they are the master's most frequent
        # write, and one transaction each cost more than the reports' own work.
        self._progress: GroupCommitter[_ProgressReport, _ProgressApplied] = GroupCommitter(
            self._store_progress
        )
        # Wall time of the last progress report per (job, task, lease), for service.
        self._last_report: dict[tuple[int, int, int], float] = {}
        self._report_lock = threading.Lock()

    def stop_accepting(self) -> None:
        self._accepting = False

    @property
    def progress_groups(self) -> GroupStats:
        """How the progress reports stored so far were grouped into transactions."""
        return self._progress.stats

    @property
    def progress_queued(self) -> int:
        """Progress calls waiting for a transaction to take them."""
        return self._progress.queued

    # -- people ----------------------------------------------------------------------------

    @property
    def facts(self) -> ClusterFacts:
        """Cluster facts for validation (see `_facts`)."""
        return self._facts()

    def cluster_facts(self, uow: UnitOfWork) -> ClusterFacts:
        gpus, workloads = uow.nodes.capacity()
        count: dict[str, int] = {}
        for gpu_type, _ in gpus:
            count[gpu_type] = count.get(gpu_type, 0) + 1
        return ClusterFacts(
            gpus_by_type=count,
            workloads=frozenset(workloads),
            gpu_memory_by_type=memory_by_type(gpus),
        )

    def _facts(self) -> ClusterFacts:
        """Cluster facts for validation, re-read only when nodes changed (registration,
        loss, drain) or after a few seconds: by one caller at a time, since every
        submission arriving while they are stale would otherwise read them too (at 100
        submissions a second, a registration storm made that most of the master's CPU)."""
        fresh = self._fresh_facts()
        if fresh is not None:
            return fresh
        with self._facts_lock:
            fresh = self._fresh_facts()  # read by the caller this one waited for
            if fresh is not None:
                return fresh
            version = self._nodes_version()
            now = time.monotonic()
            facts = self._tx.read(self.cluster_facts)
            with self._report_lock:
                self._facts_cache = (version, now, facts)
            return facts

    def _fresh_facts(self) -> ClusterFacts | None:
        version = self._nodes_version()
        with self._report_lock:
            cached = self._facts_cache
        if cached is None or cached[0] != version:
            return None
        if time.monotonic() - cached[1] >= FACTS_TTL_S:
            return None
        return cached[2]

    def submit(
        self,
        caller: Caller,
        spec: common_pb2.JobSpec,
        idempotency_key: str = "",
        *,
        hold: bool = False,
    ) -> tuple[Job, bool]:
        if not self._accepting:
            # UNAVAILABLE, not FAILED_PRECONDITION: nothing is wrong with the request, and
            # clients retry UNAVAILABLE: a resend that outlasts the restart is accepted.
            raise UnavailableError(
                "the master is shutting down and accepts no new jobs (nothing was stored); "
                "submit again when it is back up"
            )
        key = validate_idempotency_key(idempotency_key)
        facts = self._facts()
        requested = validate_spec(spec, facts)
        validated = apply_time_limit(
            requested,
            max_s=self._settings.max_time_limit_s,
            default_s=self._settings.default_time_limit_s,
        )
        fair = self._settings.fair_share_config()
        quota = fair.quota(caller.user) if fair is not None else 0
        if quota and validated.num_gpus > quota:
            # It could never start: refused now rather than left waiting forever.
            raise InvalidArgumentError(
                "spec.num_gpus",
                f"asks for {validated.num_gpus} GPUs, more than user {caller.user}'s quota "
                f"of {quota} GPUs at once (max_gpus_per_user)",
            )
        indices: tuple[int, ...] = ()
        if validated.array:
            try:
                array = parse_array(validated.array, max_size=self._settings.max_array_size)
            except ValueError as exc:
                raise InvalidArgumentError("spec.array", str(exc)) from None
            indices = array.indices
            validated = dataclasses.replace(
                validated, array=str(array), array_max_running=array.max_running
            )
        else:
            validated = dataclasses.replace(
                validated, array_job_id=0, array_index=None, array_max_running=0
            )
        if validated.notify_url:
            check_url(validated.notify_url, "spec.notify_url", self._settings)
        # The array as normalized (`0-3` and `0,1,2,3` are one request), the time limit as
        # asked for (a changed cluster default does not make a resend another request).
        digest = (
            spec_digest(dataclasses.replace(validated, time_limit_s=requested.time_limit_s))
            if key
            else ""
        )
        user = caller.user
        wait_s = self._rate.try_take(user)
        if wait_s > 0:
            # A resend of a job already stored is answered, never counted again.
            existing = (
                self._tx.read(lambda uow: uow.jobs.find_by_idempotency_key(user, key, digest))
                if key
                else None
            )
            if existing is None:
                raise self._rate.refusal(user, wait_s)
            return existing, False
        new = NewJob(user=user, spec=validated, idempotency_key=key, spec_digest=digest, hold=hold)
        try:
            # Answered once the transaction that holds it has committed.
            job, created = self._submissions.run(Submission(new, indices))
        except BaseException:
            self._rate.give_back(user)
            raise
        if not created:
            self._rate.give_back(user)
        if created:
            log.info("job submitted", job_id=job.id, user=caller.user, name=validated.name)
            self._on_change()
            if not hold:
                self._on_capacity(False)
        return job, created

    def _store(self, group: Sequence[Submission]) -> list[Stored | Exception]:
        return store(self._tx, group, self._settings.max_pending_jobs_per_user)

    def get(self, job_id: int) -> tuple[Job, list[Task]]:
        def read(uow: UnitOfWork) -> tuple[Job, list[Task]]:
            job = uow.jobs.get(job_id)
            return job, uow.tasks.active_for_job(job_id) if job.state is JobState.RUNNING else []

        return self._tx.read(read)

    def events(self, job_id: int) -> list[JobEvent]:
        return self._tx.read(lambda uow: uow.jobs.events(job_id))

    def cancel(self, caller: Caller, job_id: int, reason: str, *, whole_array: bool = False) -> Job:
        """Cancel a job; with `whole_array` and an array's id, every unfinished element of
        the array, in one transaction (returns the element with that id)."""

        def change(uow: UnitOfWork) -> tuple[Job, list[StopOrder]]:
            job = uow.jobs.get(job_id)
            if job.user != caller.user and not caller.admin:
                raise PermissionDeniedError(
                    f"job {job_id} belongs to {job.user}; only its owner or an admin may cancel it"
                )
            text = f"cancelled by {caller.user}" + (f": {reason}" if reason else "")
            targets = [job]
            if whole_array and job.spec.array_job_id == job.id:
                targets = uow.jobs.array_elements([job.id]).get(job.id, [job])
            orders: list[StopOrder] = []
            result = job
            for target in targets:
                if is_terminal(target.state):
                    continue
                active = uow.tasks.active_for_job(target.id)
                orders.extend(release_tasks(uow, active, text, checkpoint=False))
                done = uow.jobs.transition(
                    target.id, JobState.CANCELLED, kind="cancelled", reason=text
                )
                if target.id == job_id:
                    result = done
            return result, orders

        job, orders = self._tx.write(change)
        log.info("job cancelled", job_id=job_id, by=caller.user, tasks_stopped=len(orders))
        self._dispatcher.send_stops(orders)
        self._on_change()
        if orders:
            self._on_capacity(True)
        return job

    # -- workers ---------------------------------------------------------------------------

    def report_progress(self, node: str, updates: Sequence[ProgressUpdate]) -> list[bool]:
        """Apply progress reports; returns, per report, whether its lease is stale.

        Reports from all workers are stored in groups (one transaction for those that
        arrive while the previous group commits), each answered once its group committed."""
        if not updates:
            return []
        applied = self._progress.run(
            _ProgressReport(node, tuple(updates), datetime.now(UTC), time.time())
        )
        self._dispatcher.send_stops(applied.orders)
        self._on_change()
        if applied.finished:
            self._on_capacity(True)
        return applied.stale

    def _store_progress(
        self, group: Sequence[_ProgressReport]
    ) -> list[_ProgressApplied | BaseException]:
        """One transaction for a group of workers' reports. Should it fail, each report is
        stored again alone, so that one bad report fails only its own call."""
        try:
            return [*self._store_reports(group)]
        except Exception as exc:
            if len(group) == 1:
                return [exc]
            log.warning("storing a group of progress reports failed; storing them one by one")
        outcomes: list[_ProgressApplied | BaseException] = []
        for report in group:
            try:
                outcomes.extend(self._store_reports([report]))
            except Exception as exc:
                outcomes.append(exc)
        return outcomes

    def _store_reports(self, group: Sequence[_ProgressReport]) -> list[_ProgressApplied]:
        """`group` in one transaction. When each task last reported is remembered only once
        it has committed: an attempt retried after a conflict, or a group stored again
        report by report, counts each report's service from the same previous report as the
        first attempt did, not from the attempt itself (which would count none)."""

        def attempt(
            uow: UnitOfWork,
        ) -> tuple[list[_ProgressApplied], dict[tuple[int, int, int], float]]:
            seen: dict[tuple[int, int, int], float] = {}
            return self._apply_group(uow, group, seen), seen

        applied, seen = self._tx.write(attempt)
        with self._report_lock:
            self._last_report.update(seen)
        return applied

    def _apply_group(
        self,
        uow: UnitOfWork,
        group: Sequence[_ProgressReport],
        seen: dict[tuple[int, int, int], float],
    ) -> list[_ProgressApplied]:
        """One transaction's worth of reports. Most only move running jobs' counters: their
        jobs are read as plain columns and written with one statement (`_Counters`). A job
        with a task's first report (it starts running) or a report that finishes it is
        loaded as a row and changed through the unit of work instead. `seen` gets each
        task's report time, for the caller to remember once the transaction commits."""
        keys = [(u.job_id, u.task_index, u.lease) for r in group for u in r.updates]
        tasks = uow.tasks.find_many(keys)
        targets = uow.jobs.progress_targets({t.job_id for t in tasks.values()})
        rowed = self._needing_rows(group, tasks, targets)
        if rowed:
            # Loaded with one query; the steps below find them in the unit of work.
            uow.jobs.get_many(rowed)
        counters: dict[int, _Counters] = {}
        measured: list[Measured] = []
        applied: list[_ProgressApplied] = []
        for report in group:
            outcome = _ProgressApplied([], [], False)
            for update in report.updates:
                task = tasks.get((update.job_id, update.task_index, update.lease))
                if task is None or not task.active or task.node != report.node:
                    outcome.stale.append(True)
                elif task.job_id in rowed:
                    self._apply_with_row(uow, report, update, task, tasks, measured, outcome, seen)
                else:
                    self._count(report, update, task, targets, counters, measured, outcome, seen)
            applied.append(outcome)
        uow.jobs.write_progress([c.write() for c in counters.values() if c.changed])
        uow.throughput.record_many(measured)
        return applied

    @staticmethod
    def _needing_rows(
        group: Sequence[_ProgressReport],
        tasks: dict[tuple[int, int, int], Task],
        targets: dict[int, ProgressTarget],
    ) -> set[int]:
        """The jobs of the group whose reports change more than counters: a task's first
        report, or progress that reaches the job's iterations."""
        rowed: set[int] = set()
        reached: dict[int, int] = {}
        for report in group:
            for update in report.updates:
                task = tasks.get((update.job_id, update.task_index, update.lease))
                if task is None or not task.active or task.node != report.node:
                    continue
                target = targets.get(task.job_id)
                if target is None or task.state in (TaskState.ASSIGNED, TaskState.STARTING):
                    rowed.add(task.job_id)
                    continue
                done = max(reached.get(target.id, target.iterations_done), update.iterations_done)
                reached[target.id] = done
                if done >= target.iterations and not is_terminal(target.state):
                    rowed.add(task.job_id)
        return rowed

    def _count(
        self,
        report: _ProgressReport,
        update: ProgressUpdate,
        task: Task,
        targets: dict[int, ProgressTarget],
        counters: dict[int, _Counters],
        measured: list[Measured],
        outcome: _ProgressApplied,
        seen: dict[tuple[int, int, int], float],
    ) -> None:
        """A report that only moves its running job's counters."""
        target = targets[task.job_id]
        if is_terminal(target.state):
            # Finished or cancelled: whatever still runs must stop.
            outcome.stale.append(True)
            return
        outcome.stale.append(False)
        service = self._service(task, update, report.wall, seen)
        counter = counters.get(target.id)
        if counter is None:
            counter = counters[target.id] = _Counters.of(target)
        counter.add(update.iterations_done, update.checkpoint_iterations, service)
        measurement = self._measurement(target.id, target.job_type, target.num_gpus, task, update)
        if measurement is not None:
            measured.append(measurement)

    def _apply_with_row(
        self,
        uow: UnitOfWork,
        report: _ProgressReport,
        update: ProgressUpdate,
        task: Task,
        tasks: dict[tuple[int, int, int], Task],
        measured: list[Measured],
        outcome: _ProgressApplied,
        seen: dict[tuple[int, int, int], float],
    ) -> None:
        """A report that starts its task running or finishes its job, through the job's
        row."""
        now = report.now
        job = uow.jobs.get(task.job_id)
        if is_terminal(job.state):
            # Finished or cancelled: whatever still runs must stop.
            outcome.stale.append(True)
            return
        outcome.stale.append(False)
        if task.state in (TaskState.ASSIGNED, TaskState.STARTING):
            task = uow.tasks.set_state(task.id, TaskState.RUNNING, now=now)
            tasks[(update.job_id, update.task_index, update.lease)] = task
            if task.task_index == 0:
                # Placement to first progress: what starting there cost the job
                # (for a move, the old placement's checkpoint too: it starts after).
                started = (now - task.created_at).total_seconds()
                uow.jobs.record_restart(task.job_id, max(0.0, started), flush=False)
        service = self._service(task, update, report.wall, seen)
        # Written at the group's commit, in one flush for all its reports.
        job = uow.jobs.record_progress(
            job.id,
            iterations_done=update.iterations_done,
            checkpoint_iterations=update.checkpoint_iterations,
            service_delta=service,
            reported=True,
            flush=False,
        )
        measurement = self._measurement(job.id, job.spec.job_type, job.spec.num_gpus, task, update)
        if measurement is not None:
            measured.append(measurement)
        if job.iterations_done >= job.spec.iterations and job.state is JobState.RUNNING:
            uow.jobs.transition(
                job.id,
                JobState.COMPLETED,
                kind="completed",
                reason=f"ran all {job.spec.iterations} iterations",
                at=now,
            )
            log.info("job completed", job_id=job.id)
            outcome.orders.extend(
                release_finished_job(uow, job.id, "job completed", finishing=task.id, now=now)
            )
            outcome.finished = True

    def _service(
        self,
        task: Task,
        update: ProgressUpdate,
        wall: float,
        seen: dict[tuple[int, int, int], float],
    ) -> float:
        """Normalized GPU-seconds since this task's previous report (one earlier in this
        transaction's `seen`, or the last one committed): seconds x GPUs x the GPU type's
        speed relative to the slowest type the model knows."""
        key = (task.job_id, task.task_index, task.lease)
        previous = seen.get(key)
        if previous is None:
            with self._report_lock:
                previous = self._last_report.get(key)
        seen[key] = wall
        if previous is None:
            # First report of this lease (or after a master restart): count from the
            # task's acknowledgement, but never more than one heartbeat timeout.
            since = (task.acknowledged_at or task.created_at).timestamp()
            elapsed = min(max(0.0, wall - since), self._settings.heartbeat_timeout_s)
        else:
            elapsed = max(0.0, wall - previous)
        return elapsed * len(task.gpu_indices) * self._speed_factor(task.gpu_type)

    def _run_service(self, task: Task, now: datetime) -> float:
        """Normalized GPU-seconds of a task's whole run, from its start to `now`."""
        since = task.acknowledged_at or task.created_at
        elapsed = max(0.0, (now - since).total_seconds())
        return elapsed * len(task.gpu_indices) * self._speed_factor(task.gpu_type)

    def _speed_factor(self, gpu_type: str) -> float:
        speeds = self._base_model.speeds
        slowest = min(speeds.values()) if speeds else 1.0
        return self._base_model.speed(gpu_type) / slowest

    @staticmethod
    def _measurement(
        job_id: int, job_type: str, num_gpus: int, task: Task, update: ProgressUpdate
    ) -> Measured | None:
        """What the report says of the job type's rate, when it says something clean."""
        # The reported rate is the whole job's (all its processes step together); it is a
        # clean figure for (job type, GPU type, GPUs) only when one task runs the job.
        if update.iterations_per_s == 0 or task.num_copies > 1:
            return None
        if not plausible_rate(update.iterations_per_s):
            log.warning(
                "ignored a throughput out of range", job_id=job_id, value=update.iterations_per_s
            )
            return None
        if len(task.gpu_indices) != num_gpus:
            return None
        return Measured(
            job_type, update.gpu_type or task.gpu_type, num_gpus, update.iterations_per_s
        )

    def _late_completion(
        self, uow: UnitOfWork, task: Task, report: TaskExit, now: datetime
    ) -> bool:
        """A completion reported for a task the master had written off (its worker
        re-registered without it while the exit report was still on its way, e.g. across a
        master restart). If the job was not placed again since, the job is done."""
        if report.kind is not ExitKind.COMPLETED or task.state is not TaskState.LOST:
            return False
        job = uow.jobs.get(task.job_id)
        if is_terminal(job.state) or uow.tasks.latest_lease(job.id) != task.lease:
            return False
        uow.tasks.set_state(
            task.id, TaskState.EXITED, now=now, exit_kind=report.kind, exit_code=report.exit_code
        )
        uow.jobs.record_progress(
            job.id,
            iterations_done=report.iterations_done,
            checkpoint_iterations=report.iterations_done,
        )
        uow.jobs.transition(
            job.id,
            JobState.COMPLETED,
            kind="completed",
            reason=f"completed on {report.node} (reported after its worker re-registered)",
            at=now,
            exit_code=report.exit_code,
        )
        log.info("job completed (late report)", job_id=job.id, node=report.node)
        return True

    def task_exited(self, report: TaskExit) -> bool:
        """Record a task's exit; False when its lease is stale (the report is ignored)."""
        now = datetime.now(UTC)

        def change(uow: UnitOfWork) -> tuple[bool, list[StopOrder]]:
            task = uow.tasks.find(report.job_id, report.task_index, report.lease)
            if task is None or task.node != report.node:
                return False, []
            if not task.active:
                if self._late_completion(uow, task, report, now):
                    return True, []
                if task.state is TaskState.LOST:
                    # Written off early, it held its GPUs until this exit.
                    uow.usage.extend(task.id, now)
                    if not is_terminal(uow.jobs.get(task.job_id).state):
                        # Written off when its node was lost, it ran on until its lease
                        # ended and checkpointed then: that checkpoint is where the job
                        # resumes, so it is the count to show (counts never go down).
                        uow.jobs.record_progress(
                            task.job_id,
                            iterations_done=report.iterations_done,
                            checkpoint_iterations=report.iterations_done,
                        )
                if (
                    task.state is TaskState.LOST
                    and report.message
                    and report.kind is not ExitKind.FAILED
                ):
                    # Ignored, but why it ended (its lease ran out) belongs in the history.
                    first = _first_line(report.message)
                    uow.jobs.note(
                        task.job_id,
                        kind="late_exit",
                        reason=f"task on {report.node} in lease {task.lease}, written off "
                        f"earlier, ended ({report.kind.value.lower()}): {first}",
                        at=now,
                        set_reason=False,
                    )
                return False, []
            was_stopping = task.state is TaskState.STOPPING
            before = uow.jobs.get(report.job_id)
            uow.tasks.set_state(
                task.id,
                TaskState.EXITED,
                now=now,
                exit_kind=report.kind,
                exit_code=report.exit_code,
            )
            job = uow.jobs.record_progress(
                report.job_id,
                iterations_done=report.iterations_done,
                checkpoint_iterations=report.iterations_done,
                # A program that never reports progress (an opaque command, a plain script)
                # gets its service counted once, for the whole run, when it ends.
                service_delta=0.0 if before.reports_progress else self._run_service(task, now),
            )
            with self._report_lock:
                self._last_report.pop((task.job_id, task.task_index, task.lease), None)
            if is_terminal(job.state):
                if (
                    job.state is JobState.COMPLETED
                    and report.kind is ExitKind.COMPLETED
                    and report.exit_code is not None
                ):
                    # Completed by its last progress report; this is how its process ended.
                    uow.jobs.set_exit_code(job.id, report.exit_code)
                return True, release_finished_job(uow, job.id, f"job {job.state.value}", now=now)
            orders: list[StopOrder] = []
            if report.kind is ExitKind.COMPLETED:
                if job.state in (JobState.RUNNING, JobState.PREEMPTED):
                    uow.jobs.transition(
                        job.id,
                        JobState.COMPLETED,
                        kind="completed",
                        reason=completion_reason(job, report.exit_code),
                        at=now,
                        exit_code=report.exit_code,
                    )
                    log.info("job completed", job_id=job.id, node=report.node)
                    orders = release_finished_job(uow, job.id, "job completed", now=now)
                return True, orders
            if report.kind is ExitKind.FAILED and not was_stopping:
                what = (
                    f"exit code {report.exit_code}"
                    if report.exit_code is not None
                    else f"killed by signal {report.signal}"
                )
                # What the process printed is the job's output, private to its owner: it is
                # kept beside the reason, which every user of the cluster may read.
                lines = report.message.strip().splitlines() if report.message else []
                uow.jobs.set_failure_output(job.id, lines[-1][:FAILURE_OUTPUT_MAX] if lines else "")
                contract = report.contract_error
                _, orders = fail_attempt(
                    uow,
                    job,
                    reason=f"{what} on {report.node}"
                    + (": the job's runtime refused its setup (ContractError)" if contract else ""),
                    exit_code=report.exit_code,
                    max_retries=self._settings.max_retries,
                    retryable=not contract,
                    not_retried=(
                        "not retried: every attempt would fail the same way; `hctl show "
                        f"{job.id}` has the runtime's error and its fix"
                        if contract
                        else ""
                    ),
                    now=now,
                )
                return True, orders
            if not was_stopping and job.state is JobState.RUNNING:
                # Stopped without being asked (lease ran out, the worker's own decision):
                # the job resumes from its checkpoint wherever the next round puts it.
                # Why, in the worker's words (an expired lease: when, and why it was not
                # renewed).
                why = _first_line(report.message).removeprefix("stopped: ")
                _, orders = lose_job_placement(
                    uow,
                    job,
                    f"task on {report.node} ended"
                    f" ({report.kind.value.lower()}) in lease {task.lease}"
                    + (f": {why}" if why else ""),
                    kind="exited",
                    now=now,
                )
            return True, orders

        accepted, orders = self._tx.write(change)
        if accepted:
            log.info(
                "task exited",
                job_id=report.job_id,
                node=report.node,
                kind=report.kind.value,
                exit_code=report.exit_code,
            )
            self._dispatcher.send_stops(orders)
            self._dispatcher.dispatch_ready_soon(after_exit=True)
            self._on_change()
            self._on_capacity(True)
        else:
            log.info("ignored an exit from a stale lease", job_id=report.job_id, lease=report.lease)
        return accepted


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""
