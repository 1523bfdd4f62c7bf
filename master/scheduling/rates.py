"""Predicted speed of a job on a concrete allocation.

Shared by policies, the plan diff and the simulator so that all three agree on what an
allocation is worth.
"""

from __future__ import annotations

from collections.abc import Sequence

from master.scheduling.plan import Allocation, GpuSlot
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView


def copy_throughput(
    model: ThroughputModel,
    cluster: ClusterView,
    job_type: str,
    copy: Sequence[GpuSlot],
    shares: Sequence[int] | None = None,
) -> float:
    """Iterations/s of one copy (one synchronous data-parallel group) on ``copy``.

    On one GPU type: the profiled throughput for that many GPUs, consolidated when all
    GPUs are on one server, else the spread figure. Across types: every worker must finish
    its share of the batch before the iteration ends, so the iteration takes as long as
    the slowest worker; with an even split that is the slowest type's pace, with shares
    proportional to speed all types finish together.
    """
    n = len(copy)
    if n == 0:
        return 0.0
    types = [cluster.gpu_type(slot) for slot in copy]
    consolidated = len({slot.node for slot in copy}) == 1
    distinct = set(types)
    if len(distinct) == 1:
        return model.throughput(job_type, types[0], n, consolidated=consolidated)
    # Whole-job iterations/s if all n GPUs were of type t; a worker of type t handling the
    # even share batch/n needs 1/rate[t] seconds, and share s takes s/(batch/n) times that.
    rate = {t: model.throughput(job_type, t, n, consolidated=False) for t in distinct}
    if shares is None:
        shares = [1] * n
    even = sum(shares) / n
    worst = max(share / even / rate[t] for share, t in zip(shares, types, strict=True))
    return 1.0 / worst if worst > 0 else 0.0


def allocation_throughput(
    model: ThroughputModel, cluster: ClusterView, job_type: str, alloc: Allocation
) -> float:
    """Iterations/s of the job on ``alloc``: the sum over its copies (HadarE copies each
    make their own progress; the caller applies any averaging efficiency). A folded
    allocation (each GPU computing k logical workers in turn) takes k times as long per
    iteration as the same GPUs running one worker each."""
    total = sum(
        copy_throughput(model, cluster, job_type, copy, shares)
        for copy, shares in zip(alloc.copies, alloc.shares_per_copy(), strict=True)
    )
    return total / alloc.accumulation_steps if alloc.folded else total


def fastest_alone_on(
    model: ThroughputModel, job_type: str, num_gpus: int, gpu_type: str, count: int
) -> float:
    """Upper bound on the speed of a job of ``num_gpus`` workers using at most ``count``
    GPUs of ``gpu_type`` (the simulator's per-job lower bound is built from it).

    Covers every way an allocation can run a job of n workers: n GPUs of the type
    (consolidated or spread), a mixed-type copy (no faster than n spread GPUs of its
    fastest type), or the n workers folded onto m GPUs (m dividing n), which runs at
    the speed of m GPUs divided by n/m.
    """
    n = num_gpus
    best = 0.0
    for consolidated in (True, False):
        best = max(best, model.throughput(job_type, gpu_type, n, consolidated=consolidated))
        for m in range(1, min(n, count) + 1):
            if n % m == 0:
                rate = model.throughput(job_type, gpu_type, m, consolidated=consolidated)
                best = max(best, rate * m / n)
    return best


def speed_weights(
    model: ThroughputModel, cluster: ClusterView, job_type: str, slots: Sequence[GpuSlot]
) -> list[float]:
    """Per-GPU batch-split weights proportional to each GPU's speed for ``job_type``."""
    n = len(slots)
    return [
        model.throughput(job_type, cluster.gpu_type(slot), n, consolidated=False) for slot in slots
    ]
