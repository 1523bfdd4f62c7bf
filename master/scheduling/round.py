"""One scheduling round as a pure decision, the same for the daemon and the simulator.

:func:`decide_round` takes what the round knows (:class:`RoundState`: the snapshot of every
unfinished job, the leases that may still run on lost nodes, the jobs completed since the
last round) and returns what to do (:class:`RoundDecision`): per job, start, stop, migrate,
resize or extend, the tasks each new placement splits into, why each job that got nothing
waits, and the policy memory to keep when the policy learned something. It reads no clock,
store or network; the daemon's round (``master/rounds.py``) reads the store, calls it and
carries out its decisions, and the simulator applies them to its simulated cluster.

The steps, in order:

1. Completion notices: the policy learns from each job completed since the last round
   (:func:`master.scheduling.policy.notify_completion`), before it plans.
2. Lost-lease holds: a job whose lease may still run on a lost node is hidden from the
   policy until that lease is over, so it never runs twice. Opaque commands are exempt:
   their workers run them to completion whatever the lease, so waiting would not help.
3. The policy's plan, with pinning: a running job that may not be preempted keeps exactly
   its GPUs; a job the plan put on them waits, saying so.
   Fair share and quotas (:mod:`master.scheduling.fairshare`, when ``RoundState.fair_share``
   is set): before the policy plans, priorities are scaled by each user's fair-share
   factor and waiting jobs past their user's quota, or past their user's entitlement while
   another user is under theirs, are hidden from it; its plan then starts no more of one
   user's jobs than those limits allow.
4. Should the policy raise, or its plan (pinning applied) break the cluster's rules
   (:meth:`Plan.violations`), every job keeps what it holds.
5. The diff against what runs, with hysteresis (:class:`Hysteresis`): a move that gains
   less than ``min_migration_gain`` is not carried out, unless holding it back would
   break the cluster's rules (a job the plan moved in to share its new GPUs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from master.scheduling.diff import Action, ActionKind, Hysteresis, diff
from master.scheduling.fairshare import FairShareConfig, limit_plan, prepare
from master.scheduling.plan import Allocation, Plan
from master.scheduling.policy import Policy, export_memory, learns, notify_completion
from master.scheduling.views import JobView, Snapshot

#: Why a job waits when the policy gave no reason.
NOT_CHOSEN = "waiting: not chosen by the policy this round"


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
    moves back."""

    min_migration_gain: float = Hysteresis().min_migration_gain
    pay_restart: bool = Hysteresis().pay_restart

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
    for done in state.completed:
        try:
            notify_completion(policy, done.job, done.iterations, done.at)
        except Exception as exc:
            learn_errors.append(exc)
            continue
        learned += learns(policy)
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
    try:
        planned = policy.plan(visible, state.now)
    except Exception as exc:
        plan_error = exc
        fallback = f"policy {policy.name!r} failed: {exc!r}"
    else:
        # Pinned jobs first: a plan that moves one is corrected rather than set aside.
        planned = keep_non_preemptible(visible, current, planned)
        if fair is not None:
            planned = limit_plan(visible, planned, fair, current)
        problems = tuple(planned.violations(visible))
        if problems:
            fallback = f"policy {policy.name!r} produced an invalid plan: " + "; ".join(
                problems[:5]
            )
    if fallback:
        # Every job keeps what it holds; the others wait, saying why.
        why = f"waiting: {fallback}"
        plan = hold(held, Plan(dict(current), {j.id: why for j in visible.jobs}))
    else:
        plan = hold(held, planned)
    if limited:
        plan = Plan(plan.allocations, {**plan.reasons, **limited})
    actions = diff(current, plan, snapshot=visible, hysteresis=rules.hysteresis())
    placements = {a.job_id: a.allocation for a in actions if a.allocation is not None}
    if placements != plan.allocations and Plan(placements).violations(visible):
        # A job held back where it was can collide with a job the plan moved in beside it
        # to share its new GPUs; the plan as made is valid, so it is carried out instead.
        actions = diff(current, plan)
        placements = {a.job_id: a.allocation for a in actions if a.allocation is not None}
    tasks = {
        a.job_id: split_tasks(a.allocation, snapshot)
        for a in actions
        if a.allocation is not None and a.kind is not ActionKind.EXTEND
    }
    waiting = {
        job.id: snapshot.pending_reason(job.id, plan.reason(job.id) or NOT_CHOSEN)
        for job in snapshot.jobs
        if job.id not in placements
    }
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
    )


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
    for job_id, alloc in list(allocations.items()):
        if job_id in pinned:
            continue
        holders = {held[s] for s in alloc.slots if s in held}
        if holders:
            del allocations[job_id]
            reasons[job_id] = f"waiting: GPUs held by job {min(holders)} (not preemptible)"
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
