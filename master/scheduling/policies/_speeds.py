"""Speed lookups and speed-aware allocations shared by the research policies.

All of them reason about a job's iterations per second on a GPU type at its own scale,
and several build allocations that span GPU types; those must split the global batch in
proportion to each GPU's speed so that every worker finishes an iteration together (the
iteration then runs at the average of the types' paces instead of the slowest one's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

from master.scheduling.placement import FreeGpus
from master.scheduling.plan import Allocation, GpuSlot
from master.scheduling.rates import allocation_throughput, speed_weights
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView, JobView, Snapshot

K = TypeVar("K")
V = TypeVar("V")


def job_rate(
    snapshot: Snapshot, job: JobView, gpu_type: str, *, consolidated: bool = True
) -> float:
    """Iterations/s of ``job`` on ``job.num_gpus`` GPUs of ``gpu_type``."""
    return snapshot.throughput.throughput(
        job.job_type, gpu_type, job.num_gpus, consolidated=consolidated
    )


# The last cluster and its usable GPU types (planning asks for them once per job), as one
# entry so that a thread asking about another cluster meanwhile cannot mix the two.
_last_types: tuple[ClusterView | None, tuple[str, ...]] = (None, ())


def cluster_types(cluster: ClusterView) -> tuple[str, ...]:
    """``cluster.gpu_types``, computed once per cluster object rather than per call."""
    global _last_types
    known, types = _last_types
    if known is not cluster:
        types = cluster.gpu_types
        _last_types = (cluster, types)
    return types


def allowed_types(snapshot: Snapshot, job: JobView) -> list[str]:
    """Usable GPU types this job may run on (its own count need not fit)."""
    types = cluster_types(snapshot.cluster)
    if not job.restricted:
        return list(types)
    return [t for t in types if job.allows(t)]


class _ForModel(Generic[K, V]):
    """Values that hold for one throughput model and cluster, forgotten when asked about
    others (each round reads a new pair). The pair and its values are one entry, read once
    per lookup: a round and a forecast on another thread may ask about different pairs at
    once, and each then fills its own entry."""

    def __init__(self, max_entries: int | None = None) -> None:
        self._max_entries = max_entries
        self._entry: tuple[ThroughputModel | None, ClusterView | None, dict[K, V]] = (
            None,
            None,
            {},
        )

    def values(self, model: ThroughputModel, cluster: ClusterView) -> dict[K, V]:
        entry = self._entry
        if (
            entry[0] is not model
            or entry[1] is not cluster
            or (self._max_entries is not None and len(entry[2]) > self._max_entries)
        ):
            entry = self._entry = (model, cluster, {})
        return entry[2]


# Fastest speeds by job type, GPU count and allowed types (None: all): planning asks for
# every job's each round, and jobs of one type and size are many.
_best_rates: _ForModel[tuple[str, int, tuple[str, ...] | None], float] = _ForModel()


def best_rate(snapshot: Snapshot, job: JobView) -> float:
    """Fastest consolidated speed over allowed types with at least ``num_gpus`` GPUs."""
    rates = _best_rates.values(snapshot.throughput, snapshot.cluster)
    allowed = tuple(allowed_types(snapshot, job)) if job.restricted else None
    key = (job.job_type, job.num_gpus, allowed)
    rate = rates.get(key)
    if rate is None:
        capacity = snapshot.cluster.capacity_by_type()
        rate = rates[key] = max(
            (
                job_rate(snapshot, job, t)
                for t in allowed_types(snapshot, job)
                if capacity.get(t, 0) >= job.num_gpus
            ),
            default=0.0,
        )
    return rate


def single_type_bound(snapshot: Snapshot, job: JobView) -> float:
    """Fastest speed the job can get on one GPU type that has ``num_gpus`` GPUs.

    Mixed-type allocations are only used up to this speed: they put GPUs that are free
    now to work when the job's best type is busy, but are not used to beat every
    single-type allocation (which needs a type with fewer GPUs than the job), because the
    simulator's per-job lower bound, alone on its fastest type, assumes one type.
    """
    capacity = snapshot.cluster.capacity_by_type()
    best = 0.0
    for t in allowed_types(snapshot, job):
        if capacity.get(t, 0) >= job.num_gpus:
            best = max(
                best,
                job_rate(snapshot, job, t, consolidated=True),
                job_rate(snapshot, job, t, consolidated=False),
            )
    return best


def remaining_seconds(snapshot: Snapshot, job: JobView, remaining: float | None = None) -> float:
    """Time to finish ``remaining`` iterations (default: the job's own) at its best speed."""
    rate = best_rate(snapshot, job)
    left = job.remaining_iterations if remaining is None else remaining
    return left / rate if rate > 0 else float("inf")


def allocation_on(
    snapshot: Snapshot,
    job: JobView,
    slots: Sequence[GpuSlot],
    *,
    accumulation_steps: int = 1,
    shared_with: int | None = None,
) -> Allocation:
    """One copy on ``slots``; the batch is split in proportion to speed across GPU types."""
    cluster = snapshot.cluster
    types = {cluster.gpu_type(slot) for slot in slots}
    weights = (
        speed_weights(snapshot.throughput, cluster, job.job_type, slots) if len(types) > 1 else None
    )
    return Allocation.on(
        slots,
        job.batch_size,
        weights=weights,
        accumulation_steps=accumulation_steps,
        shared_with=shared_with,
    )


# Speeds of allocations, by job type and the allocation's id: a running job's allocation is
# the same object round after round, and planning asks for its speed several times. Each
# entry holds its allocation, so that its id is not reused while cached.
_allocation_rates: _ForModel[tuple[str, int], tuple[Allocation, float]] = _ForModel(200_000)


def allocation_rate(snapshot: Snapshot, job: JobView, alloc: Allocation) -> float:
    """Iterations/s of ``job`` on ``alloc`` as the simulator and the plan diff see it."""
    rates = _allocation_rates.values(snapshot.throughput, snapshot.cluster)
    key = (job.job_type, id(alloc))
    cached = rates.get(key)
    if cached is not None and cached[0] is alloc:
        return cached[1]
    rate = allocation_throughput(snapshot.throughput, snapshot.cluster, job.job_type, alloc)
    rates[key] = (alloc, rate)
    return rate


def current_usable(snapshot: Snapshot, job: JobView) -> bool:
    """Whether the GPUs the job holds now are all still usable and of allowed types."""
    if job.current is None:
        return False
    counts = snapshot.cluster.type_counts(job.current)
    if counts is None:
        return False
    return not job.restricted or all(job.allows(t) for t, _ in counts)


def pinned_jobs(snapshot: Snapshot) -> list[JobView]:
    """Running jobs that must keep their GPUs: not preemptible, GPUs still usable."""
    return [
        job
        for job in snapshot.jobs
        if job.current is not None and not job.preemptible and current_usable(snapshot, job)
    ]


def keep_pinned(snapshot: Snapshot, free: FreeGpus) -> tuple[dict[int, Allocation], list[JobView]]:
    """Take from ``free`` the current GPUs of every pinned job that finds them all free.

    Returns those jobs' allocations and, in snapshot order, all other jobs; a pinned job
    whose GPUs are not all free any more is among the others and is planned like them.
    """
    kept: dict[int, Allocation] = {}
    for job in pinned_jobs(snapshot):
        assert job.current is not None
        if free.take_slots(job.current.slots):
            kept[job.id] = job.current
    rest = [job for job in snapshot.jobs if job.id not in kept]
    return kept, rest


def type_counts(snapshot: Snapshot, slots: Sequence[GpuSlot]) -> dict[str, int]:
    """GPU type -> how many of ``slots`` are of it."""
    counts: dict[str, int] = {}
    for slot in slots:
        t = snapshot.cluster.gpu_type(slot)
        counts[t] = counts.get(t, 0) + 1
    return counts
