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
from dataclasses import dataclass

from master.scheduling.placement import FreeGpus
from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.policies._speeds import (
    allocation_on,
    allocation_rate,
    allowed_types,
    current_usable,
    job_rate,
    pinned_jobs,
    single_type_bound,
    type_counts,
)
from master.scheduling.views import JobView, Snapshot

NAME = "hadar"


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
    """Per-type GPU prices ``low * (high/low) ** (claimed/capacity)`` for one round."""

    __slots__ = ("_capacity", "_claimed", "_free", "_log_ratio", "low")

    def __init__(
        self, capacity: dict[str, int], low: float, high: float, *, free: bool = False
    ) -> None:
        if low <= 0:
            raise ValueError(f"the price floor must be > 0, got {low}")
        self._capacity = capacity
        self._claimed = dict.fromkeys(capacity, 0)
        self._free = free
        self.low = low
        self._log_ratio = math.log(max(high, low) / low)

    def price(self, gpu_type: str, extra: int = 0) -> float:
        """Price of the next GPU of ``gpu_type`` after ``extra`` more are claimed."""
        cap = self._capacity.get(gpu_type, 0)
        if cap <= 0:
            return math.inf
        if self._free:
            return 0.0
        u = min(1.0, (self._claimed[gpu_type] + extra) / cap)
        return self.low * math.exp(self._log_ratio * u)

    def cost(self, gpu_type: str, k: int, already: int = 0) -> float:
        return sum(self.price(gpu_type, already + i) for i in range(k))

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


class PrimalDual:
    """The per-round primal-dual pass, shared by ``hadar`` and ``hadare``."""

    def __init__(self, *, floor_fraction: float = 0.5, mixed: bool = True) -> None:
        if not 0 < floor_fraction <= 1:
            raise ValueError(f"floor_fraction must be in (0, 1], got {floor_fraction}")
        self.floor_fraction = floor_fraction
        self.mixed = mixed

    @staticmethod
    def scale(snapshot: Snapshot, job: JobView) -> float:
        """Utility per iteration/s of speed: ``w * round_s / remaining``."""
        remaining = max(job.remaining_iterations, 1e-9)
        return job.priority * snapshot.round_seconds / remaining

    def run(
        self, snapshot: Snapshot, free: FreeGpus, jobs: list[JobView]
    ) -> tuple[dict[int, Allocation], dict[int, str], dict[int, Decision], Prices]:
        """Place ``jobs`` on ``free`` (mutated); GPUs already taken count as claimed.

        ``L`` and ``U`` come from each job's best option on the GPUs free at the start of
        the pass, so the job with the highest per-GPU utility always has a positive
        payoff on its best option: a lone job never waits.
        """
        capacity = snapshot.cluster.capacity_by_type()
        unpriced = Prices(capacity, 1.0, 1.0, free=True)
        values: dict[int, float] = {}
        for job in jobs:
            option = self.best_option(snapshot, job, free, unpriced)
            values[job.id] = option.utility / job.num_gpus if option is not None else 0.0
        positive = [v for v in values.values() if v > 0]
        low = (min(positive) if positive else 1.0) * self.floor_fraction
        high = max(positive) if positive else low
        prices = Prices(capacity, low, high)
        for t, cap in capacity.items():
            prices.claim(t, cap - free.count(t))
        allocations: dict[int, Allocation] = {}
        reasons: dict[int, str] = {}
        decisions: dict[int, Decision] = {}
        order = sorted(jobs, key=lambda j: (-values[j.id], j.arrival_time, j.id))
        for job in order:
            if values[job.id] <= 0:
                reasons[job.id] = "waiting: not enough free GPUs of allowed types"
                continue
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
            slots = self.take(snapshot, job, option, free)
            for t, k in option.counts.items():
                prices.claim(t, k)
            if job.current is not None and job.current.copies == (slots,):
                allocations[job.id] = job.current
            else:
                allocations[job.id] = allocation_on(snapshot, job, slots)
        return allocations, reasons, decisions, prices

    def best_option(
        self, snapshot: Snapshot, job: JobView, free: FreeGpus, prices: Prices
    ) -> _Option | None:
        """The dual subroutine: the GPU multiset maximizing utility minus price."""
        n = job.num_gpus
        scale = self.scale(snapshot, job)
        types = [t for t in allowed_types(snapshot, job) if free.count(t) > 0]
        kept = self._kept_counts(snapshot, job, free)
        best: _Option | None = None
        for t in types:
            if free.count(t) < n:
                continue
            consolidated = free.max_free_on_one_node(t) >= n
            rate = job_rate(snapshot, job, t, consolidated=consolidated)
            if kept == {t: n} and job.current is not None:
                rate = allocation_rate(snapshot, job, job.current)
            option = _Option({t: n}, scale * rate, prices.cost(t, n), consolidated)
            if best is None or option.utility - option.cost > best.utility - best.cost:
                best = option
        if self.mixed and n > 1 and len(types) > 1 and sum(free.count(t) for t in types) >= n:
            mixed = self._mixed_option(snapshot, job, types, free, prices, scale)
            if mixed is not None and (
                best is None or mixed.utility - mixed.cost > best.utility - best.cost
            ):
                best = mixed
        return best

    def _mixed_option(
        self,
        snapshot: Snapshot,
        job: JobView,
        types: list[str],
        free: FreeGpus,
        prices: Prices,
        scale: float,
    ) -> _Option | None:
        """Greedy GPU-by-GPU choice across types, batch split in proportion to speed.

        With a proportional split the job's speed is the mean, over its GPUs, of each
        type's whole-job speed at this scale, so every GPU adds a fixed value and the
        greedy choice at rising prices is exact for the additive payoff.
        """
        n = job.num_gpus
        per_gpu = {t: scale * job_rate(snapshot, job, t, consolidated=False) / n for t in types}
        counts = dict.fromkeys(types, 0)
        utility = cost = 0.0
        for _ in range(n):
            pick: tuple[float, str] | None = None
            for t in types:
                if counts[t] >= free.count(t):
                    continue
                gain = per_gpu[t] - prices.price(t, counts[t])
                if pick is None or gain > pick[0]:
                    pick = (gain, t)
            if pick is None:
                return None
            t = pick[1]
            utility += per_gpu[t]
            cost += prices.price(t, counts[t])
            counts[t] += 1
        used = {t: k for t, k in counts.items() if k > 0}
        if len(used) < 2:
            return None
        if utility / scale > single_type_bound(snapshot, job) * (1 + 1e-9):
            return None
        return _Option(used, utility, cost, consolidated=False)

    @staticmethod
    def _kept_counts(snapshot: Snapshot, job: JobView, free: FreeGpus) -> dict[str, int] | None:
        current = job.current
        if current is None or current.num_copies != 1 or current.shared_with is not None:
            return None
        if current.folded or not current_usable(snapshot, job):
            return None
        if not all(free.is_free(slot) for slot in current.slots):
            return None
        return type_counts(snapshot, current.slots)

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
        slots: list[GpuSlot] = []
        for t, k in sorted(option.counts.items(), key=lambda e: (-e[1], e[0])):
            got = free.take(k, t)
            if got is None:  # pragma: no cover - the option was built from free counts
                raise AssertionError(f"{k} free {t} GPUs promised but not found")
            slots.extend(got)
        return tuple(slots)


class HadarPolicy:
    name = NAME

    def __init__(self, *, floor_fraction: float = 0.5, mixed: bool = True) -> None:
        self._pass = PrimalDual(floor_fraction=floor_fraction, mixed=mixed)
        self.last_decisions: dict[int, Decision] = {}

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        del now
        free = FreeGpus(snapshot.cluster)
        allocations: dict[int, Allocation] = {}
        pinned = pinned_jobs(snapshot)
        for job in pinned:
            assert job.current is not None
            if free.take_slots(job.current.slots):
                allocations[job.id] = job.current
        pinned_ids = set(allocations)
        rest = [job for job in snapshot.jobs if job.id not in pinned_ids]
        placed, reasons, decisions, _ = self._pass.run(snapshot, free, rest)
        allocations.update(placed)
        self.last_decisions = decisions
        return Plan(allocations, reasons)


def make(*, floor_fraction: float = 0.5, mixed: bool = True) -> HadarPolicy:
    return HadarPolicy(floor_fraction=floor_fraction, mixed=mixed)
