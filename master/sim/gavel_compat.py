"""Gavel-compatible simulation: ``hctl simulate --gavel-compat``.

Reproduces the mechanics of Gavel's own simulator (Narayanan et al., OSDI 2020), so that
a policy Gavel also has gives Gavel's figures on the same trace. Found by running both
simulators side by side and comparing their round-by-round allocations; what each rule
changes is in docs/simulator.md ("Gavel-compatible mode").

The simulator side (``SimConfig(gavel_compat=True)``, :mod:`master.sim.engine`):

- servers of one GPU each (Gavel's driver default), and a job's speed is the table's
  figure for its GPU count on one type whatever its placement (Gavel never reads the
  ``*_unconsolidated`` figures while simulating);
- a job scheduled for a round runs ``floor(throughput x round)`` iterations (fewer when
  fewer remain) and holds its GPUs for exactly the time they take; the round ends when the
  last job scheduled in it stops, and with no job scheduled the clock jumps to the next
  arrival;
- a lease whose iterations, split evenly over the job's GPUs, leave a GPU without one
  fails (:func:`lease_fails`); after :data:`MAX_FAILED_LEASES` in a row the job is dropped
  and its JCT left out of the averages, as in Gavel's figures;
- every move the plan makes is carried out (no hysteresis).

The policy side (:class:`GavelRounds`): Gavel's rounds turn an allocation (the time
fraction ``x[j][t]`` each job should spend on each GPU type) into leases:

- the allocation is recomputed only when the set of jobs changed and at least
  ``reset_interval_s`` (1920 s) passed since the last recompute; Gavel also recomputes
  whenever its last recompute happened at time 0, and sets that time to 0 when nothing
  ran and no arrival is left;
- a job that arrived after the last recompute has no allocation and is not run at all;
  the GPUs the round would give it stay idle;
- priority of (job, type) = ``x / fraction``, ``fraction`` being the job's time on the
  type over all jobs' time on it since the last recompute, each job starting at half a
  round on every type; ties go to the larger accumulated deficit (time owed minus time
  received, summed over recomputes), then the larger ``x``;
- types are visited in a fixed order (fastest first) for the heterogeneity-aware
  policies and in a seeded random order for the others; within a type by descending
  priority, each job taking the first type where its GPU count still fits; FIFO skips
  (job, type) pairs of priority 0;
- a job staying on its type keeps its GPUs.

The allocation comes from the Hadar policy that implements Gavel's: ``fifo`` (Gavel's
``fifo``: :class:`~master.scheduling.policies._gavel_fifo.GavelFifo` assigns the types),
``las`` (Gavel's ``max_min_fairness``: the max-min LP with every throughput 1; with
``objective=finish_time_fairness`` its ``finish_time_fairness``) and ``gavel`` (Gavel's
``max_min_fairness_perf``: the max-min LP on real throughputs; with
``objective=finish_time_fairness`` its ``finish_time_fairness_perf``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from typing import Any

from master.scheduling.placement import FreeGpus
from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.policies._gavel_fifo import GavelFifo
from master.scheduling.policy import Policy, make_policy
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import JobView, Snapshot
from master.sim.gavel_allocations import (
    AllocationError,
    Fractions,
    finish_time_fair_fractions,
    isolated_fractions,
    max_min_fractions,
)

#: Gavel's simulator recomputes its allocation at most this often (seconds).
RESET_INTERVAL_S = 1920.0
#: Gavel gives up on a job after this many failed leases in a row.
MAX_FAILED_LEASES = 5
#: A job with no time yet on a type it is allocated gets this priority times its share.
_UNSEEN_PRIORITY = 1e9
#: Gavel's name for each Hadar policy that implements one of its policies.
GAVEL_NAMES: Mapping[str, str] = {
    "fifo": "fifo",
    "las": "max_min_fairness",
    "gavel": "max_min_fairness_perf",
}
#: With ``objective=finish_time_fairness``: ``las`` runs Gavel's ``finish_time_fairness``,
#: ``gavel`` its ``finish_time_fairness_perf``.
OBJECTIVES = ("max_min_fairness", "finish_time_fairness")

#: Computes the allocation (every job's time fraction per GPU type) for a snapshot.
Allocator = Callable[[Snapshot, float], Fractions]


def compat_throughput(model: ThroughputModel, job_type: str, gpu_type: str, n: int) -> float:
    """Iterations/s of a job on ``n`` GPUs of ``gpu_type`` as Gavel's simulator counts them:
    the consolidated figure, wherever the GPUs are."""
    return model.throughput(job_type, gpu_type, n)


def lease_fails(iterations: float, num_gpus: int) -> bool:
    """Whether Gavel counts a lease of ``iterations`` on ``num_gpus`` GPUs as failed: it
    splits the iterations evenly over the GPUs, rounding down, and a GPU given none
    fails the lease. So a job with fewer iterations left than GPUs never finishes; after
    :data:`MAX_FAILED_LEASES` it is dropped, and its JCT is left out of the average."""
    return iterations < num_gpus


def round_iterations(rate: float, remaining: float, round_s: float) -> float:
    """Iterations a job scheduled for a round runs in it: whole iterations that fit."""
    if rate <= 0:
        return 0.0
    return min(remaining, float(math.floor(rate * round_s)))


def _throughputs(
    snapshot: Snapshot, *, agnostic: bool, reference: bool = False
) -> dict[tuple[int, str], float]:
    """Each job's throughput per allowed type: the table's; 1 everywhere (``agnostic``);
    or its figure on the fastest type everywhere (``reference``, Gavel's V100 figure)."""
    capacity = snapshot.cluster.capacity_by_type()
    model = snapshot.throughput
    fastest = max(capacity, key=lambda t: (model.speed(t), t))
    thr: dict[tuple[int, str], float] = {}
    for job in snapshot.jobs:
        same = compat_throughput(model, job.job_type, fastest, job.num_gpus)
        for t in capacity:
            if not job.allows(t):
                continue
            rate = compat_throughput(model, job.job_type, t, job.num_gpus)
            if rate > 0:
                thr[(job.id, t)] = 1.0 if agnostic else same if reference else rate
    return thr


def max_min_allocator(*, agnostic: bool) -> Allocator:
    """Gavel's ``max_min_fairness`` (``agnostic``: every throughput 1) or
    ``max_min_fairness_perf``."""

    def allocate(snapshot: Snapshot, now: float) -> Fractions:
        capacity = snapshot.cluster.capacity_by_type()
        thr = _throughputs(snapshot, agnostic=agnostic)
        return max_min_fractions(snapshot.jobs, capacity, thr)

    return allocate


def finish_time_fair_allocator(*, agnostic: bool = False) -> Allocator:
    """Gavel's ``finish_time_fairness_perf``, or with ``agnostic`` its
    ``finish_time_fairness``, which plans as if every type ran a job at its V100 (fastest
    type's) speed. A job's isolated finish time counts the work it did since the previous
    recompute at its isolated speed then, as Gavel's does."""
    isolated_done: dict[int, float] = {}  # seconds of isolated-share work done so far
    last: dict[int, tuple[float, float]] = {}  # job -> (remaining, isolated rate) then

    def allocate(snapshot: Snapshot, now: float) -> Fractions:
        capacity = snapshot.cluster.capacity_by_type()
        thr = _throughputs(snapshot, agnostic=False, reference=agnostic)
        shares = isolated_fractions(snapshot.jobs, capacity)
        remaining: dict[int, float] = {}
        isolated_s: dict[int, float] = {}
        rates: dict[int, float] = {}
        for job in snapshot.jobs:
            left = job.total_iterations - job.iterations_done
            rate = sum(thr.get((job.id, t), 0.0) * x for t, x in shares[job.id].items())
            before = last.get(job.id)
            if before is not None and before[1] > 0:
                isolated_done[job.id] = isolated_done.get(job.id, 0.0) + (
                    (before[0] - left) / before[1]
                )
            remaining[job.id] = left
            rates[job.id] = rate
            isolated_s[job.id] = isolated_done.get(job.id, 0.0) + (
                left / rate if rate > 0 else math.inf
            )
        for gone in [j for j in isolated_done if j not in remaining]:
            del isolated_done[gone]
        last.clear()
        last.update({j: (remaining[j], rates[j]) for j in remaining})
        try:
            return finish_time_fair_fractions(
                snapshot.jobs,
                capacity,
                thr,
                since_arrival={job.id: now - job.arrival_time for job in snapshot.jobs},
                remaining=remaining,
                isolated_s=isolated_s,
            )
        except AllocationError:
            # Gavel falls back to the isolated shares when its solver finds nothing.
            return shares

    return allocate


def fifo_allocator(seed: int) -> Allocator:
    """Gavel's ``fifo``: each admitted job gets all of its time on one type."""
    core = GavelFifo(random.Random(seed), 0.0)

    def allocate(snapshot: Snapshot, now: float) -> Fractions:
        types = core.assign_types(snapshot)
        return {job.id: ({types[job.id]: 1.0} if job.id in types else {}) for job in snapshot.jobs}

    return allocate


class GavelRounds:
    """Gavel's round mechanism over an allocation (see the module docstring)."""

    def __init__(
        self,
        name: str,
        allocate: Allocator,
        *,
        shuffle_types: bool,
        seed: int = 0,
        skip_zero_priority: bool = False,
        reset_interval_s: float = RESET_INTERVAL_S,
    ) -> None:
        if reset_interval_s < 0:
            raise ValueError("reset_interval_s must be >= 0")
        self.name = name
        self._allocate = allocate
        # Gavel seeds its type shuffler with seed + 5: the same seed gives its type orders.
        self._shuffle = random.Random(seed + 5) if shuffle_types else None
        self._skip_zero = skip_zero_priority
        self._reset_interval = reset_interval_s
        self._allocation: Fractions = {}
        self._job_time: dict[int, dict[str, float]] = {}
        self._worker_time: dict[str, float] = {}
        self._deficit: dict[str, dict[int, float]] = {}
        self._last_reset = 0.0
        self._need_update = False
        # Last round's leases: job -> (type, end time, failed).
        self._ran: dict[int, tuple[str, float, bool]] = {}
        # Gavel measures a lease from the end of the previous round that ran anything (0
        # before the first), so after an idle gap a lease counts the gap too.
        self._round_start_ref = 0.0
        self._planned_at: float | None = None
        self._last_ran: dict[int, tuple[str, float, bool]] = {}
        self._planned_for: frozenset[int] = frozenset()
        self.recomputes = 0

    @property
    def allocation(self) -> Mapping[int, Mapping[str, float]]:
        return self._allocation

    def _reset(self, now: float, types: list[str], half: float) -> None:
        elapsed = now - self._last_reset
        for t in types:
            self._worker_time[t] = 0.0
            owed = self._deficit.setdefault(t, {})
            for job_id, per_type in self._job_time.items():
                received = per_type[t] - half
                share = self._allocation.get(job_id, {}).get(t, 0.0)
                owed[job_id] = owed.get(job_id, 0.0) + share * elapsed - received
                per_type[t] = half
                self._worker_time[t] += half
        self._last_reset = now

    def priority(self, job_id: int, gpu_type: str, rate: float) -> float:
        if job_id not in self._allocation:
            return 0.0
        share = self._allocation[job_id].get(gpu_type, 0.0)
        if share == 0.0 or rate == 0.0:
            return 0.0
        total = self._worker_time.get(gpu_type, 0.0)
        fraction = self._job_time[job_id][gpu_type] / total if total != 0.0 else 0.0
        return share / fraction if fraction > 0.0 else share * _UNSEEN_PRIORITY

    def _emptied_since_last_plan(self, snapshot: Snapshot) -> bool:
        """Whether every job of the last plan finished and the cluster then stood empty
        until the first of this plan's jobs arrived."""
        if self._planned_at is None or not self._planned_for:
            return False
        if any(job.id in self._planned_for for job in snapshot.jobs):
            return False
        last_end = max((end for _, end, _ in self._last_ran.values()), default=self._planned_at)
        return min(job.arrival_time for job in snapshot.jobs) > last_end

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        cluster = snapshot.cluster
        model = snapshot.throughput
        capacity = cluster.capacity_by_type()
        types = [t for t in sorted(capacity, key=lambda t: (-model.speed(t), t)) if capacity[t]]
        half = snapshot.round_seconds / 2.0
        jobs = snapshot.jobs_by_id()
        # What last round's leases ran, credited as Gavel credits a finished lease; a
        # failed lease is not credited and asks for a recompute.
        for job_id, (t, end, failed) in self._ran.items():
            if failed:
                self._need_update = True
                continue
            seconds = end - self._round_start_ref
            self._worker_time[t] = self._worker_time.get(t, 0.0) + seconds
            if job_id in self._job_time:
                self._job_time[job_id][t] += seconds
        if self._ran:
            self._round_start_ref = max(end for _, end, _ in self._ran.values())
        nothing_ran = not self._ran
        self._last_ran = self._ran
        for gone in [j for j in self._job_time if j not in jobs]:
            del self._job_time[gone]
            for owed in self._deficit.values():
                owed.pop(gone, None)
            self._need_update = True
        for job in snapshot.jobs:
            if job.id not in self._job_time:
                self._job_time[job.id] = dict.fromkeys(capacity, half)
                for t in capacity:
                    self._deficit.setdefault(t, {})[job.id] = 0.0
                self._need_update = True
        if nothing_ran and self._planned_at == now:
            # Nothing ran and the clock did not move, so no arrival is left: Gavel then
            # resets its last recompute time to 0, which makes the next one due.
            self._last_reset = 0.0
        due = now - self._last_reset >= self._reset_interval or self._last_reset == 0.0
        if self._need_update and due:
            self._reset(now, list(capacity), half)
            self._allocation = self._allocate(snapshot, now)
            self.recomputes += 1
            self._need_update = False

        rates = {
            (job.id, t): compat_throughput(model, job.job_type, t, job.num_gpus)
            if job.allows(t)
            else 0.0
            for job in snapshot.jobs
            for t in types
        }
        order = list(types)
        if self._shuffle is not None:
            if self._emptied_since_last_plan(snapshot):
                # Gavel also plans (and shuffles) at the moment its last job finishes.
                self._shuffle.shuffle(list(types))
            self._shuffle.shuffle(order)
        self._planned_for = frozenset(jobs)
        self._planned_at = now
        queue: list[tuple[JobView, str, float]] = []
        for t in order:
            entries = [
                (
                    self.priority(job.id, t, rates[(job.id, t)]),
                    self._deficit.get(t, {}).get(job.id, 0.0),
                    self._allocation.get(job.id, {}).get(t, 0.0),
                    job,
                )
                for job in snapshot.jobs
            ]
            # A stable sort, so equal keys stay in job order as in Gavel's queue.
            entries.sort(key=lambda e: (e[0], e[1], e[2]), reverse=True)
            queue += [(e[3], t, e[0]) for e in entries]
        left = dict(capacity)
        chosen: dict[int, str] = {}
        for job, t, prio in queue:
            if left.get(t, 0) == 0 or job.id in chosen or rates[(job.id, t)] <= 0:
                continue
            if self._skip_zero and prio <= 0.0:
                continue
            if job.num_gpus > left[t]:
                continue
            left[t] -= job.num_gpus
            chosen[job.id] = t
        return self._place(snapshot, chosen, rates, now)

    def _place(
        self,
        snapshot: Snapshot,
        chosen: dict[int, str],
        rates: dict[tuple[int, str], float],
        now: float,
    ) -> Plan:
        cluster = snapshot.cluster
        jobs = snapshot.jobs_by_id()
        free = FreeGpus(cluster)
        allocations: dict[int, Allocation] = {}
        # A job without an allocation holds its GPUs in the packing and idles them.
        runnable = [j for j in chosen if j in self._allocation]
        runnable.sort(key=lambda j: (-jobs[j].num_gpus, j))
        moving: list[int] = []
        for job_id in runnable:
            current = jobs[job_id].current
            if (
                current is not None
                and all(cluster.gpu_type(s) == chosen[job_id] for s in current.slots)
                and free.take_slots(current.slots)
            ):
                allocations[job_id] = current
            else:
                moving.append(job_id)
        for job_id in moving:
            job = jobs[job_id]
            slots: tuple[GpuSlot, ...] | None = free.take(job.num_gpus, chosen[job_id])
            if slots is not None:
                allocations[job_id] = Allocation.on(slots, job.batch_size)
        self._ran = {}
        for job_id in allocations:
            job = jobs[job_id]
            t = chosen[job_id]
            rate = rates[(job_id, t)]
            steps = round_iterations(
                rate, job.total_iterations - job.iterations_done, snapshot.round_seconds
            )
            end = now + (steps / rate if rate > 0 else 0.0)
            self._ran[job_id] = (t, end, lease_fails(steps, job.num_gpus))
        reasons = {
            job.id: (
                "waiting: no allocation yet (Gavel recomputes it at most every "
                f"{self._reset_interval:.0f} s)"
                if job.id not in self._allocation
                else "waiting: other jobs are further below their share"
            )
            for job in snapshot.jobs
            if job.id not in allocations
        }
        return Plan(allocations, reasons)


def compat_policy(name: str, params: Mapping[str, Any], *, seed: int) -> Policy:
    """The policy ``name`` as ``--gavel-compat`` runs it: Gavel's rounds over the matching
    allocation for the policies Gavel has (:data:`GAVEL_NAMES`), the policy itself for
    the others."""
    if name not in GAVEL_NAMES:
        return make_policy(name, **params)
    extra = dict(params)
    extra.pop("seed", None)
    reset = float(extra.pop("min_recompute_s", RESET_INTERVAL_S))
    objective = str(extra.pop("objective", "max_min_fairness")) if name != "fifo" else ""
    if extra:
        raise ValueError(
            f"--gavel-compat: policy {name!r} takes only seed, min_recompute_s"
            + (" and objective" if name != "fifo" else "")
            + f" here, not {', '.join(sorted(extra))}"
        )
    if name != "fifo" and objective not in OBJECTIVES:
        raise ValueError(
            f"{name}.objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}"
        )
    if name == "fifo":
        return GavelRounds(
            name,
            fifo_allocator(seed),
            shuffle_types=True,
            seed=seed,
            skip_zero_priority=True,
            reset_interval_s=reset,
        )
    if name == "las":
        return GavelRounds(
            name,
            finish_time_fair_allocator(agnostic=True)
            if objective == "finish_time_fairness"
            else max_min_allocator(agnostic=True),
            shuffle_types=True,
            seed=seed,
            reset_interval_s=reset,
        )
    allocate = (
        finish_time_fair_allocator()
        if objective == "finish_time_fairness"
        else max_min_allocator(agnostic=False)
    )
    return GavelRounds(name, allocate, shuffle_types=False, seed=seed, reset_interval_s=reset)
