"""One scheduling round: read the store, decide, persist, push.

1. Read the store into the scheduling views (master/rounds/snapshot.py): the jobs, what they
   hold, the leases that may still run on lost nodes, the jobs completed since the last
   round. For a long queue, this step and the next run in a child process
   (master/rounds/planner.py).
2. Decide with :func:`master.scheduling.round.decide_round`, the pure function the
   simulator runs too: the policy learns from the completions and plans; jobs it fails
   on are left out of its plan (logged once each, when first left out) and the others
   planned; a plan that breaks the cluster's rules is not applied; jobs that may not be
   preempted keep their GPUs; the diff against what runs applies hysteresis.
3. Store the round, its actions, the new tasks (each placement with a fresh fencing token),
   the jobs' transitions and what the policy learned in ONE transaction. Why each waiting
   job waits is kept in memory, not stored (master/rounds/reasons.py).
4. Hand what to send to each worker's lane (stops and extensions now, starts as soon as
   their GPUs are free) and record the round's duration. The round does not wait for the
   workers: a worker that is slow or silent delays no other worker's renewals, and no
   later round. The round's dispatch failures are recorded once every push is over.

Rounds never overlap: one lock serializes them, whoever triggers them.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from master.jobs.lifecycle import StopOrder
from master.nodes.dispatch import Dispatcher, Outgoing, Push
from master.process.metrics import MasterMetrics
from master.process.transactions import Transactor
from master.rounds.forecaster import Forecaster
from master.rounds.planner import Planner
from master.rounds.reasons import WaitingReasons
from master.rounds.renewals import RenewalBook
from master.rounds.snapshot import ReadMemo, RoundInput
from master.scheduling.diff import Action, ActionKind, preemption_reason
from master.scheduling.plan import Allocation
from master.scheduling.policy import Policy
from master.scheduling.round import RoundDecision, TaskPlacement
from master.scheduling.throughput import ThroughputModel
from master.settings import Settings
from store import UnitOfWork
from store.domain import Job, NewTask, Task
from store.states import JobState, NodeState, TaskState, is_terminal

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class RoundResult:
    number: int
    actions: int
    dispatch_failures: int
    duration_s: float
    started: tuple[int, ...] = ()
    stopped: tuple[int, ...] = ()
    # Unfinished jobs the plan gave nothing.
    waiting: int = 0
    # Jobs whose part of the round failed; they wait for the next round as they were.
    set_aside: tuple[int, ...] = ()
    # Done once every push of the round is over and its dispatch failures are stored.
    settled: Future[None] | None = None
    # Seconds each phase took: reading the store, deciding, storing, handing out pushes.
    read_s: float = 0.0
    plan_s: float = 0.0
    persist_s: float = 0.0
    push_s: float = 0.0
    # Read and decided in the planning process (master/rounds/planner.py).
    planned_elsewhere: bool = False


@dataclass(frozen=True, slots=True)
class Persisted:
    """What storing a round produced: its number, what to send, and how many changes."""

    number: int
    outgoing: list[Outgoing]
    orders: list[StopOrder]
    changed: int
    set_aside: tuple[int, ...] = ()
    # Tasks whose leases the round extended, to build their assignments from once the
    # transaction is over (not while it holds the database's write).
    extensions: tuple[tuple[Job, Task], ...] = ()


#: What a round's store reads of the jobs it only extends, and the running tasks by job.
Kept = tuple[dict[int, Job], dict[int, list[Task]]]


def _read_kept(uow: UnitOfWork, decision: RoundDecision, memo: ReadMemo) -> Kept:
    """The jobs the round only extends (those unchanged since its read from the memo) and
    the running tasks by job."""
    extended = uow.jobs.get_many(
        [a.job_id for a in decision.actions if a.kind is ActionKind.EXTEND], memo=memo.jobs
    )
    active: defaultdict[int, list[Task]] = defaultdict(list)
    for task in uow.tasks.active():
        active[task.job_id].append(task)
    return extended, active


class RoundRunner:
    def __init__(
        self,
        tx: Transactor,
        policy: Policy,
        dispatcher: Dispatcher,
        settings: Settings,
        metrics: MasterMetrics,
        base_model: ThroughputModel,
        on_change: Callable[[], None],
        memo: ReadMemo | None = None,
        forecaster: Forecaster | None = None,
    ) -> None:
        self._tx = tx
        # Expected start times, computed from a round's input off the round thread.
        self.forecaster = forecaster
        # What the last round read: each round loads and converts only what changed since.
        self.memo = memo if memo is not None else ReadMemo()
        # Where each round reads and decides: here, or for a long queue in a child process.
        self.planner = Planner(tx, self.memo, settings, base_model)
        self._policy = policy
        self._dispatcher = dispatcher
        self._settings = settings
        self._metrics = metrics
        self._base_model = base_model
        self._on_change = on_change
        self._lock = threading.Lock()
        self.last_result: RoundResult | None = None
        # Round number -> workers its pushes did not reach, once they are over.
        self._failures: dict[int, int] = {}
        self._failures_lock = threading.Lock()
        # Jobs the policy failed on in the last round that planned, already logged.
        self._isolated: set[int] = set()
        # The lease ends workers acknowledged: a round renews only the leases that need it.
        self.renewals = RenewalBook(settings.lease_s, settings.lease_renewal_age_s)
        # Why each waiting job waits, as the last stored round decided (rounds/reasons.py).
        self.reasons = WaitingReasons()

    @property
    def policy_name(self) -> str:
        return self._policy.name

    @property
    def policy(self) -> Policy:
        """The policy the rounds run (and whose memory they keep), as the last round left
        it (back from the planning process if it was there; see master/rounds/planner.py)."""
        with self._lock:
            self._policy = self.planner.reclaim(self._policy)
            return self._policy

    def run(self, now: datetime | None = None, *, settle: bool = True) -> RoundResult:
        """Run one round now (waits for a round in progress to finish first). `now`, the
        round's time (for tests), is the clock's by default.

        With `settle`, the call then waits (outside the round, which is over) until every
        push of the round was answered or given up, and the result counts the workers
        that could not be reached; scheduled rounds do not wait, and they spread their lease
        extensions over part of the round (Settings.extension_spread_s)."""
        spread_s = 0.0 if settle else self._settings.extension_spread_s
        with self._lock:
            result = self._run(now or datetime.now(UTC), spread_s)
        if not settle or result.settled is None:
            return result
        # Every lane finishes a push within the push budget; one busy with an earlier push
        # first finishes that one.
        try:
            result.settled.result(timeout=2 * self._settings.push_budget_s + 10.0)
        except TimeoutError:
            # Recording the answers is that slow: the round's row gets them when it ends.
            log.warning("the round's pushes are still under way", round=result.number)
            return result
        with self._failures_lock:
            failures = self._failures.get(result.number, 0)
        return dataclasses.replace(result, dispatch_failures=failures)

    def _run(self, now: datetime, spread_s: float) -> RoundResult:
        started = time.monotonic()
        # For lining the round's phases up with other records of the time (its log line
        # is written after the round's own row, which may wait for the store).
        started_at = time.time()
        # A forecast due after this round takes its whole input, wherever it is read, or
        # from the planning process a long queue's forecast made ready there.
        forecast = self.forecaster is not None and self.forecaster.due()
        planned = self.planner.plan(
            self._policy,
            now,
            whole=forecast,
            forecast_from=self.forecaster.process_from_jobs if self.forecaster else None,
        )
        if planned.policy is not None:
            self._policy = planned.policy
        inp, decision = planned.inp, planned.decision
        read_s, plan_s = planned.read_s, planned.plan_s
        self._report(decision)
        actions = decision.actions
        stored = self._store(inp, decision, now)
        # Its new tasks may wait for older ones: an exit from now on looks for them.
        self._dispatcher.may_be_waiting()
        self.reasons.replace(planned.reasons)
        number, changed = stored.number, stored.changed
        outgoing = stored.outgoing + [
            Outgoing(task.node, task.id, self._dispatcher.extend(job, task, number, now))
            for job, task in stored.extensions
        ]
        persist_s = time.monotonic() - started - read_s - plan_s
        self._on_change()
        self._dispatcher.send_stops(stored.orders)
        pushes = self._dispatcher.send(number, outgoing, spread_s=spread_s)
        self._book_renewals(pushes, stored.extensions, now)
        pushes |= self._dispatcher.dispatch_ready(number)
        duration = time.monotonic() - started
        self._tx.write(
            lambda uow: uow.rounds.finish(number, duration_s=duration, dispatch_failures=0),
            jobs=False,
        )
        settled = pushes.then(lambda unreachable: self._settled(number, unreachable))
        push_s = duration - read_s - plan_s - persist_s
        self._metrics.round_duration.observe(duration)
        for phase, seconds in (
            ("read", read_s),
            ("plan", plan_s),
            ("persist", persist_s),
            ("push", push_s),
        ):
            self._metrics.round_phase.labels(phase=phase).observe(seconds)
        self._metrics.round_actions.inc(changed)
        if duration > self._settings.round_seconds:
            log.warning("round overran its period", round=number, duration_s=round(duration, 3))
        result = RoundResult(
            number=number,
            actions=changed,
            dispatch_failures=0,
            duration_s=duration,
            started=tuple(
                a.job_id
                for a in actions
                if a.kind is ActionKind.START and a.job_id not in stored.set_aside
            ),
            stopped=tuple(
                a.job_id
                for a in actions
                if a.kind is ActionKind.STOP and a.job_id not in stored.set_aside
            ),
            waiting=planned.waiting,
            set_aside=stored.set_aside,
            settled=settled,
            read_s=read_s,
            plan_s=plan_s,
            persist_s=persist_s,
            push_s=push_s,
            planned_elsewhere=planned.elsewhere,
        )
        self.last_result = result
        if forecast and self.forecaster is not None and self.forecaster.due():
            if planned.forecast is not None:
                self.forecaster.submit_prepared(planned.forecast, now)
            else:
                # The forecaster copies the policy itself, off this thread, between rounds.
                self.forecaster.submit(inp, self.policy_copy, now)
        log.info(
            "round finished",
            round=number,
            policy=self._policy.name,
            actions=changed,
            jobs=planned.jobs,
            planned_in_child=planned.elsewhere,
            pushing_to=len(pushes.nodes),
            isolated=len(decision.isolated),
            started_at=round(started_at, 4),
            duration_s=round(duration, 4),
            read_s=round(read_s, 4),
            plan_s=round(plan_s, 4),
            persist_s=round(persist_s, 4),
            push_s=round(result.push_s, 4),
        )
        return result

    def policy_copy(self) -> Policy:
        """A copy of the policy as the last round left it, taken between rounds (waits for
        a round in progress to end)."""
        with self._lock:
            self._policy = self.planner.reclaim(self._policy)
            return copy.deepcopy(self._policy)

    def _settled(self, number: int, unreachable: set[str]) -> None:
        """Every push of round `number` is over: store how many workers it did not reach
        (they get their assignments again later)."""
        with self._failures_lock:
            self._failures[number] = len(unreachable)
            # Only the latest are asked for (by run(settle=True), right after the round).
            for old in [n for n in self._failures if n < number - 16]:
                del self._failures[old]
        if not unreachable:
            return
        log.warning(
            "round's pushes left workers unreached", round=number, nodes=sorted(unreachable)
        )
        self._tx.write(
            lambda uow: uow.rounds.set_dispatch_failures(number, len(unreachable)), jobs=False
        )

    def _report(self, decision: RoundDecision) -> None:
        name = self._policy.name
        if decision.problems:
            log.error(
                "policy produced an invalid plan; keeping the current placements",
                policy=name,
                problems=list(decision.problems[:10]),
            )
        elif decision.plan_error is not None:
            log.error(
                "policy failed; keeping the current placements",
                policy=name,
                reason=decision.fallback,
                exc_info=decision.plan_error,
            )
        if not decision.fallback:
            self._report_isolated(decision)
        for error in decision.learn_errors:
            log.error("policy failed to learn from a completed job", policy=name, exc_info=error)
        if decision.learned:
            log.info("policy learned from completed jobs", policy=name, jobs=decision.learned)

    def _report_isolated(self, decision: RoundDecision) -> None:
        """Log each job the policy fails on when it is first left out, not every round it
        stays out (its waiting reason says so meanwhile)."""
        for job_id, error in sorted(decision.isolated.items()):
            if job_id in self._isolated:
                continue
            self._metrics.isolated_job_failures.labels(stage="policy").inc()
            log.error(
                "policy fails on a job; it is left out of the plan, the others are planned",
                policy=self._policy.name,
                job_id=job_id,
                keeps_placement=job_id in decision.placements,
                probes=decision.probes,
                exc_info=error,
            )
        for job_id in sorted(self._isolated - decision.isolated.keys()):
            log.info("a job the policy failed on is no longer left out", job_id=job_id)
        self._isolated = set(decision.isolated)

    def _store(self, inp: RoundInput, decision: RoundDecision, now: datetime) -> Persisted:
        """Store the round in one transaction. Should one job's part raise, the round is
        stored again with each job's part in a savepoint: that job is set aside until the
        next round and the others go ahead."""
        try:
            # The running tasks and the jobs only extended are read before the write: on
            # SQLite every writer of the process (each submission) waits while a write is
            # open, and these reads were half of the round's. The job lock, held across
            # both, keeps them true: every other change to jobs and tasks in this process
            # takes it (submissions only add jobs), and no other process changes them.
            with self._tx.job_lock:
                kept = self._tx.read(lambda uow: _read_kept(uow, decision, self.memo))
                return self._tx.write(
                    lambda uow: self._persist(uow, inp, decision, now, isolate=False, kept=kept)
                )
        except Exception as exc:
            # The job by job pass logs the failing job's traceback.
            log.warning("storing the round failed; storing it again job by job", error=str(exc))
        return self._tx.write(lambda uow: self._persist(uow, inp, decision, now, isolate=True))

    def _to_renew(
        self, kept: list[tuple[Job, Task]], outgoing: Sequence[Outgoing], now: datetime
    ) -> list[tuple[Job, Task]]:
        """Of the running tasks the round keeps, those whose leases it renews: the ones due
        (see master/rounds/renewals.py) and all on workers that get a push anyway."""
        self.renewals.keep_only(task.id for _, task in kept)
        pushed = {item.node for item in outgoing}
        now_s = now.timestamp()
        return [
            (job, task)
            for job, task in kept
            if task.node in pushed or self.renewals.due(task.id, now_s)
        ]

    def _book_renewals(
        self, pushes: Push, extensions: Sequence[tuple[Job, Task]], now: datetime
    ) -> None:
        """Once each worker answers, the lease end its renewals carried is what it holds."""
        lease_end = now.timestamp() + self._settings.lease_s
        by_node: defaultdict[str, list[int]] = defaultdict(list)
        for _, task in extensions:
            by_node[task.node].append(task.id)
        book = self.renewals

        def answered(node: str, reached: bool) -> None:
            if reached and node in by_node:
                book.acknowledged(by_node[node], lease_end)

        pushes.each(answered)

    def _persist(
        self,
        uow: UnitOfWork,
        inp: RoundInput,
        decision: RoundDecision,
        now: datetime,
        *,
        isolate: bool,
        kept: Kept | None = None,
    ) -> Persisted:
        actions, plan = decision.actions, decision.plan
        changes = decision.changes()
        # Read everything first: on SQLite the first write takes the database's write lock,
        # which heartbeats and submissions then wait for until this transaction commits.
        # Jobs only extended are not written: those unchanged since the round's read come
        # from its memo. Those whose state changes are loaded, so that their writes are
        # checked against the version read here.
        jobs_now = uow.jobs.get_many([a.job_id for a in actions if a.kind is not ActionKind.EXTEND])
        extended_jobs, active = kept if kept is not None else _read_kept(uow, decision, self.memo)
        jobs_now.update(extended_jobs)
        record = uow.rounds.add(
            policy=self._policy.name,
            started_at=now,
            plan={
                "allocations": {str(j): str(a) for j, a in plan.allocations.items()},
                "actions": [
                    {"job": a.job_id, "kind": a.kind.value, "to": str(a.allocation or "")}
                    for a in changes
                ],
            },
            actions=len(changes),
        )
        number = record.number
        # What the policy learned is kept with the round that told it, and each completion
        # is told once (see store.repositories.memory).
        uow.memory.forget_completions([done.job.id for done in inp.completed])
        if decision.memory is not None:
            uow.memory.save(self._policy.name, decision.memory, now=now)
        outgoing: list[Outgoing] = []
        orders: list[StopOrder] = []
        set_aside: list[int] = []
        placements = sum(1 for a in changes if a.kind is not ActionKind.STOP)
        next_lease = uow.next_lease(placements) if placements else 0
        new_tasks: list[NewTask] = []
        # Every running task is extended each round: one statement for them all, and their
        # assignments built once the transaction is over (see Persisted.extensions).
        extended: list[tuple[Job, Task]] = []
        for action in actions:
            lease = next_lease
            if action.kind not in (ActionKind.EXTEND, ActionKind.STOP):
                next_lease += 1
            if not isolate:
                sends, placed = self._apply(
                    uow, decision, action, jobs_now, inp, active, number, lease, now, extended
                )
                outgoing.extend(sends)
                new_tasks.extend(placed)
                continue
            try:
                with uow.savepoint():
                    sends, placed = self._apply(
                        uow, decision, action, jobs_now, inp, active, number, lease, now
                    )
                    uow.tasks.add_many(placed)
            except Exception:
                self._metrics.isolated_job_failures.labels(stage="round").inc()
                log.exception(
                    "a job's part of the round failed; it is set aside until the next round",
                    round=number,
                    job_id=action.job_id,
                    action=action.kind.value,
                )
                set_aside.append(action.job_id)
                continue
            outgoing.extend(sends)
        uow.tasks.add_many(new_tasks)
        extended = self._to_renew(extended, outgoing, now)
        uow.tasks.extend_many([task.id for _, task in extended], round=number)
        if any(n.state is NodeState.DRAINING for n in inp.nodes.values()):
            self._finish_drains(uow, inp)
        return Persisted(number, outgoing, orders, len(changes), tuple(set_aside), tuple(extended))

    def _apply(
        self,
        uow: UnitOfWork,
        decision: RoundDecision,
        action: Action,
        jobs_now: dict[int, Job],
        inp: RoundInput,
        active: dict[int, list[Task]],
        number: int,
        lease: int,
        now: datetime,
        extended: list[tuple[Job, Task]] | None = None,
    ) -> tuple[list[Outgoing], list[NewTask]]:
        """One job's part of the round: its state change, stopped tasks and new placement
        (under fencing token `lease`); returns what to send and the tasks to add. Tasks it
        extends go into `extended` with their job, to be written with the others in one
        statement and their assignments built after the transaction, or without it are
        written and sent like the rest."""
        outgoing: list[Outgoing] = []
        # The job may have changed since the snapshot (finished, cancelled, failed):
        # decisions about it are dropped, the next round sees the new state.
        job = jobs_now.get(action.job_id)
        if job is None or is_terminal(job.state):
            return outgoing, []
        snap_job = inp.jobs.get(action.job_id)
        if snap_job is not None and job.state is not snap_job.state:
            return outgoing, []
        tasks = active.get(job.id, [])
        reason = action.reason
        if action.kind is ActionKind.EXTEND:
            kept = [t for t in tasks if t.state in (TaskState.STARTING, TaskState.RUNNING)]
            if extended is not None:
                extended.extend((job, task) for task in kept)
                return outgoing, []
            uow.tasks.extend_many([t.id for t in kept], round=number)
            for task in kept:
                outgoing.append(
                    Outgoing(task.node, task.id, self._dispatcher.extend(job, task, number, now))
                )
            return outgoing, []
        if action.kind is ActionKind.STOP:
            why = preemption_reason(action, number)
            draining = sorted(
                {
                    t.node
                    for t in tasks
                    if t.node in inp.nodes
                    and inp.nodes[t.node].state in (NodeState.DRAINING, NodeState.DRAINED)
                }
            )
            if draining and not action.displaced_by and not action.reason:
                # Nothing else wanted its GPUs: the drain is why, in its output and history.
                why += f" (node {', '.join(draining)} is draining)"
            outgoing.extend(self._stop_tasks(uow, tasks, number, why))
            uow.jobs.transition(
                job.id,
                JobState.PREEMPTED,
                kind="preempted",
                reason=why,
                round=number,
                count_preemption=True,
                at=now,
                flush=False,
            )
            return outgoing, []
        if snap_job is not None and (
            (job.held_by and not snap_job.held_by) or job.spec != snap_job.spec
        ):
            # Held or changed (hctl hold, hctl update) since the snapshot: placing it as
            # planned would ignore that; the next round plans it as it is now.
            return outgoing, []
        assert action.allocation is not None
        where = ", ".join(
            f"{node}:{len(action.allocation.slots_on(node))}" for node in action.allocation.nodes
        )
        moved = f"{action.kind.value}d to {where} in round {number}" + (
            f": {reason}" if reason else ""
        )
        if action.kind in (ActionKind.MIGRATE, ActionKind.RESIZE):
            outgoing.extend(self._stop_tasks(uow, tasks, number, moved))
        new_tasks = self._place(job.id, action.allocation, decision.tasks[job.id], number, lease)
        if action.kind is ActionKind.START and job.state is JobState.RUNNING:
            # Running but holding nothing (its last placement is being torn down): a
            # new placement, no state change.
            uow.jobs.note(
                job.id,
                kind="scheduled",
                reason=f"placed on {where} in round {number}",
                round=number,
                at=now,
                flush=False,
            )
        elif action.kind is ActionKind.START:
            uow.jobs.transition(
                job.id,
                JobState.RUNNING,
                kind="scheduled",
                reason=f"placed on {where} in round {number}",
                round=number,
                at=now,
                flush=False,
            )
        else:
            uow.jobs.note(
                job.id,
                kind="migrated" if action.kind is ActionKind.MIGRATE else "resized",
                reason=moved,
                round=number,
                at=now,
                count_migration=action.kind is ActionKind.MIGRATE,
                flush=False,
            )
        return outgoing, new_tasks

    def _stop_tasks(
        self, uow: UnitOfWork, tasks: list[Task], number: int, reason: str
    ) -> list[Outgoing]:
        """STOPs for the tasks of a job the round moves or preempts: it runs again from its
        checkpoint, and `reason` tells its output why it stopped."""
        out: list[Outgoing] = []
        for task in tasks:
            if task.state is TaskState.ASSIGNED:
                # Never acknowledged: nothing to stop on the worker, only a decision to undo;
                # a STOP still goes out in case the start did arrive.
                uow.tasks.set_state(task.id, TaskState.LOST)
            elif task.state is not TaskState.STOPPING:
                uow.tasks.set_state(task.id, TaskState.STOPPING)
            out.append(
                Outgoing(
                    task.node, task.id, self._dispatcher.stop(task, number, reason, resumes=True)
                )
            )
        return out

    @staticmethod
    def _place(
        job_id: int,
        alloc: Allocation,
        tasks: tuple[TaskPlacement, ...],
        number: int,
        lease: int,
    ) -> list[NewTask]:
        """The tasks of one placement, all under one fresh fencing token."""
        return [
            NewTask(
                job_id=job_id,
                task_index=index,
                node=task.node,
                lease=lease,
                gpu_indices=task.gpu_indices,
                gpu_type=task.gpu_type,
                rank_offset=task.rank_offset,
                local_batch_sizes=task.batch_shares,
                accumulation_steps=alloc.accumulation_steps,
                num_copies=alloc.num_copies,
                copy_index=task.copy_index,
                shared_with_job_id=alloc.shared_with or 0,
                round=number,
            )
            for index, task in enumerate(tasks)
        ]

    @staticmethod
    def _finish_drains(uow: UnitOfWork, inp: RoundInput) -> None:
        busy: defaultdict[str, int] = defaultdict(int)
        for task in uow.tasks.active():
            busy[task.node] += 1
        for node in inp.nodes.values():
            if node.state is NodeState.DRAINING and not busy[node.name]:
                uow.nodes.set_state(node.name, NodeState.DRAINED, node.reason)
