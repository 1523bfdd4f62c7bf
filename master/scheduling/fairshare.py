"""Fair share between users and per-user GPU quotas, applied around every policy's plan.

A lab's cluster is shared by users whose admin gives each a *share* (a weight). Two rules
hold whatever the policy, because the round (:func:`master.scheduling.round.decide_round`)
applies them around the policy's plan:

1. Ordering: each job's ``priority`` is multiplied by its user's fair-share factor
   ``2 ** (-U / S)`` (Slurm's classic factor), where ``U`` is the user's decayed GPU usage
   as a fraction of all active users' decayed usage and ``S`` the user's normalized share.
   Policies that weigh priority (fifo, gavel's fifo variant, hare, liu, sjf_bsbf...) prefer
   users below their share; the factor is 1 for a user who used nothing.
2. Proportion: several policies ignore priority (las, srtf, gavel, hadar order by service,
   remaining work or throughput), so the round also decides what the policy is shown. A
   user's *entitlement* is their normalized share times the usable GPUs; a user is
   *protected* while they hold no more than it and have a job (waiting, or running).
   While some user is protected, every other user is shown waiting jobs only up to their
   own entitlement (a user who holds nothing may always start one), plus GPUs no
   protected user waits for; running jobs of users over their entitlement are left out
   (so preempted; latest submitted first, never a job that may not be preempted) as far
   as protected users' waiting jobs need their GPUs (:func:`prepare`). After the policy
   plans, starts past an entitlement while a protected user still waits are dropped, and
   a protected user's running job the plan stopped for them keeps its GPUs
   (:func:`limit_plan`). So while several users have work waiting, each holds their
   entitlement within the granularity of job sizes, whatever the policy;
   tests/unit/sim/test_fair_share.py checks every registered policy against it.

Quotas are hard: a job that would take its user past ``max_gpus_per_user`` (or the user's
own override) waits, whatever the shares, with "waiting: user alice at quota of 4 GPUs".

Shares combine by group: a group listed in ``groups`` with active members takes its
group share as one user would, split among its active members in proportion to their
user shares; users in no group take their own share. Unlisted users and groups have
``default_share``. Shares are normalized over the *active* users (those with unfinished
jobs), so a user who submits nothing does not keep GPUs idle.

Usage decays exponentially with ``half_life_s`` (Slurm's PriorityDecayHalfLife): a
GPU-second used ``half_life_s`` ago counts half. The daemon computes it from its usage
records (:func:`decayed_usage`), the simulator from its own accounting.

Pure: no clock, store or I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from master.scheduling.plan import Allocation, Plan
from master.scheduling.views import JobView, Snapshot

#: Default usage half-life: 7 days, as Slurm's PriorityDecayHalfLife.
DEFAULT_HALF_LIFE_S = 7 * 86400.0
#: Smallest factor, so a scaled priority stays > 0.
MIN_FACTOR = 1e-6


@dataclass(frozen=True)
class FairShareConfig:
    """The admin's fair-share and quota settings.

    ``enabled``: whether shares adjust the round (quotas hold either way).
    ``user_shares``: user -> share; ``groups``: group -> its members; ``group_shares``:
    group -> share (unlisted: ``default_share``). ``max_gpus_per_user``: GPUs one user may
    hold at once (0: no limit); ``user_quotas``: per-user overrides (0: no limit).
    """

    enabled: bool = True
    user_shares: Mapping[str, float] = field(default_factory=dict)
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    group_shares: Mapping[str, float] = field(default_factory=dict)
    default_share: float = 1.0
    half_life_s: float = DEFAULT_HALF_LIFE_S
    max_gpus_per_user: int = 0
    user_quotas: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.default_share > 0:
            raise ValueError(f"default share must be > 0, got {self.default_share}")
        if not self.half_life_s > 0:
            raise ValueError(f"fair-share half-life must be > 0 s, got {self.half_life_s}")
        if self.max_gpus_per_user < 0:
            raise ValueError(f"max_gpus_per_user must be >= 0, got {self.max_gpus_per_user}")
        for kind, shares in (("user", self.user_shares), ("group", self.group_shares)):
            for name, share in shares.items():
                if not share > 0:
                    raise ValueError(f"share of {kind} {name!r} must be > 0, got {share}")
        for name, quota in self.user_quotas.items():
            if quota < 0:
                raise ValueError(f"GPU quota of user {name!r} must be >= 0, got {quota}")
        seen: dict[str, str] = {}
        for group, members in self.groups.items():
            for member in members:
                if member in seen and seen[member] != group:
                    raise ValueError(
                        f"user {member!r} is in two groups: {seen[member]!r} and {group!r}"
                    )
                seen[member] = group
        for name in ("user_shares", "group_shares", "user_quotas"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        groups = {g: tuple(m) for g, m in self.groups.items()}
        object.__setattr__(self, "groups", MappingProxyType(groups))

    def group_of(self, user: str) -> str | None:
        for group, members in self.groups.items():
            if user in members:
                return group
        return None

    def quota(self, user: str) -> int:
        """GPUs ``user`` may hold at once; 0: no limit."""
        return self.user_quotas.get(user, self.max_gpus_per_user)

    def user_share(self, user: str) -> float:
        return self.user_shares.get(user, self.default_share)


def normalized_shares(config: FairShareConfig, users: Iterable[str]) -> dict[str, float]:
    """Each of ``users``' fraction of the cluster (summing to 1): groups with active
    members take their group share, split among those members by their user shares."""
    active = sorted(set(users))
    top: dict[str, float] = {}
    members: dict[str, list[str]] = {}
    for user in active:
        group = config.group_of(user)
        if group is None:
            top[f"u:{user}"] = config.user_share(user)
            members[f"u:{user}"] = [user]
        else:
            top[f"g:{group}"] = config.group_shares.get(group, config.default_share)
            members.setdefault(f"g:{group}", []).append(user)
    total = sum(top.values())
    out: dict[str, float] = {}
    for key, share in top.items():
        inner = sum(config.user_share(u) for u in members[key])
        for user in members[key]:
            out[user] = share / total * config.user_share(user) / inner
    return out


def decay_factor(elapsed_s: float, half_life_s: float) -> float:
    """What a GPU-second used ``elapsed_s`` ago counts now."""
    return float(2.0 ** (-max(0.0, elapsed_s) / half_life_s))


def decayed_gpu_seconds(
    num_gpus: float, start: float, end: float, now: float, half_life_s: float
) -> float:
    """``num_gpus`` GPUs held from ``start`` to ``end`` (seconds), as decayed GPU-seconds
    at ``now``: the integral of ``num_gpus * decay_factor(now - t)`` over the interval."""
    end = min(end, now)
    if end <= start:
        return 0.0
    rate = math.log(2.0) / half_life_s
    return num_gpus * (math.exp(-rate * (now - end)) - math.exp(-rate * (now - start))) / rate


def decayed_usage(
    records: Iterable[tuple[str, float, float, float]], now: float, half_life_s: float
) -> dict[str, float]:
    """Per user, decayed GPU-seconds from (user, GPUs, start, end) intervals."""
    out: dict[str, float] = {}
    for user, gpus, start, end in records:
        used = decayed_gpu_seconds(gpus, start, end, now, half_life_s)
        out[user] = out.get(user, 0.0) + used
    return out


def factor(usage_fraction: float, share_fraction: float) -> float:
    """Slurm's classic fair-share factor ``2 ** (-U / S)``: 1 for no usage, 0.5 for a user
    who used exactly their share, towards 0 beyond."""
    if share_fraction <= 0:
        return MIN_FACTOR
    return max(MIN_FACTOR, float(2.0 ** (-usage_fraction / share_fraction)))


@dataclass(frozen=True, slots=True)
class UserShare:
    """One user's row of the fair-share report (like Slurm's sshare)."""

    user: str
    group: str
    raw_share: float
    share: float
    usage_s: float
    usage: float
    factor: float
    gpus: int
    quota: int


def report(
    config: FairShareConfig,
    usage: Mapping[str, float],
    users: Iterable[str],
    gpus: Mapping[str, int] | None = None,
) -> tuple[UserShare, ...]:
    """Each user's share, decayed usage and factor, among ``users`` (the active ones) and
    every user with usage; sorted by user."""
    everyone = sorted(set(users) | {u for u, s in usage.items() if s > 0})
    shares = normalized_shares(config, everyone)
    total = sum(max(0.0, usage.get(u, 0.0)) for u in everyone)
    rows = []
    for user in everyone:
        used = max(0.0, usage.get(user, 0.0))
        fraction = used / total if total > 0 else 0.0
        rows.append(
            UserShare(
                user=user,
                group=config.group_of(user) or "",
                raw_share=config.user_share(user),
                share=shares[user],
                usage_s=used,
                usage=fraction,
                factor=factor(fraction, shares[user]),
                gpus=(gpus or {}).get(user, 0),
                quota=config.quota(user),
            )
        )
    return tuple(rows)


def quota_reason(user: str, quota: int) -> str:
    return f"waiting: user {user} at quota of {quota} GPUs"


def over_share_reason(user: str, holds: int, total: int, share: float) -> str:
    return (
        f"waiting: {user} over fair share (holds {holds} of {total} GPUs, "
        f"{share:.0%} share) while others wait"
    )


@dataclass(frozen=True)
class FairShareRound:
    """The round's view of the users: entitlements and what each holds now."""

    config: FairShareConfig
    total: int
    shares: Mapping[str, float]
    holds: Mapping[str, int]

    def entitlement(self, user: str) -> float:
        return self.shares.get(user, 0.0) * self.total

    def fits_quota(self, user: str, holds: int, gpus: int) -> bool:
        quota = self.config.quota(user)
        return quota <= 0 or holds + gpus <= quota

    def within_share(self, user: str, holds: int, gpus: int) -> bool:
        """Whether ``user`` holding ``holds`` may take ``gpus`` more without passing
        their entitlement (one job is always allowed to a user who holds nothing)."""
        return holds == 0 or holds + gpus <= self.entitlement(user) + 1e-9

    def protected(self, jobs: Iterable[JobView], holds: Mapping[str, int]) -> frozenset[str]:
        """Users holding no more than their entitlement (``holds``: GPUs per user in the
        state considered) with a job among ``jobs`` that runs or that their quota allows
        to start: while one is, the other users may not grow past their entitlements."""
        out = set()
        for job in jobs:
            held = holds.get(job.user, 0)
            if held <= self.entitlement(job.user) + 1e-9 and (
                job.current is not None or self.fits_quota(job.user, held, job.num_gpus)
            ):
                out.add(job.user)
        return frozenset(out)

    def reason(self, user: str, holds: int, gpus: int) -> str:
        if not self.fits_quota(user, holds, gpus):
            return quota_reason(user, self.config.quota(user))
        return over_share_reason(user, holds, self.total, self.shares.get(user, 0.0))


def prepare(
    snapshot: Snapshot, config: FairShareConfig, usage: Mapping[str, float]
) -> tuple[Snapshot, dict[int, str], FairShareRound]:
    """What the policy sees under fair share and quotas, and why each job left out waits.

    Every job's priority is scaled by its user's factor. Waiting jobs past their user's
    quota are left out. While some user is *starved* (has a waiting job and holds less
    than their entitlement), the other users see no more of their waiting jobs than fits
    their entitlement, save for GPUs the starved users cannot fill; and running jobs that
    may be preempted, of users over their entitlement, are left out (so stopped), latest
    arrivals first, to free no more GPUs than the starved users' waiting jobs need."""
    users = {job.user for job in snapshot.jobs}
    shares = normalized_shares(config, users)
    holds: dict[str, int] = {}
    for job in snapshot.jobs:
        if job.current is not None:
            holds[job.user] = holds.get(job.user, 0) + job.current.num_gpus
    state = FairShareRound(config, snapshot.cluster.num_gpus, shares, holds)
    held: dict[int, str] = {}
    order = sorted(snapshot.jobs, key=lambda j: (j.arrival_time, j.id))
    waiting: list[JobView] = []
    for job in order:
        if job.current is not None:
            continue
        if state.fits_quota(job.user, holds.get(job.user, 0), job.num_gpus):
            waiting.append(job)
        else:
            held[job.id] = quota_reason(job.user, config.quota(job.user))
    running = [job for job in snapshot.jobs if job.current is not None]
    starved = state.protected(waiting + running, holds) if config.enabled else frozenset()
    if starved:
        mine = dict(holds)
        demand: dict[str, int] = {}
        for job in waiting:
            if job.user in starved:
                demand[job.user] = demand.get(job.user, 0) + job.num_gpus
        need = sum(
            min(gpus, max(0, math.ceil(state.entitlement(u) - holds.get(u, 0) - 1e-9)))
            for u, gpus in demand.items()
        )
        # A waiting job of a starved user that no free GPUs can take (too few of any type
        # it may use) needs GPUs freed whatever the count of free ones.
        used = [slot for job in running if job.current is not None for slot in job.current.slots]
        free_by_type = snapshot.cluster.free_count_by_type(used)
        unfit = sum(
            job.num_gpus
            for job in waiting
            if job.user in starved
            and not any(n >= job.num_gpus and job.allows(t) for t, n in free_by_type.items())
        )
        to_free = max(need - (state.total - sum(holds.values())), min(unfit, need))
        for job in reversed(order):
            if to_free <= 0:
                break
            user = job.user
            if job.current is None or not job.preemptible or not starved - {user}:
                continue
            gpus = job.current.num_gpus
            if mine[user] - state.entitlement(user) > gpus / 2:
                mine[user] -= gpus
                to_free -= gpus
                held[job.id] = over_share_reason(user, mine[user], state.total, shares[user])
        # GPUs no starved user waits for go to the others: only once no starved user has
        # work waiting, since a policy that ignores priority would hand them the GPUs the
        # starved users' jobs are waiting for.
        spare = state.total - sum(mine.values()) if need == 0 else 0
        tentative = dict(mine)
        for job in waiting:
            user = job.user
            if not starved - {user}:
                continue
            taken = tentative.get(user, 0)
            if state.within_share(user, taken, job.num_gpus):
                tentative[user] = taken + job.num_gpus
            elif job.num_gpus <= spare:
                spare -= job.num_gpus
                tentative[user] = taken + job.num_gpus
            else:
                held[job.id] = over_share_reason(user, mine.get(user, 0), state.total, shares[user])
        state = FairShareRound(config, state.total, shares, mine)
    total_usage = sum(max(0.0, usage.get(u, 0.0)) for u in users)
    factors = {
        u: factor(max(0.0, usage.get(u, 0.0)) / total_usage if total_usage > 0 else 0.0, s)
        for u, s in shares.items()
    }
    jobs: list[JobView] = []
    for job in snapshot.jobs:
        if job.id in held:
            continue
        scale = factors[job.user] if config.enabled else 1.0
        jobs.append(replace(job, priority=job.priority * scale) if scale != 1.0 else job)
    return replace(snapshot, jobs=tuple(jobs)), held, state


def limit_plan(
    snapshot: Snapshot, plan: Plan, state: FairShareRound, current: Mapping[int, Allocation]
) -> Plan:
    """``plan`` with the new starts that would take their users past their quota, or past
    their entitlement while another user at or under theirs has work waiting, left
    waiting (latest arrivals first). Jobs that run now keep what the plan gives them; a
    running job of a user within their entitlement that the plan stopped keeps running
    when none of its GPUs is taken once those starts are dropped, so a policy cannot
    preempt a user within their share for one over it."""
    jobs = snapshot.jobs_by_id()
    holds: dict[str, int] = {}
    starts: dict[str, list[JobView]] = {}
    for job_id, alloc in plan.allocations.items():
        job = jobs.get(job_id)
        if job is None:
            continue
        if job_id in current:
            holds[job.user] = holds.get(job.user, 0) + alloc.num_gpus
        else:
            starts.setdefault(job.user, []).append(job)
    allocations = dict(plan.allocations)
    reasons = dict(plan.reasons)
    # Quotas first: they hold whatever the shares.
    for user, mine in starts.items():
        mine.sort(key=lambda j: (j.arrival_time, j.id))
        kept = []
        for job in mine:
            gpus = allocations[job.id].num_gpus
            if state.fits_quota(user, holds.get(user, 0), gpus):
                holds[user] = holds.get(user, 0) + gpus
                kept.append(job)
            else:
                del allocations[job.id]
                reasons[job.id] = quota_reason(user, state.config.quota(user))
        starts[user] = kept
    if not state.config.enabled:
        return Plan(allocations, reasons)
    waiting = [j for j in snapshot.jobs if j.id not in allocations]
    starved = state.protected(waiting, holds)
    if not starved:
        return Plan(allocations, reasons)
    dropped = False
    for user, mine in starts.items():
        if not starved - {user}:
            continue
        for job in reversed(mine):
            gpus = allocations[job.id].num_gpus
            if holds[user] <= state.entitlement(user) + 1e-9 or holds[user] == gpus:
                break
            holds[user] -= gpus
            del allocations[job.id]
            reasons[job.id] = over_share_reason(
                user, holds[user], state.total, state.shares.get(user, 0.0)
            )
            dropped = True
    if not dropped:
        return Plan(allocations, reasons)
    claimed = {slot for alloc in allocations.values() for slot in alloc.slots}
    for job_id, alloc in sorted(current.items()):
        job = jobs.get(job_id)
        if job is None or job_id in allocations or job.user not in starved:
            continue
        if holds.get(job.user, 0) + alloc.num_gpus > state.entitlement(job.user) + 1e-9:
            continue
        if claimed.isdisjoint(alloc.slots):
            allocations[job_id] = alloc
            reasons.pop(job_id, None)
            claimed.update(alloc.slots)
            holds[job.user] = holds.get(job.user, 0) + alloc.num_gpus
    return Plan(allocations, reasons)
