"""Hare: heterogeneity-aware least attained service (HLAS), non-clairvoyant.

Chen et al., "Non-Clairvoyant Scheduling of Distributed Machine Learning With Inter-Job
and Intra-Job Parallelism on Heterogeneous GPUs" (IEEE TCC 2024), the online algorithm.

Job sizes are not used. A job's attained service is normalized work: the GPU-seconds it
received on each type times its speed on that type relative to its slowest type in the
cluster, so an hour on a K80 counts less than an hour on a V100. Jobs fall into queues by
attained service (thresholds ``queue_thresholds`` in normalized GPU-seconds, as Tiresias
discretizes LAS so that jobs with similar service do not overtake each other every
round); a lower queue goes first, arrival order within a queue. Each job in turn takes
the GPU type on which its relative speedup is largest compared with the jobs still
waiting (its speedup on the type divided by their mean speedup there), among the types
with room; when the free GPUs outnumber what the waiting jobs need there is no
competition and it simply takes its fastest type.

Relaxed fixed-scale synchronization: a job keeps its W logical workers and global batch;
when no allowed type has W free GPUs it may run folded on W/k GPUs (k a power of two up
to ``max_fold``), each GPU computing k workers' micro-batches with gradient accumulation,
so it progresses at about 1/k of its speed instead of waiting.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from master.scheduling.placement import FreeGpus
from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.policies._speeds import (
    allocation_on,
    cluster_types,
    current_usable,
    keep_pinned,
)
from master.scheduling.views import JobView, Snapshot

NAME = "hare"

#: Normalized GPU-seconds: one hour, then ten, on the job's slowest type.
DEFAULT_THRESHOLDS: tuple[float, ...] = (3600.0, 36000.0)


def relative_speedups(snapshot: Snapshot, job: JobView) -> dict[str, float]:
    """Type -> the job's speed there over its speed on its slowest type (1 GPU).

    Covers the allowed types of the cluster and every type the job has run on (a type
    since removed from the cluster still weighs the service received there).
    """
    model = snapshot.throughput
    types = {t for t in cluster_types(snapshot.cluster) if job.allows(t)}
    types.update(job.gpu_seconds_by_type)
    rates = {t: model.throughput(job.job_type, t, 1) for t in sorted(types)}
    slowest = min((r for r in rates.values() if r > 0), default=0.0)
    if slowest <= 0:
        return dict.fromkeys(rates, 1.0)
    return {t: r / slowest for t, r in rates.items()}


def normalized_service(snapshot: Snapshot, job: JobView) -> float:
    """GPU-seconds per type weighted by the job's relative speedup on that type."""
    speedups = relative_speedups(snapshot, job)
    return sum(secs * speedups.get(t, 1.0) for t, secs in job.gpu_seconds_by_type.items())


class HarePolicy:
    name = NAME

    def __init__(
        self, *, queue_thresholds: Sequence[float] = DEFAULT_THRESHOLDS, max_fold: int = 1
    ) -> None:
        thresholds = tuple(float(t) for t in queue_thresholds)
        if any(t <= 0 for t in thresholds) or list(thresholds) != sorted(set(thresholds)):
            raise ValueError(f"queue_thresholds must be positive and ascending: {thresholds}")
        if max_fold < 1 or max_fold & (max_fold - 1):
            raise ValueError(f"max_fold must be a power of two >= 1, got {max_fold}")
        self._thresholds = thresholds
        self._max_fold = max_fold

    def queue_of(self, snapshot: Snapshot, job: JobView) -> int:
        return bisect.bisect_right(self._thresholds, normalized_service(snapshot, job))

    def order(self, snapshot: Snapshot, jobs: Sequence[JobView]) -> list[JobView]:
        """Least attained normalized service first (by queue), then arrival."""
        return sorted(jobs, key=lambda j: (self.queue_of(snapshot, j), j.arrival_time, j.id))

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        del now
        cluster = snapshot.cluster
        free = FreeGpus(cluster)
        allocations, rest = keep_pinned(snapshot, free)
        reasons: dict[int, str] = {}
        waiting = self.order(snapshot, rest)
        usable = set(cluster_types(cluster))
        speedups = {
            job.id: {
                t: s
                for t, s in relative_speedups(snapshot, job).items()
                if t in usable and job.allows(t)
            }
            for job in waiting
        }
        # Running totals over the jobs not yet placed, for the comparative advantage.
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        demand = 0
        for job in waiting:
            demand += job.num_gpus
            for t, s in speedups[job.id].items():
                sums[t] = sums.get(t, 0.0) + s
                counts[t] = counts.get(t, 0) + 1
        for job in waiting:
            mine = speedups[job.id]
            if demand <= free.count():
                prefs = sorted(mine, key=lambda t: (-mine[t], t))
            else:
                prefs = sorted(
                    mine, key=lambda t: (-mine[t] * counts[t] / max(sums[t], 1e-12), -mine[t], t)
                )
            alloc = self._place(snapshot, job, prefs, free)
            demand -= job.num_gpus
            for t, s in mine.items():
                sums[t] -= s
                counts[t] -= 1
            if alloc is None:
                reasons[job.id] = (
                    f"waiting: no free GPUs of an allowed type (queue "
                    f"{self.queue_of(snapshot, job)} by normalized attained service)"
                )
                continue
            allocations[job.id] = alloc
        return Plan(allocations, reasons)

    def _place(
        self, snapshot: Snapshot, job: JobView, prefs: list[str], free: FreeGpus
    ) -> Allocation | None:
        current = job.current
        if (
            current is not None
            and current.num_copies == 1
            and current.shared_with is None
            and current_usable(snapshot, job)
            and prefs
            and {snapshot.cluster.gpu_type(s) for s in current.slots} == {prefs[0]}
            and (current.num_gpus == job.num_gpus or free.count(prefs[0]) < job.num_gpus)
            and free.take_slots(current.slots)
        ):
            return current
        fold = 1
        # Folding needs the runtime's gradient accumulation: managed (preemptible) jobs.
        max_fold = self._max_fold if job.preemptible else 1
        while fold <= max_fold and job.num_gpus % fold == 0:
            n = job.num_gpus // fold
            for t in prefs:
                slots: tuple[GpuSlot, ...] | None = free.take(n, t)
                if slots is not None:
                    return allocation_on(snapshot, job, slots, accumulation_steps=fold)
            fold *= 2
        return None


def make(
    *, queue_thresholds: Sequence[float] = DEFAULT_THRESHOLDS, max_fold: int = 1
) -> HarePolicy:
    return HarePolicy(queue_thresholds=queue_thresholds, max_fold=max_fold)
