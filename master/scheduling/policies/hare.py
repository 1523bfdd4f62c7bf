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

With ``variant="paper"`` a job's W workers are the paper's independent tasks, which meet
only at the end of an iteration: they may run on GPUs of different types at once, each
at its own GPU's pace. The job, in least-attained-service order, fills its W tasks from
its preferred type (as above) and then the next types in that order, so it runs as soon
as W GPUs of any allowed types are free; the batch is split in proportion to each GPU's
speed, so the job's rate is the sum of its tasks' rates (the mean pace of its GPUs, as
:func:`master.scheduling.rates.copy_throughput` has it). With fewer than W allowed GPUs
free it folds the W tasks onto W/k of them, k the smallest divisor of W that fits (at most
``max_fold`` when given), each GPU running k tasks one after another.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

from master.scheduling.placement import FreeGpus
from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.policies._speeds import (
    allocation_on,
    allocation_rate,
    cluster_types,
    current_usable,
    keep_pinned,
    type_counts,
)
from master.scheduling.rates import fastest_alone_on
from master.scheduling.views import JobView, Snapshot

NAME = "hare"

VARIANTS = ("default", "paper")

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


def fill_tasks(tasks: int, prefs: Sequence[str], room: Mapping[str, int]) -> dict[str, int]:
    """GPU type -> how many of ``tasks`` GPUs to take there: as many as ``room`` has on
    the first type of ``prefs``, then the next, until all are placed (fewer if room runs
    out)."""
    counts: dict[str, int] = {}
    left = tasks
    for t in prefs:
        k = min(room.get(t, 0), left)
        if k > 0:
            counts[t] = k
            left -= k
    return counts


def fold_factor(num_tasks: int, free: int, max_fold: int) -> int | None:
    """Smallest k <= ``max_fold`` dividing ``num_tasks`` such that ``num_tasks / k`` GPUs
    fit in ``free`` (1: no folding needed), or None when none does."""
    for k in range(1, min(max_fold, num_tasks) + 1):
        if num_tasks % k == 0 and num_tasks // k <= free:
            return k
    return None


def alone_bound(snapshot: Snapshot, job: JobView) -> float:
    """The fastest the job could run alone as one copy on this cluster's GPUs.

    The simulator's per-job lower bound assumes no allocation beats this; a folded copy
    spanning types could (its fastest type may have fewer GPUs than the copy).
    """
    capacity = snapshot.cluster.capacity_by_type()
    return max(
        (
            fastest_alone_on(snapshot.throughput, job.job_type, job.num_gpus, t, count)
            for t, count in capacity.items()
            if count > 0 and job.allows(t)
        ),
        default=0.0,
    )


class HarePolicy:
    name = NAME

    def __init__(
        self,
        *,
        queue_thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
        max_fold: int | None = None,
        variant: str = "default",
    ) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"hare variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
        thresholds = tuple(float(t) for t in queue_thresholds)
        if any(t <= 0 for t in thresholds) or list(thresholds) != sorted(set(thresholds)):
            raise ValueError(f"queue_thresholds must be positive and ascending: {thresholds}")
        if max_fold is not None and (max_fold < 1 or max_fold & (max_fold - 1)):
            raise ValueError(f"max_fold must be a power of two >= 1, got {max_fold}")
        self.variant = variant
        self._thresholds = thresholds
        # Unset: no folding by default; the paper folds as far as a job's task count allows.
        self._max_fold = max_fold if max_fold is not None else 1
        self._fold_limit = max_fold

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
            if self.variant == "paper":
                alloc = self._place_tasks(snapshot, job, prefs, free)
            else:
                alloc = self._place(snapshot, job, prefs, free, self._max_fold)
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
            if self.variant == "paper" and (
                alloc.folded or len(type_counts(snapshot, alloc.slots)) > 1
            ):
                reasons[job.id] = describe_tasks(snapshot, job, alloc)
        return Plan(allocations, reasons)

    def _place(
        self,
        snapshot: Snapshot,
        job: JobView,
        prefs: list[str],
        free: FreeGpus,
        max_fold: int,
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
        if not job.preemptible:
            max_fold = 1
        while fold <= max_fold and job.num_gpus % fold == 0:
            n = job.num_gpus // fold
            for t in prefs:
                slots: tuple[GpuSlot, ...] | None = free.take(n, t)
                if slots is not None:
                    return allocation_on(snapshot, job, slots, accumulation_steps=fold)
            fold *= 2
        return None

    def _place_tasks(
        self, snapshot: Snapshot, job: JobView, prefs: list[str], free: FreeGpus
    ) -> Allocation | None:
        """The paper's task placement: the job's W tasks on the free GPUs of ``prefs``,
        best type first, folded onto fewer GPUs when fewer than W are free."""
        tasks = job.num_gpus
        room = {t: free.count(t) for t in prefs}
        # Folding needs the runtime's gradient accumulation: managed (preemptible) jobs.
        limit = (self._fold_limit or tasks) if job.preemptible else 1
        fold = fold_factor(tasks, sum(room.values()), limit)
        if fold is None:
            return None
        counts = fill_tasks(tasks // fold, prefs, room)
        current = job.current
        if (
            current is not None
            and current.num_copies == 1
            and current.shared_with is None
            and current.accumulation_steps == fold
            and current_usable(snapshot, job)
            and type_counts(snapshot, current.slots) == counts
            and free.take_slots(current.slots)
        ):
            return current
        slots: list[GpuSlot] = []
        for t, k in counts.items():
            got = free.take(k, t)
            if got is None:  # pragma: no cover - counts are within the free counts
                raise AssertionError(f"{k} {t} GPUs counted free but not free")
            slots.extend(got)
        alloc = allocation_on(snapshot, job, slots, accumulation_steps=fold)
        if len(counts) == 1:
            return alloc
        # Each GPU splits its share into `fold` micro-batches, so it needs that many
        # samples; and a copy faster than the job could ever run alone would break the
        # simulator's lower bound. Either way the job falls back to one type.
        too_fast = allocation_rate(snapshot, job, alloc) > alone_bound(snapshot, job) * (1 + 1e-9)
        if too_fast or min(alloc.batch_shares) < fold:
            free.release(slots)
            return self._place(snapshot, job, prefs, free, limit)
        return alloc


def describe_tasks(snapshot: Snapshot, job: JobView, alloc: Allocation) -> str:
    """Where the job's tasks run, for a placement across types or folded."""
    gpus = " + ".join(f"{k} {t}" for t, k in type_counts(snapshot, alloc.slots).items())
    text = f"{job.num_gpus} tasks on {gpus}"
    if alloc.folded:
        text += f", {alloc.accumulation_steps} per GPU in turn"
    return text


def make(
    *,
    queue_thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    max_fold: int | None = None,
    variant: str = "default",
) -> HarePolicy:
    """A Hare policy. ``variant="paper"`` places a job's tasks across GPU types and folds
    them onto fewer GPUs when too few are free (``max_fold``, when given, still caps the
    folding)."""
    return HarePolicy(queue_thresholds=queue_thresholds, max_fold=max_fold, variant=variant)
