"""Hadar: task-level heterogeneity-aware online primal-dual scheduling.

Sultana et al., "Resource Heterogeneity-Aware and Utilization-Enhanced Scheduling for Deep
Learning Clusters" (IPDPS 2024; arXiv 2503.10918), after OASiS (Bao et al., INFOCOM 2018).

Every round, every GPU type has a price per GPU that grows exponentially with the
fraction of its GPUs already given out in this round, ``p(u) = L * (U/L)**u``, from the
lowest per-GPU utility ``L`` any job can get this round to the highest ``U``. A job's
utility for a round is the fraction of its remaining work the round would complete,
times its priority: ``w * rate(A) * round_s / remaining`` (so a faster allocation, or a
job closer to its end, is worth more; per GPU it is Smith's ratio of weight to remaining
GPU time). Jobs are considered by their best per-GPU utility, highest first (the jobs
with the largest payoff per GPU go first), and the dual subroutine gives each the GPU
set that maximizes ``utility - sum of prices``: all its GPUs on one type (consolidated
where a server has room), or, task-level, a mix of types whose batch is split in
proportion to speed, built greedily GPU by GPU at rising prices. The job is placed only
when that payoff is positive; then the prices of the types it took go up.

Departures from the paper, and why: prices are per GPU type over the whole cluster, not
per type per node, because with 4-GPU servers a per-node utilization moves in quarters
and makes one-GPU jobs prefer empty servers, fragmenting the whole servers that multi-GPU
jobs need; node choice is left to best-fit consolidation. ``L`` is half the lowest
per-GPU utility (``floor_fraction``) so that on an idle cluster every job has a positive
payoff. The schedule is recomputed every round (preemptive) rather than fixed at arrival.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from master.scheduling.placement import FreeGpus
from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.policies._speeds import (
    allocation_on,
    allocation_rate,
    allowed_types,
    current_usable,
    job_rate,
    keep_pinned,
    remaining_seconds,
    single_type_bound,
    type_counts,
)
from master.scheduling.views import JobView, Snapshot

NAME = "hadar"

#: ``round``: ``U`` is the highest per-GPU utility of any job this round (the paper's
#: bound); ``remaining``: of any job not yet considered, which tightens as the pass goes.
CEILINGS = ("round", "remaining")


@dataclass(frozen=True, slots=True)
class Decision:
    """What the dual subroutine offered a job this round (placed or not)."""

    counts: tuple[tuple[str, int], ...]
    utility: float
    cost: float
    placed: bool

    @property
    def payoff(self) -> float:
        return self.utility - self.cost


class Prices:
    """Per-type GPU prices ``L_t * (U_t/L_t) ** (claimed_t/capacity_t)`` for one round.

    ``low`` and ``high`` are either one figure for every type or one per type.
    """

    __slots__ = ("_capacity", "_claimed", "_free", "_log_ratio", "_low")

    def __init__(
        self,
        capacity: dict[str, int],
        low: float | dict[str, float],
        high: float | dict[str, float],
        *,
        free: bool = False,
    ) -> None:
        lows = low if isinstance(low, dict) else dict.fromkeys(capacity, low)
        highs = high if isinstance(high, dict) else dict.fromkeys(capacity, high)
        if any(v <= 0 for v in lows.values()):
            raise ValueError(f"price floors must be > 0, got {lows}")
        self._capacity = capacity
        self._claimed = dict.fromkeys(capacity, 0)
        self._free = free
        self._low = {t: lows.get(t, 1.0) for t in capacity}
        self._log_ratio = {
            t: math.log(max(highs.get(t, self._low[t]), self._low[t]) / self._low[t])
            for t in capacity
        }

    def price(self, gpu_type: str, extra: int = 0) -> float:
        """Price of the next GPU of ``gpu_type`` after ``extra`` more are claimed."""
        cap = self._capacity.get(gpu_type, 0)
        if cap <= 0:
            return math.inf
        if self._free:
            return 0.0
        u = min(1.0, (self._claimed[gpu_type] + extra) / cap)
        return self._low[gpu_type] * math.exp(self._log_ratio[gpu_type] * u)

    @property
    def free(self) -> bool:
        """Whether every GPU of a type the cluster has costs nothing."""
        return self._free

    def cost(self, gpu_type: str, k: int, already: int = 0) -> float:
        cap = self._capacity.get(gpu_type, 0)
        if cap <= 0:
            return sum(self.price(gpu_type, already + i) for i in range(k))
        if self._free:
            return 0.0
        # price() for each GPU, its lookups done once.
        low, ratio = self._low[gpu_type], self._log_ratio[gpu_type]
        claimed = self._claimed[gpu_type] + already
        return sum(low * math.exp(ratio * min(1.0, (claimed + i) / cap)) for i in range(k))

    def ladder(self, gpu_type: str, k: int) -> list[float]:
        """The prices of the next ``k`` GPUs of ``gpu_type``: :meth:`price` for each of
        ``extra`` 0 to k - 1, whose sum is :meth:`cost`."""
        cap = self._capacity.get(gpu_type, 0)
        if cap <= 0:
            return [math.inf] * k
        if self._free:
            return [0.0] * k
        low, ratio = self._low[gpu_type], self._log_ratio[gpu_type]
        claimed = self._claimed[gpu_type]
        return [low * math.exp(ratio * min(1.0, (claimed + i) / cap)) for i in range(k)]

    def lower_ceiling(self, gpu_type: str, high: float) -> None:
        """Lower ``U_t`` to ``high`` (not below ``L_t``): no job to come is worth more."""
        low = self._low[gpu_type]
        self._log_ratio[gpu_type] = min(self._log_ratio[gpu_type], math.log(max(high, low) / low))

    def claim(self, gpu_type: str, k: int) -> None:
        self._claimed[gpu_type] = self._claimed.get(gpu_type, 0) + k

    def utilization(self, gpu_type: str) -> float:
        cap = self._capacity.get(gpu_type, 0)
        return self._claimed.get(gpu_type, 0) / cap if cap else 1.0


@dataclass(slots=True)
class _Option:
    counts: dict[str, int]
    utility: float
    cost: float
    consolidated: bool
    #: HadarE: number of one-server copies per GPU type (empty for one ordinary copy).
    copies: dict[str, int] = field(default_factory=dict)


class PrimalDual:
    """The per-round primal-dual pass, shared by ``hadar`` and ``hadare``."""

    def __init__(
        self,
        *,
        floor_fraction: float = 0.5,
        mixed: bool = True,
        completion_exponent: float = 1.0,
        ceiling: str = "round",
        horizon_s: float | None = None,
        copy_efficiency: float | None = None,
        max_copies: int = 16,
        exchange: bool = True,
        per_type_bounds: bool = True,
        capped: bool = True,
        finish_weight: float = 0.1,
    ) -> None:
        self.capped = capped
        if not 0.0 <= finish_weight <= 1.0:
            raise ValueError(f"finish_weight must be in [0, 1], got {finish_weight}")
        self.finish_weight = finish_weight
        self.exchange = exchange
        self.per_type_bounds = per_type_bounds
        if copy_efficiency is not None and not 0 < copy_efficiency <= 1:
            raise ValueError(f"copy_efficiency must be in (0, 1], got {copy_efficiency}")
        if max_copies < 2:
            raise ValueError(f"max_copies must be >= 2, got {max_copies}")
        self.copy_efficiency = copy_efficiency
        self.max_copies = max_copies
        if horizon_s is not None and horizon_s < 0:
            raise ValueError(f"horizon_s must be >= 0, got {horizon_s}")
        self.horizon_s = horizon_s
        if ceiling not in CEILINGS:
            raise ValueError(f"ceiling must be one of {', '.join(CEILINGS)}, got {ceiling!r}")
        self.ceiling = ceiling
        if not 0 < floor_fraction <= 1:
            raise ValueError(f"floor_fraction must be in (0, 1], got {floor_fraction}")
        if not 1.0 <= completion_exponent <= 3.0:
            raise ValueError(f"completion_exponent must be in [1, 3], got {completion_exponent}")
        self.floor_fraction = floor_fraction
        self.mixed = mixed
        self.completion_exponent = completion_exponent
        self.now = 0.0
        self._scales: dict[int, float] = {}
        # Rounds over which a running job's move must win back its restart.
        self.restart_horizon_rounds = 1.0
        # GPU -> running jobs holding it, and those GPUs by type and server, for the round
        # being planned; worked out when a job first moves (see _holders), since in most
        # rounds every running job keeps its GPUs.
        self._held: dict[GpuSlot, list[int]] | None = None
        self._held_groups: dict[str, dict[tuple[str, str], set[int]]] = {}
        # Per GPU type, its free GPUs no running job holds (see _unheld_ledger).
        self._unheld: dict[str, FreeGpus] = {}
        # Per job of the round: its view and the GPU types of the allocation it may keep
        # (see _keepable); the pass asks for each job's up to three times.
        self._keepable: dict[int, tuple[JobView, dict[str, int] | None]] = {}

    def after_restart(self, snapshot: Snapshot, job: JobView, rate: float) -> float:
        """The speed a job gets from a new placement of speed ``rate`` over the restart
        horizon: it first loses ``restart_s`` to starting there (a running job also to its
        checkpoint). Only a running job kept on its GPUs runs at full speed, so a waiting
        job displaces it only when worth a restart."""
        horizon = snapshot.round_seconds * self.restart_horizon_rounds
        if horizon <= 0:
            return rate
        return rate * max(0.0, 1.0 - job.restart_s / horizon)

    def scale(self, snapshot: Snapshot, job: JobView) -> float:
        """Utility per iteration/s of speed this round.

        The job's utility is ``-w * T**p`` for completion time ``T`` (non-increasing, as
        the paper requires); a round of progress at speed ``r`` completes the fraction
        ``r * round_s / remaining`` of its remaining work, worth
        ``w * T_est**(p-1) * r * round_s / remaining`` by the exchange argument behind
        Smith's rule, with ``T_est`` the job's age plus its remaining time at best speed.
        ``p = 1`` is pure average JCT (Smith's ratio); ``p > 1`` weighs jobs that have
        been in the system long more, which bounds the tail.
        """
        cached = self._scales.get(job.id)
        if cached is not None:
            return cached
        remaining = max(job.remaining_iterations, 1e-9)
        value = job.priority * snapshot.round_seconds / remaining
        if self.completion_exponent != 1.0:
            age = max(0.0, self.now - job.arrival_time)
            ahead = (
                min(remaining_seconds(snapshot, job), 1e12)
                if self.horizon_s is None
                else self.horizon_s
            )
            value *= max(age + ahead, 1.0) ** (self.completion_exponent - 1.0)
        self._scales[job.id] = value
        return value

    def utility(self, snapshot: Snapshot, job: JobView, rate: float) -> float:
        """Utility of running ``job`` at ``rate`` for this round.

        Linear in the fraction ``x = rate * round_s / remaining`` of its remaining work the
        round completes, up to the whole of it; beyond that, speed only makes the job end
        earlier within the round, saving ``(1 - 1/x)`` of a round, worth
        ``1 + finish_weight * (1 - 1/x)``. Concave, so a job about to finish is not given
        GPUs (or copies) it can barely use. The weight is small because a plan holds for
        the round: GPUs a job frees mid-round wait for the next plan, while a job that
        still has work would have used them all round.
        """
        if not self.capped:
            return self.scale(snapshot, job) * rate
        remaining = max(job.remaining_iterations, 1e-9)
        x = rate * snapshot.round_seconds / remaining
        weight = self.scale(snapshot, job) * remaining / snapshot.round_seconds
        return weight * (x if x <= 1.0 else 1.0 + self.finish_weight * (1.0 - 1.0 / x))

    def run(
        self, snapshot: Snapshot, free: FreeGpus, jobs: list[JobView]
    ) -> tuple[dict[int, Allocation], dict[int, str], dict[int, Decision], Prices]:
        """Place ``jobs`` on ``free`` (mutated); GPUs already taken count as claimed.

        ``L`` and ``U`` come from each job's best option on the GPUs free at the start of
        the pass, so the job with the highest per-GPU utility always has a positive
        payoff on its best option: a lone job never waits.
        """
        self._scales = {}
        self._held = None
        self._unheld = {}
        self._keepable = {}
        capacity = snapshot.cluster.capacity_by_type()
        unpriced = Prices(capacity, 1.0, 1.0, free=True)
        # Per-GPU utility of each job on each type alone (its zero-price options).
        per_type: dict[int, dict[str, float]] = {}
        values: dict[int, float] = {}
        # Which types fit a job, and its speed on each, depend on its type, size and allowed
        # types alone while ``free`` stays as it is: a long queue holds many alike.
        fits: dict[tuple[str, int, tuple[str, ...] | None], list[tuple[str, bool, float]]] = {}
        for job in jobs:
            alike = (
                job.job_type,
                job.num_gpus,
                tuple(allowed_types(snapshot, job)) if job.restricted else None,
            )
            fitting = fits.get(alike)
            if fitting is None:
                fitting = fits[alike] = self._fitting_types(snapshot, job, free)
            per_type[job.id] = self._type_values(snapshot, job, fitting)
            option = self.best_option(snapshot, job, free, unpriced, fitting)
            values[job.id] = option.utility / job.num_gpus if option is not None else 0.0
        lows: dict[str, float] = {}
        highs: dict[str, float] = {}
        ranked: dict[str, list[tuple[float, int]]] = {}
        for t in capacity:
            column = [(v[t], job_id) for job_id, v in per_type.items() if v.get(t, 0.0) > 0]
            if column:
                lows[t] = min(c[0] for c in column) * self.floor_fraction
                highs[t] = max(c[0] for c in column)
                ranked[t] = sorted(column, reverse=True)
        if not self.per_type_bounds:
            positive = [v for v in values.values() if v > 0]
            floor = (min(positive) if positive else 1.0) * self.floor_fraction
            top = max(positive) if positive else floor
            lows, highs = dict.fromkeys(capacity, floor), dict.fromkeys(capacity, top)
        prices = Prices(capacity, lows, highs)
        for t, cap in capacity.items():
            prices.claim(t, cap - free.count(t))
        allocations: dict[int, Allocation] = {}
        reasons: dict[int, str] = {}
        decisions: dict[int, Decision] = {}
        order = sorted(jobs, key=lambda j: (-values[j.id], j.arrival_time, j.id))
        considered: set[int] = set()
        heads = dict.fromkeys(ranked, 0)
        # The head each type's ceiling was last lowered to: lowering it to the same again
        # changes nothing.
        lowered: dict[str, int] = {}
        for job in order:
            considered.add(job.id)
            if values[job.id] <= 0:
                reasons[job.id] = "waiting: not enough free GPUs of allowed types"
                continue
            if self.ceiling == "remaining" and not self.per_type_bounds:
                for t in capacity:
                    prices.lower_ceiling(t, values[job.id])
            elif self.ceiling == "remaining":
                for t, column in ranked.items():
                    # U_t: the highest utility on t of a job not yet placed or refused.
                    while heads[t] < len(column) and column[heads[t]][1] in considered:
                        if column[heads[t]][1] == job.id:
                            break
                        heads[t] += 1
                    if heads[t] < len(column) and lowered.get(t) != heads[t]:
                        prices.lower_ceiling(t, column[heads[t]][0])
                        lowered[t] = heads[t]
            option = self.best_option(snapshot, job, free, prices)
            if option is None:
                reasons[job.id] = "waiting: not enough free GPUs of allowed types"
                continue
            placed = option.utility - option.cost > 0
            decisions[job.id] = Decision(
                tuple(sorted(option.counts.items())), option.utility, option.cost, placed
            )
            if not placed:
                reasons[job.id] = (
                    f"waiting: utility {option.utility:.3g} does not exceed the price "
                    f"{option.cost:.3g} of the GPUs it would use (hadar)"
                )
                continue
            for t, k in option.counts.items():
                prices.claim(t, k)
            if option.copies:
                groups = self.take_copies(snapshot, job, option, free)
                for group in groups:
                    self._taken(free.type_of(group[0]), group)
                allocations[job.id] = Allocation.copies_on(groups, job.batch_size)
                continue
            slots = self.take(snapshot, job, option, free)
            if job.current is not None and job.current.copies == (slots,):
                allocations[job.id] = job.current
            else:
                allocations[job.id] = allocation_on(snapshot, job, slots)
        if self.exchange:
            by_id = {job.id: job for job in jobs}
            self._exchange(snapshot, allocations, decisions, by_id)
        # The round's ledgers and views go with it: a policy is copied, and sent to a
        # planning process, between rounds.
        self._unheld = {}
        self._keepable = {}
        return allocations, reasons, decisions, prices

    def _exchange(
        self,
        snapshot: Snapshot,
        allocations: dict[int, Allocation],
        decisions: dict[int, Decision],
        jobs: dict[int, JobView],
    ) -> None:
        """Let placed jobs trade GPU sets of the same size when the trade raises utility.

        The pass is greedy in job order, so an early job may hold fast GPUs that a later
        job gains more from. Two jobs on equal-size single-copy sets of different types
        swap when the sum of their utilities grows and each still pays less than its new
        set's utility to it (prices paid follow the set, so no payoff turns negative).
        Per pair of type mixes, the jobs that gain least from their own mix trade with
        those that gain most from it, while the trade pays.
        """
        cluster = snapshot.cluster
        groups: dict[tuple[int, tuple[tuple[str, int], ...]], list[int]] = {}
        for job_id, alloc in allocations.items():
            if alloc.num_copies != 1 or alloc.shared_with is not None or alloc.folded:
                continue
            # Kept per allocation by the cluster, and most jobs keep theirs round to round.
            counts = cluster.type_counts(alloc)
            if counts is None:
                counts = tuple(type_counts(snapshot, alloc.slots).items())
            groups.setdefault((alloc.num_gpus, tuple(sorted(counts))), []).append(job_id)

        # Each job's utility is asked for on several sets (its own, each group's first
        # job's, the trade's); whether a set is the job's current one is decided by the
        # GPUs of each copy, so those are worked out once per allocation. An entry holds
        # its allocation, so the id in its key is not reused while the entry lives.
        placements: dict[int, tuple[Allocation, tuple[frozenset[GpuSlot], ...]]] = {}

        def placement(alloc: Allocation) -> tuple[frozenset[GpuSlot], ...]:
            entry = placements.get(id(alloc))
            if entry is None or entry[0] is not alloc:
                entry = placements[id(alloc)] = (alloc, tuple(frozenset(c) for c in alloc.copies))
            return entry[1]

        def utility(job_id: int, alloc: Allocation) -> float:
            job = jobs[job_id]
            rate = allocation_rate(snapshot, job, alloc)
            # Allocation.same_placement, with each side's GPUs worked out once.
            if job.current is not None and placement(alloc) != placement(job.current):
                rate = self.after_restart(snapshot, job, rate)
            return self.utility(snapshot, job, rate)

        keys = sorted(groups)
        for i, key_a in enumerate(keys):
            for key_b in keys[i + 1 :]:
                if key_a[0] != key_b[0]:
                    continue
                on_a, on_b = groups[key_a], groups[key_b]
                if not on_a or not on_b:
                    continue
                rep_a = allocations[on_a[0]]
                rep_b = allocations[on_b[0]]

                def advantage(
                    job_id: int, rep_a: Allocation = rep_a, rep_b: Allocation = rep_b
                ) -> float:
                    return utility(job_id, rep_a) - utility(job_id, rep_b)

                on_a.sort(key=advantage)
                on_b.sort(key=advantage, reverse=True)
                for k in range(min(len(on_a), len(on_b))):
                    j, m = on_a[k], on_b[k]
                    alloc_j, alloc_m = allocations[j], allocations[m]
                    if not all(jobs[j].allows(cluster.gpu_type(s)) for s in alloc_m.slots):
                        break
                    if not all(jobs[m].allows(cluster.gpu_type(s)) for s in alloc_j.slots):
                        break
                    new_j = allocation_on(snapshot, jobs[j], alloc_m.slots)
                    new_m = allocation_on(snapshot, jobs[m], alloc_j.slots)
                    u_j, u_m = utility(j, new_j), utility(m, new_m)
                    gain = u_j + u_m - utility(j, alloc_j) - utility(m, alloc_m)
                    cost_j, cost_m = decisions[m].cost, decisions[j].cost
                    if gain <= 1e-12 * (u_j + u_m) or u_j <= cost_j or u_m <= cost_m:
                        break
                    allocations[j], allocations[m] = new_j, new_m
                    counts_j, counts_m = decisions[j].counts, decisions[m].counts
                    decisions[j] = Decision(counts_m, u_j, cost_j, True)
                    decisions[m] = Decision(counts_j, u_m, cost_m, True)
                    on_a[k], on_b[k] = m, j

    @staticmethod
    def _fitting_types(
        snapshot: Snapshot, job: JobView, free: FreeGpus
    ) -> list[tuple[str, bool, float]]:
        """Each allowed type with ``num_gpus`` free GPUs, in order: whether one server has
        them all, and the job's speed on them."""
        n = job.num_gpus
        out: list[tuple[str, bool, float]] = []
        for t in allowed_types(snapshot, job):
            if free.count(t) >= n:
                consolidated = free.max_free_on_one_node(t) >= n
                out.append((t, consolidated, job_rate(snapshot, job, t, consolidated=consolidated)))
        return out

    def _type_values(
        self, snapshot: Snapshot, job: JobView, fitting: list[tuple[str, bool, float]]
    ) -> dict[str, float]:
        """Per-GPU utility of ``job`` on each allowed type with room (``fitting``, see
        :meth:`_fitting_types`), alone on that type."""
        n = job.num_gpus
        return {t: self.utility(snapshot, job, rate) / n for t, _, rate in fitting}

    def best_option(
        self,
        snapshot: Snapshot,
        job: JobView,
        free: FreeGpus,
        prices: Prices,
        fitting: list[tuple[str, bool, float]] | None = None,
    ) -> _Option | None:
        """The dual subroutine: the GPU multiset maximizing utility minus price.
        ``fitting``: :meth:`_fitting_types` on ``free``, when the caller has it."""
        n = job.num_gpus
        scale = self.scale(snapshot, job)
        types = [t for t in allowed_types(snapshot, job) if free.count(t) > 0]
        if sum(free.count(t) for t in types) < n:
            # Every option needs n free GPUs (copies more); once the cluster is full this
            # is most jobs of a long queue.
            return None
        kept = self._kept_counts(snapshot, job, free)
        best: _Option | None = None
        # The type the job would keep its GPUs on, if any (it then runs at full speed).
        keeps = (
            next(iter(kept))
            if kept is not None and len(kept) == 1 and job.current is not None
            else None
        )
        if fitting is None:
            fitting = self._fitting_types(snapshot, job, free)
        # Each type's next n prices: the single-type options' costs are their sums, and
        # the mixed option climbs them GPU by GPU.
        ladders = {t: prices.ladder(t, n) for t in types}
        for t, consolidated, speed in fitting:
            if t == keeps and kept is not None and kept[t] == n and job.current is not None:
                rate = allocation_rate(snapshot, job, job.current)
            else:
                rate = self.after_restart(snapshot, job, speed)
            utility = self.utility(snapshot, job, rate)
            cost = sum(ladders[t])
            # Only an option that beats the best so far is built.
            if best is None or utility - cost > best.utility - best.cost:
                best = _Option({t: n}, utility, cost, consolidated)
        if self.mixed and n > 1 and len(types) > 1 and sum(free.count(t) for t in types) >= n:
            mixed = self._mixed_option(snapshot, job, types, free, prices, ladders, scale)
            if mixed is not None and (
                best is None or mixed.utility - mixed.cost > best.utility - best.cost
            ):
                best = mixed
        if self.copy_efficiency is not None:
            forked = self._copies_option(snapshot, job, types, free, prices, scale)
            if forked is not None and (
                best is None or forked.utility - forked.cost > best.utility - best.cost
            ):
                best = forked
        return best

    def _copies_option(
        self,
        snapshot: Snapshot,
        job: JobView,
        types: list[str],
        free: FreeGpus,
        prices: Prices,
        scale: float,
    ) -> _Option | None:
        """HadarE: two or more copies, each on its own server, at rising prices.

        A copy needs the job's GPU count on one server; all copies together progress at
        ``e * (sum of their speeds)``. Copies are added greedily, best marginal payoff
        first, while the marginal payoff stays positive (at most ``max_copies``).
        """
        assert self.copy_efficiency is not None
        if not job.forkable or not job.preemptible:
            return None  # copies change how the model trains: only jobs that asked for them
        e = self.copy_efficiency
        n = job.num_gpus
        room = {}
        for t in types:
            servers = sum(1 for k in free.free_on_node(t).values() if k >= n)
            if servers:
                room[t] = servers
        if sum(room.values()) < 2:
            return None
        rate = {t: job_rate(snapshot, job, t) for t in room}
        copies = dict.fromkeys(room, 0)
        total_rate = utility = cost = 0.0
        count = 0
        while count < self.max_copies:
            pick: tuple[float, str, float, float] | None = None
            for t, servers in room.items():
                if copies[t] >= servers:
                    continue
                price = prices.cost(t, n, copies[t] * n)
                after = e * (total_rate + rate[t]) if count >= 1 else rate[t]
                gain = self.utility(snapshot, job, after) - utility
                if pick is None or gain - price > pick[0]:
                    pick = (gain - price, t, gain, price)
            if pick is None or (count >= 1 and pick[0] <= 0):
                break
            _, t, gain, price = pick
            copies[t] += 1
            count += 1
            total_rate += rate[t]
            utility += gain
            cost += price
        if count < 2:
            return None
        used = {t: k for t, k in copies.items() if k > 0}
        return _Option(
            {t: k * n for t, k in used.items()}, utility, cost, consolidated=True, copies=used
        )

    def _mixed_option(
        self,
        snapshot: Snapshot,
        job: JobView,
        types: list[str],
        free: FreeGpus,
        prices: Prices,
        ladders: dict[str, list[float]],
        scale: float,
    ) -> _Option | None:
        """Greedy GPU-by-GPU choice across types, batch split in proportion to speed.

        With a proportional split the job's speed is the mean, over its GPUs, of each
        type's whole-job speed at this scale, so every GPU adds a fixed value and the
        greedy choice at rising prices is exact for the additive payoff. ``ladders``:
        each type's next ``num_gpus`` prices (see :meth:`Prices.ladder`).
        """
        n = job.num_gpus
        per_gpu = {t: scale * job_rate(snapshot, job, t, consolidated=False) / n for t in types}
        if prices.free and free.count(max(types, key=per_gpu.__getitem__)) >= n:
            # At no price the greedy choice takes every GPU from the fastest type (the
            # first of equals), which has room for them all: one type, no mix.
            return None
        counts = dict.fromkeys(types, 0)
        utility = cost = 0.0
        for _ in range(n):
            pick: tuple[float, str] | None = None
            for t in types:
                if counts[t] >= free.count(t):
                    continue
                gain = per_gpu[t] - ladders[t][counts[t]]
                if pick is None or gain > pick[0]:
                    pick = (gain, t)
            if pick is None:
                return None
            t = pick[1]
            utility += per_gpu[t]
            cost += ladders[t][counts[t]]
            counts[t] += 1
        used = {t: k for t, k in counts.items() if k > 0}
        if len(used) < 2:
            return None
        if utility / scale > single_type_bound(snapshot, job) * (1 + 1e-9):
            return None
        rate = self.after_restart(snapshot, job, utility / scale)
        return _Option(used, self.utility(snapshot, job, rate), cost, False)

    def _kept_counts(
        self, snapshot: Snapshot, job: JobView, free: FreeGpus
    ) -> dict[str, int] | None:
        """GPU type -> count of the job's current GPUs when it may keep them and they are
        all free; None otherwise. The result is shared: not to be changed."""
        entry = self._keepable.get(job.id)
        if entry is None or entry[0] is not job:
            entry = self._keepable[job.id] = (job, self._keepable_counts(snapshot, job))
        counts = entry[1]
        if counts is None or job.current is None:
            return None
        if not all(free.is_free(slot) for slot in job.current.slots):
            return None
        return counts

    @staticmethod
    def _keepable_counts(snapshot: Snapshot, job: JobView) -> dict[str, int] | None:
        """GPU type -> count of the job's current GPUs, when it is one ordinary copy it may
        keep (unshared, unfolded, on usable GPUs of allowed types); None otherwise."""
        current = job.current
        if current is None or current.num_copies != 1 or current.shared_with is not None:
            return None
        if current.folded or not current_usable(snapshot, job):
            return None
        return dict(snapshot.cluster.type_counts(current) or ())

    def _holders(self, snapshot: Snapshot, free: FreeGpus) -> dict[GpuSlot, list[int]]:
        """GPU -> the running jobs holding it, this round; also groups those GPUs by type
        and server (``_held_groups``) the first time it is asked."""
        if self._held is None:
            self._held = snapshot.running_slots()
            self._held_groups = {}
            for key, indices in free.grouped(self._held).items():
                self._held_groups.setdefault(key[0], {})[key] = indices
        return self._held

    @staticmethod
    def _held_alone(job: JobView, held: dict[GpuSlot, list[int]]) -> list[GpuSlot]:
        """The GPUs ``job`` alone holds now (``held``: see :meth:`_holders`)."""
        if job.current is None:
            return []
        return [
            slot
            for slot in job.current.slots
            if slot in held and all(holder == job.id for holder in held[slot])
        ]

    @staticmethod
    def take_copies(
        snapshot: Snapshot, job: JobView, option: _Option, free: FreeGpus
    ) -> list[tuple[GpuSlot, ...]]:
        """One group of ``num_gpus`` GPUs per copy, each on its own server (tightest first)."""
        n = job.num_gpus
        groups: list[tuple[GpuSlot, ...]] = []
        for t, k in sorted(
            option.copies.items(), key=lambda e: (-snapshot.throughput.speed(e[0]), e[0])
        ):
            nodes = sorted(
                ((c, name) for name, c in free.free_on_node(t).items() if c >= n),
            )
            for _, name in nodes[:k]:
                idle = [
                    g.slot
                    for g in snapshot.cluster.node(name).usable_gpus
                    if g.type == t and free.is_free(g.slot)
                ][:n]
                if not free.take_slots(idle):  # pragma: no cover - counted as free above
                    raise AssertionError(f"free GPUs of {name} changed while taking them")
                groups.append(tuple(idle))
        return groups

    def take(
        self, snapshot: Snapshot, job: JobView, option: _Option, free: FreeGpus
    ) -> tuple[GpuSlot, ...]:
        """Take the option's GPUs, keeping the job's current ones when they match."""
        current = job.current
        if (
            self._kept_counts(snapshot, job, free) == option.counts
            and current is not None
            and free.take_slots(current.slots)
        ):
            return current.slots
        # GPUs another running job holds come last: taking them moves that job.
        mine = self._held_alone(job, self._holders(snapshot, free))
        slots: list[GpuSlot] = []
        for t, k in sorted(option.counts.items(), key=lambda e: (-e[1], e[0])):
            unheld = self._unheld_ledger(free, t)
            own = [slot for slot in mine if free.type_of(slot) == t and free.is_free(slot)]
            if own:
                # Its own GPUs are not held against the job.
                unheld = unheld.copy([t])
                unheld.release(own)
            got = unheld.take(k, t)
            if got is None or not free.take_slots(got):
                got = free.take(k, t)
            if got is None:  # pragma: no cover - the option was built from free counts
                raise AssertionError(f"{k} free {t} GPUs promised but not found")
            self._taken(t, got)
            slots.extend(got)
        return tuple(slots)

    def _unheld_ledger(self, free: FreeGpus, gpu_type: str) -> FreeGpus:
        """The GPUs of ``gpu_type`` free in ``free`` that no running job holds, made the
        first time a job moves onto the type this round and kept in step with ``free`` by
        :meth:`_taken` (held GPUs are taken only by the jobs keeping them), so that not
        every move copies the type's free GPUs and sets aside all those held."""
        ledger = self._unheld.get(gpu_type)
        if ledger is None:
            ledger = free.copy([gpu_type])
            ledger.discard_grouped(self._held_groups.get(gpu_type, {}))
            self._unheld[gpu_type] = ledger
        return ledger

    def _taken(self, gpu_type: str, slots: Sequence[GpuSlot]) -> None:
        """GPUs of ``gpu_type`` just taken from the pass's free GPUs are not free unheld
        ones any more."""
        ledger = self._unheld.get(gpu_type)
        if ledger is not None:
            ledger.discard(slots)


class HadarPolicy:
    name = NAME

    def __init__(
        self,
        *,
        floor_fraction: float = 0.5,
        mixed: bool = True,
        completion_exponent: float = 2.0,
        ceiling: str = "remaining",
        horizon_s: float | None = None,
        exchange: bool = True,
        per_type_bounds: bool = True,
        finish_weight: float = 0.1,
    ) -> None:
        self._pass = PrimalDual(
            floor_fraction=floor_fraction,
            mixed=mixed,
            completion_exponent=completion_exponent,
            ceiling=ceiling,
            horizon_s=horizon_s,
            exchange=exchange,
            per_type_bounds=per_type_bounds,
            finish_weight=finish_weight,
        )
        self.last_decisions: dict[int, Decision] = {}

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        self._pass.now = now
        free = FreeGpus(snapshot.cluster)
        allocations, rest = keep_pinned(snapshot, free)
        placed, reasons, decisions, _ = self._pass.run(snapshot, free, rest)
        allocations.update(placed)
        self.last_decisions = decisions
        return Plan(allocations, reasons)


#: Variants: this project's tuned prices, or the paper's (see :func:`make`).
VARIANTS = ("default", "paper")


def make(
    *,
    variant: str = "default",
    floor_fraction: float = 0.5,
    mixed: bool = True,
    completion_exponent: float = 2.0,
    ceiling: str | None = None,
    horizon_s: float | None = None,
    exchange: bool = True,
    per_type_bounds: bool | None = None,
    finish_weight: float = 0.1,
) -> HadarPolicy:
    """A Hadar policy. ``variant="paper"`` bounds prices as the paper does: the round's
    highest utility as the fixed ceiling and one price range for all GPU types; a
    parameter given explicitly wins over the variant's value."""
    if variant not in VARIANTS:
        raise ValueError(f"hadar variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    paper = variant == "paper"
    return HadarPolicy(
        floor_fraction=floor_fraction,
        mixed=mixed,
        completion_exponent=completion_exponent,
        ceiling=ceiling if ceiling is not None else ("round" if paper else "remaining"),
        horizon_s=horizon_s,
        exchange=exchange,
        per_type_bounds=per_type_bounds if per_type_bounds is not None else not paper,
        finish_weight=finish_weight,
    )
