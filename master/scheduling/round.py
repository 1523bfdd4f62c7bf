"""One scheduling round as a pure decision, the same for the daemon and the simulator.

:func:`decide_round` takes what the round knows (:class:`RoundState`: the snapshot of every
unfinished job, the leases that may still run on lost nodes, the jobs completed since the
last round) and returns what to do (:class:`RoundDecision`): per job, start, stop, migrate,
resize or extend, the tasks each new placement splits into, why each job that got nothing
waits, and the policy memory to keep when the policy learned something. It reads no clock,
store or network; the daemon's round (``master/rounds/runner.py``) reads the store, calls it and
carries out its decisions, and the simulator applies them to its simulated cluster.

The steps, in order:

1. Completion notices: the policy learns from each job completed since the last round
   (:func:`master.scheduling.policy.notify_completion`), before it plans.
2. Lost-lease holds: a job whose lease may still run on a lost node is hidden from the
   policy until that lease is over, so it never runs twice. Opaque commands are exempt:
   their workers run them to completion whatever the lease, so waiting would not help.
3. The policy's plan, with pinning: a running job that may not be preempted keeps exactly
   its GPUs; a job the plan put on them waits, saying so. Then packing: a job the plan
   starts or moves across servers goes onto as few servers as the free GPUs allow (one
   where one has room for it; :func:`master.scheduling.placement.pack_spread`), whatever
   the policy.
   Fair share and quotas (:mod:`master.scheduling.fairshare`, when ``RoundState.fair_share``
   is set): before the policy plans, priorities are scaled by each user's fair-share
   factor and waiting jobs past their user's quota, or past their user's entitlement while
   another user is under theirs, are hidden from it; its plan then starts no more of one
   user's jobs than those limits allow.
4. Should the policy raise, the round looks for the jobs it fails on
   (:func:`plan_around`): it tries copies of the policy on halves of the jobs, then on
   halves of each half that fails, down to single jobs, and plans the others with the
   policy itself. Each job so isolated keeps what it holds if it runs (it is not preempted
   for the policy's failure; the policy plans nothing onto its GPUs) and otherwise waits
   with :func:`isolated_reason`. Only when that fails too (the policy fails without any
   job, only on a combination of jobs, on the others as well, or past
   :data:`ISOLATION_MAX_CALLS` tries), or when its plan (pinning applied) breaks the
   cluster's rules (:meth:`Plan.violations`), does every job keep what it holds.
5. The diff against what runs, with hysteresis (:class:`Hysteresis`): a move that gains
   less than ``min_migration_gain`` is not carried out, unless holding it back would
   break the cluster's rules (a job the plan moved in to share its new GPUs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set
from copy import deepcopy
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from master.scheduling.diff import Action, ActionKind, Hysteresis, diff, held_back
from master.scheduling.fairshare import FairShareConfig, limit_plan, prepare
from master.scheduling.placement import pack_spread
from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.policy import Policy, export_memory, learns, notify_completion
from master.scheduling.views import ClusterView, JobView, NodeView, Snapshot

#: Why a job waits when the policy gave no reason.
NOT_CHOSEN = "waiting: not chosen by the policy this round"
#: Most tries of a policy's copies one round spends finding the jobs the policy fails on:
#: about 2 log2(n) find one job among n (14 among a thousand), so this finds a few even
#: in a large queue while a policy that fails on nearly every job costs a bounded delay.
ISOLATION_MAX_CALLS = 64
#: Longest error text a waiting reason quotes.
REASON_ERROR_MAX = 300


@dataclass(frozen=True, slots=True)
class LostLease:
    """A lease that may still run on a lost node: its worker stops the task by ``ends_at``
    (seconds on the caller's clock, Unix time in the daemon).

    ``stops_at_end``: the worker stops the task when the lease ends unrenewed; false for an
    opaque command, which its worker runs to completion whatever the lease.
    """

    job_id: int
    node: str
    lease: int
    ends_at: float
    stops_at_end: bool = True

    def reason(self) -> str:
        ends = datetime.fromtimestamp(self.ends_at, UTC)
        return f"waiting: lease {self.lease} on {self.node} (lost) ends at {ends:%H:%M:%S} UTC"


@dataclass(frozen=True, slots=True)
class CompletedJob:
    """A job that completed since the last round: as the policy last saw it, the iterations
    it actually ran, and when it completed (seconds on the caller's clock)."""

    job: JobView
    iterations: float
    at: float


@dataclass(frozen=True)
class RoundState:
    """Everything a round decides from.

    ``snapshot`` lists every unfinished job, each with the allocation it holds now
    (``JobView.current``) and whether it may be preempted (``JobView.preemptible``); jobs
    under a lost-lease hold are in it too (the round hides them from the policy).
    ``now`` is the round's start in seconds on the caller's clock.
    """

    snapshot: Snapshot
    now: float
    lost: Mapping[int, LostLease] = field(default_factory=dict)
    completed: tuple[CompletedJob, ...] = ()
    #: The admin's shares and quotas (None: neither applies); ``usage``: each user's
    #: decayed GPU-seconds (see :mod:`master.scheduling.fairshare`).
    fair_share: FairShareConfig | None = None
    usage: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RoundRules:
    """How the round treats the policy's plan. ``min_migration_gain``: see
    :class:`Hysteresis` (the daemon's ``min_migration_gain`` setting). ``pay_restart``: a
    move no other job forces must also win back the job's restart cost
    (:attr:`JobView.restart_s`) within the round; off, only ``min_migration_gain`` holds
    moves back. ``hold_moves``: off, every move the plan makes is carried out (no
    hysteresis at all; the simulator's Gavel-compatible mode, as Gavel does). ``actions``:
    off, the decision has its placements and plan but no actions, tasks or waiting reasons
    (what the daemon stores and sends, which the simulator does not need: listing every
    running job's extension every round was a tenth of a large simulation)."""

    min_migration_gain: float = Hysteresis().min_migration_gain
    pay_restart: bool = Hysteresis().pay_restart
    hold_moves: bool = True
    actions: bool = True

    def __post_init__(self) -> None:
        self.hysteresis()  # validates

    def hysteresis(self) -> Hysteresis:
        return Hysteresis(self.min_migration_gain, pay_restart=self.pay_restart)


@dataclass(frozen=True, slots=True)
class TaskPlacement:
    """One task of a placement: a job's GPUs on one node and of one GPU type within one copy.

    ``rank_offset`` counts over all copies: the job is one torch.distributed group in which
    the runtime forms a subgroup per copy (for its gradients) and averages the copies over
    the whole group.
    """

    copy_index: int
    node: str
    gpu_type: str
    gpu_indices: tuple[int, ...]
    batch_shares: tuple[int, ...]
    rank_offset: int


@dataclass(frozen=True)
class RoundDecision:
    """What one round decided.

    ``plan``: the policy's plan after the fallback, the holds and pinning (before
    hysteresis). ``actions``: one per job that runs now or will run, stops first (see
    :func:`diff`). ``placements``: what each job runs on for the next lease, hysteresis
    applied. ``tasks``: for each job started, migrated or resized, its new tasks.
    ``waiting``: why each job that got nothing waits. ``fallback``: why the policy's plan
    was set aside (every job kept what it held), or ``""``: ``plan_error``, what the policy
    raised while planning, or ``problems``, what was wrong with its plan.
    ``learn_errors``: what the policy raised while told of completions (each completion
    is told once all the same). ``memory``: the policy's memory to keep, when it learned
    from completions this round (else None).
    ``learned``: how many completions were told to a policy that learns from them.
    ``isolated``: the jobs left out of the plan because the policy fails on them (see
    :func:`plan_around`), each with what the policy raised on it alone; those running keep
    their placements, the others wait with :func:`isolated_reason`. ``probes``: how many
    times a copy of the policy was tried to find them.
    """

    plan: Plan
    actions: tuple[Action, ...]
    placements: Mapping[int, Allocation]
    tasks: Mapping[int, tuple[TaskPlacement, ...]]
    waiting: Mapping[int, str]
    fallback: str = ""
    plan_error: Exception | None = None
    problems: tuple[str, ...] = ()
    learn_errors: tuple[Exception, ...] = ()
    memory: Mapping[str, Any] | None = None
    learned: int = 0
    isolated: Mapping[int, Exception] = field(default_factory=dict)
    probes: int = 0

    def started(self) -> tuple[int, ...]:
        return tuple(a.job_id for a in self.actions if a.kind is ActionKind.START)

    def stopped(self) -> tuple[int, ...]:
        return tuple(a.job_id for a in self.actions if a.kind is ActionKind.STOP)

    def changes(self) -> tuple[Action, ...]:
        """The actions that change what runs (all but extensions)."""
        return tuple(a for a in self.actions if a.kind is not ActionKind.EXTEND)


def decide_round(
    state: RoundState, policy: Policy, rules: RoundRules | None = None
) -> RoundDecision:
    """Decide one round; see the module docstring. Mutates nothing but the policy's own
    state (what it learns and remembers between rounds)."""
    rules = rules or RoundRules()
    snapshot = state.snapshot
    learn_errors: list[Exception] = []
    plan_error: Exception | None = None
    learned = 0
    # Asked once a round: a check against a runtime protocol costs microseconds.
    observes = bool(state.completed) and learns(policy)
    for done in state.completed if observes else ():
        try:
            notify_completion(policy, done.job, done.iterations, done.at)
        except Exception as exc:
            learn_errors.append(exc)
            continue
        learned += 1
    current = {job.id: job.current for job in snapshot.jobs if job.current is not None}
    held = held_leases(state)
    visible = snapshot
    if held:
        visible = replace(snapshot, jobs=tuple(j for j in snapshot.jobs if j.id not in held))
    fair = None
    limited: dict[int, str] = {}
    if state.fair_share is not None:
        visible, limited, fair = prepare(visible, state.fair_share, state.usage)
    fallback = ""
    problems: tuple[str, ...] = ()
    isolated: Mapping[int, Exception] = {}
    probes = 0
    planned: Plan | None
    try:
        planned = policy.plan(visible, state.now)
    except Exception as exc:
        around = plan_around(policy, visible, state.now, exc)
        planned, isolated, probes = around.plan, around.isolated, around.probes
        if planned is None:
            plan_error = around.error
            fallback = f"policy {policy.name!r} failed: {around.error!r}"
            if around.why:
                fallback += f" ({around.why})"
    if planned is not None:
        # Pinned jobs first: a plan that moves one is corrected rather than set aside.
        planned = keep_non_preemptible(visible, current, planned)
        if fair is not None:
            planned = limit_plan(visible, planned, fair, current)
        planned = pack_spread(visible, planned, current)
        problems = tuple(planned.violations(visible))
        if problems:
            fallback = f"policy {policy.name!r} produced an invalid plan: " + "; ".join(
                problems[:5]
            )
    if fallback or planned is None:
        # Every job keeps what it holds; the others wait, saying why.
        why = f"waiting: {fallback}"
        plan = hold(held, Plan(dict(current), {j.id: why for j in visible.jobs}))
        isolated = {}
    else:
        plan = hold(held, planned)
    if limited:
        plan = Plan(plan.allocations, {**plan.reasons, **limited})
    moves_judged_on = visible if rules.hold_moves else None
    # The plan passed the checks unless the round fell back (then every job holds still).
    checked = None if fallback else plan
    actions: list[Action] = []
    tasks: dict[int, tuple[TaskPlacement, ...]] = {}
    waiting: dict[int, str] = {}
    if not rules.actions:
        placements = _in_action_order(
            current,
            held_back(current, plan, snapshot=moves_judged_on, hysteresis=rules.hysteresis()),
        )
        if placements != plan.allocations and Plan(placements).violations(visible, checked):
            placements = _in_action_order(current, dict(plan.allocations))  # as below
    else:
        actions = diff(current, plan, snapshot=moves_judged_on, hysteresis=rules.hysteresis())
        placements = {a.job_id: a.allocation for a in actions if a.allocation is not None}
        if placements != plan.allocations and Plan(placements).violations(visible, checked):
            # A job held back where it was can collide with a job the plan moved in beside
            # it to share its new GPUs; the plan as made is valid, so it is carried out
            # instead.
            actions = diff(current, plan)
            placements = {a.job_id: a.allocation for a in actions if a.allocation is not None}
        extend = ActionKind.EXTEND  # bound once: most of a round's actions are extends
        tasks = {
            a.job_id: split_tasks(a.allocation, snapshot)
            for a in actions
            if a.kind is not extend and a.allocation is not None
        }
        reasons = plan.reasons
        for job in snapshot.jobs:
            if job.id not in placements:
                reason = reasons.get(job.id) or NOT_CHOSEN
                # Only a memory request can change the policy's reason (see pending_reason).
                if job.memory_bytes_per_gpu > 0:
                    reason = snapshot.pending_reason(job.id, reason)
                waiting[job.id] = reason
    return RoundDecision(
        plan=plan,
        actions=tuple(actions),
        placements=placements,
        tasks=tasks,
        waiting=waiting,
        fallback=fallback,
        plan_error=plan_error,
        problems=problems,
        learn_errors=tuple(learn_errors),
        memory=export_memory(policy) if learned else None,
        learned=learned,
        isolated=isolated,
        probes=probes,
    )


def _in_action_order(
    current: Mapping[int, Allocation], planned: dict[int, Allocation]
) -> dict[int, Allocation]:
    """``planned`` in the order :func:`diff` lists the actions that give it (moves, starts,
    extensions, each by job id): the order a decision's placements have either way, which
    the simulator carries them out in."""
    moves: list[int] = []
    starts: list[int] = []
    extends: list[int] = []
    for job_id in sorted(planned):
        old = current.get(job_id)
        if old is None:
            starts.append(job_id)
        elif old is planned[job_id] or old == planned[job_id]:
            extends.append(job_id)
        else:
            moves.append(job_id)
    return {job_id: planned[job_id] for job_id in (*moves, *starts, *extends)}


@dataclass(frozen=True)
class PlannedAround:
    """What :func:`plan_around` found. ``plan``: the policy's plan for the other jobs with
    the isolated ones added (running: where they are; waiting: with their reason), or None
    when the round must fall back, for ``error`` (``why``: what kept the jobs from being
    isolated). ``isolated``: job id -> what the policy raised on that job alone."""

    plan: Plan | None
    error: Exception
    isolated: Mapping[int, Exception] = field(default_factory=dict)
    probes: int = 0
    why: str = ""


class _OutOfTriesError(Exception):
    pass


def plan_around(
    policy: Policy,
    snapshot: Snapshot,
    now: float,
    error: Exception,
    max_calls: int = ISOLATION_MAX_CALLS,
) -> PlannedAround:
    """Plan the jobs ``policy`` does not fail on, after it raised ``error`` planning all of
    ``snapshot``.

    Copies of the policy as it is now are tried on parts of the jobs, so the policy's own
    state changes only as a round's plan changes it: a half that fails is halved again
    down to single jobs, a half that plans is cleared. With k jobs that fail alone among n,
    that is about 2k log2(n) tries, at most ``max_calls``. The policy itself then plans
    the others on the cluster less the GPUs of the isolated jobs that run, which keep them.
    """
    calls = 0

    def attempt(jobs: Sequence[JobView]) -> Exception | None:
        nonlocal calls
        if calls >= max_calls:
            raise _OutOfTriesError
        calls += 1
        trial = deepcopy(policy)
        try:
            trial.plan(replace(snapshot, jobs=tuple(jobs)), now)
        except Exception as exc:
            return exc
        return None

    def culprits(jobs: Sequence[JobView], failed: Exception) -> dict[int, Exception]:
        """The single jobs the policy fails on among ``jobs``, on which it failed."""
        if len(jobs) <= 1:
            return {job.id: failed for job in jobs}
        found: dict[int, Exception] = {}
        half = len(jobs) // 2
        for part in (jobs[:half], jobs[half:]):
            part_error = attempt(part)
            if part_error is not None:
                found.update(culprits(part, part_error))
        return found

    try:
        if attempt(()) is not None:
            return PlannedAround(None, error, probes=calls, why="it fails without any job")
        isolated = culprits(snapshot.jobs, error)
    except _OutOfTriesError:
        why = f"the jobs it fails on were not found in {max_calls} tries"
        return PlannedAround(None, error, probes=calls, why=why)
    except Exception as exc:  # the policy cannot be copied
        return PlannedAround(None, error, probes=calls, why=f"cannot try it on parts: {exc!r}")
    if not isolated:
        why = "it fails only on a combination of jobs"
        return PlannedAround(None, error, probes=calls, why=why)
    # An isolated job that runs on GPUs still usable keeps them; one on a drained node or
    # a failed GPU has to move, and no plan can move it.
    usable = snapshot.cluster.usable_by_slot()
    kept = {
        job.id: job.current
        for job in snapshot.jobs
        if job.id in isolated
        and job.current is not None
        and all(slot in usable for slot in job.current.slots)
    }
    hidden = {slot for alloc in kept.values() for slot in alloc.slots}
    try:
        planned = policy.plan(without(snapshot, isolated.keys(), hidden), now)
    except Exception as exc:
        why = f"and then on the jobs it does not fail on alone: {exc!r}"
        return PlannedAround(None, error, isolated, calls, why)
    reasons = dict(planned.reasons)
    for job_id, job_error in isolated.items():
        if job_id not in kept:
            reasons[job_id] = isolated_reason(policy.name, job_error)
    return PlannedAround(Plan({**planned.allocations, **kept}, reasons), error, isolated, calls)


def without(snapshot: Snapshot, job_ids: Iterable[int], hidden: Set[GpuSlot]) -> Snapshot:
    """``snapshot`` without the jobs ``job_ids`` and with the GPUs ``hidden`` marked
    unusable, so that a policy plans nothing onto them."""
    drop = set(job_ids)
    cluster = snapshot.cluster
    if hidden:
        cluster = ClusterView(
            tuple(
                NodeView(
                    node.name,
                    tuple(replace(g, healthy=False) if g.slot in hidden else g for g in node.gpus),
                    node.schedulable,
                )
                for node in cluster.nodes
            )
        )
    jobs = tuple(job for job in snapshot.jobs if job.id not in drop)
    return replace(snapshot, cluster=cluster, jobs=jobs)


def isolated_reason(policy_name: str, error: Exception) -> str:
    """Why a job the policy fails on waits: the policy and its error, on one line."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(error))
    text = " ".join(text.split()) or type(error).__name__
    if len(text) > REASON_ERROR_MAX:
        text = text[: REASON_ERROR_MAX - 3] + "..."
    return f"not scheduled: policy {policy_name} fails on this job: {text}"


def held_leases(state: RoundState) -> dict[int, LostLease]:
    """The lost leases that keep their jobs from being placed this round: those a worker
    stops at their end, of jobs that hold nothing now."""
    jobs = state.snapshot.jobs_by_id()
    return {
        job_id: lost
        for job_id, lost in state.lost.items()
        if lost.stops_at_end
        and lost.ends_at > state.now
        and job_id in jobs
        and jobs[job_id].current is None
    }


def hold(held: Mapping[int, LostLease], plan: Plan) -> Plan:
    """``plan`` without the held jobs, each waiting with its lease's reason."""
    if not held:
        return plan
    allocations = {j: a for j, a in plan.allocations.items() if j not in held}
    reasons = dict(plan.reasons)
    reasons.update({job_id: lost.reason() for job_id, lost in held.items()})
    return Plan(allocations, reasons)


def keep_non_preemptible(snapshot: Snapshot, current: Mapping[int, Allocation], plan: Plan) -> Plan:
    """Running jobs that may not be preempted (``JobView.preemptible`` false: opaque
    commands, scripts that report no progress) keep exactly what they hold; a job the
    policy put on their GPUs waits instead."""
    jobs = snapshot.jobs_by_id()
    pinned = {
        job_id: alloc
        for job_id, alloc in current.items()
        if job_id in jobs and not jobs[job_id].preemptible
    }
    if not pinned:
        return plan
    allocations = dict(plan.allocations)
    reasons = dict(plan.reasons)
    held = {slot: job_id for job_id, alloc in pinned.items() for slot in alloc.slots}
    removed = False
    for job_id, alloc in list(allocations.items()):
        if job_id in pinned:
            continue
        holders = {held[s] for s in alloc.slots if s in held}
        if holders:
            del allocations[job_id]
            reasons[job_id] = f"waiting: GPUs held by job {min(holders)} (not preemptible)"
            removed = True
    if not removed and all(plan.allocations.get(j) is a for j, a in pinned.items()):
        # The policy kept them itself: its plan, with what it says of itself, stands.
        return plan
    allocations.update(pinned)
    return Plan(allocations, reasons)


def split_tasks(alloc: Allocation, snapshot: Snapshot) -> tuple[TaskPlacement, ...]:
    """The tasks of a placement: one per node and GPU type within each copy, in the
    allocation's order (see :class:`TaskPlacement`)."""
    out: list[TaskPlacement] = []
    rank = 0
    for copy_index, (copy, shares) in enumerate(
        zip(alloc.copies, alloc.shares_per_copy(), strict=True)
    ):
        groups: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
        for slot, share in zip(copy, shares, strict=True):
            key = (slot.node, snapshot.cluster.gpu_type(slot))
            indices, batch = groups.setdefault(key, ([], []))
            indices.append(slot.index)
            batch.append(share)
        for (node, gpu_type), (indices, batch) in groups.items():
            out.append(
                TaskPlacement(copy_index, node, gpu_type, tuple(indices), tuple(batch), rank)
            )
            rank += len(indices)
    return tuple(out)
