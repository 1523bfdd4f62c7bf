"""Shared engine for the order-based baselines (fifo, srtf, las).

Such a policy only decides an order of jobs and which GPU type a job should use; this
module turns the order into a plan in two passes:

1. selection by GPU counts per type: walk the order, give each job ``num_gpus`` GPUs of
   one allowed type if that many are still unclaimed (a running job first tries to keep
   its current GPUs), else record why it waits; with ``backfill`` false the walk admits
   nobody after the first job that does not fit (strict FIFO);
2. placement: running jobs that keep their GPUs take exactly those, the others take GPUs
   of their chosen type consolidated on as few servers as possible, largest jobs first
   so that they find whole servers.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from master.scheduling.placement import FreeGpus
from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.views import ClusterView, JobView, Snapshot

#: Chooses a GPU type for a job among ``candidates`` (each has enough unclaimed GPUs).
TypeChooser = Callable[[JobView, Sequence[str]], str]


def random_type_chooser(rng: random.Random) -> TypeChooser:
    """Heterogeneity-agnostic: any type that fits, uniformly at random (seeded)."""

    def choose(job: JobView, candidates: Sequence[str]) -> str:
        del job
        return candidates[rng.randrange(len(candidates))]

    return choose


def fastest_type_chooser(snapshot: Snapshot) -> TypeChooser:
    """Heterogeneity-aware: the type on which the job runs fastest."""

    def choose(job: JobView, candidates: Sequence[str]) -> str:
        model = snapshot.throughput
        return max(candidates, key=lambda t: (model.throughput(job.job_type, t, job.num_gpus), t))

    return choose


#: A job chosen to run: the GPUs it keeps (a running job), else the GPU type to place it on.
#: A plain tuple: a round makes one per running job.
_Choice = tuple[JobView, tuple[GpuSlot, ...] | None, str | None]


def current_slots_usable(snapshot: Snapshot, job: JobView) -> bool:
    """Whether every GPU the job holds now is still usable and of an allowed type."""
    if job.current is None:
        return False
    return _current_need(snapshot.cluster, job) is not None


def _current_need(cluster: ClusterView, job: JobView) -> tuple[tuple[str, int], ...] | None:
    """GPUs per type the job holds now, or None if it holds none or any is unusable."""
    if job.current is None:
        return None
    counts = cluster.type_counts(job.current)
    if counts is None or (job.restricted and not all(job.allows(t) for t, _ in counts)):
        return None
    return counts


def _fits(need: tuple[tuple[str, int], ...], unclaimed: dict[str, int]) -> bool:
    """Whether ``unclaimed`` still holds every GPU of ``need``."""
    if len(need) == 1:  # nearly every job: its GPUs are of one type
        ((gpu_type, count),) = need
        return unclaimed.get(gpu_type, 0) >= count
    return all(unclaimed.get(t, 0) >= k for t, k in need)


def greedy_plan(
    snapshot: Snapshot,
    order: Sequence[JobView],
    choose_type: TypeChooser,
    *,
    backfill: bool = True,
    pinned: Sequence[JobView] = (),
    policy_name: str = "",
) -> Plan:
    """Plan ``order`` greedily; ``pinned`` jobs keep their current GPUs unconditionally.

    Pinned jobs are non-preemptible running jobs (or, for a non-preemptive policy, all
    running jobs). A job absent from both sequences gets nothing and no reason.
    """
    cluster = snapshot.cluster
    unclaimed = dict(cluster.capacity_by_type())
    choices: list[_Choice] = []
    reasons: dict[int, str] = {}
    for job in pinned:
        need = _current_need(cluster, job)
        if need is not None and job.current is not None:
            for gpu_type, count in need:
                unclaimed[gpu_type] -= count
            choices.append((job, job.current.slots, None))
    blocked_by: JobView | None = None
    queued = ""  # the reason of every job behind blocked_by, the same for all
    types = sorted(unclaimed)
    largest = max(unclaimed.values(), default=0)
    # Reasons depend only on the job's shape and the unclaimed counts: build each once.
    # (len(choices) changes whenever the unclaimed counts do.)
    reason_cache: dict[tuple[int, frozenset[str], int, int], str] = {}
    for job in order:
        if blocked_by is not None:
            reasons[job.id] = queued
            continue
        if job.num_gpus <= largest:
            need = _current_need(cluster, job) if job.current is not None else None
            if need is not None and job.current is not None and _fits(need, unclaimed):
                for t, k in need:
                    unclaimed[t] -= k
                largest = max(unclaimed.values())
                choices.append((job, job.current.slots, None))
                continue
            candidates = [t for t in types if unclaimed[t] >= job.num_gpus and job.allows(t)]
            if candidates:
                gpu_type = choose_type(job, candidates)
                unclaimed[gpu_type] -= job.num_gpus
                largest = max(unclaimed.values())
                choices.append((job, None, gpu_type))
                continue
        key = (job.num_gpus, job.allowed_gpu_types, largest, len(choices))
        reason = reason_cache.get(key)
        if reason is None:
            reason = waiting_reason(snapshot, job, unclaimed)
            reason_cache[key] = reason
        reasons[job.id] = reason
        if not backfill:
            blocked_by = job
            queued = f"waiting: queued behind job {job.id} ({policy_name})"
    return place_choices(snapshot, choices, reasons)


def waiting_reason(snapshot: Snapshot, job: JobView, unclaimed: dict[str, int]) -> str:
    allowed = [t for t in sorted(unclaimed) if job.allows(t)]
    if not allowed:
        wanted = ", ".join(sorted(job.allowed_gpu_types)) or "any"
        return f"waiting: no usable GPU of an allowed type ({wanted})"
    if all(snapshot.cluster.capacity_by_type().get(t, 0) < job.num_gpus for t in allowed):
        return f"waiting: needs {job.num_gpus} GPUs of one type, no allowed type has that many"
    free = ", ".join(f"{unclaimed[t]} {t}" for t in allowed)
    return f"waiting: needs {job.num_gpus} GPUs of one type; unclaimed this round: {free}"


def place_choices(snapshot: Snapshot, choices: Sequence[_Choice], reasons: dict[int, str]) -> Plan:
    allocations: dict[int, Allocation] = {}
    typed: list[tuple[JobView, str]] = []
    kept = [
        slot
        for job, keep, _ in choices
        if keep is not None and job.current is not None
        for slot in keep
    ]
    usable = snapshot.cluster.usable_by_slot()
    free: FreeGpus | None
    if len(set(kept)) == len(kept) and all(map(usable.__contains__, kept)):
        # No two kept jobs share a GPU and all are usable: each takes its GPUs whatever the
        # order, so they are taken at once, server by server, and only when a job is to be
        # placed anew (in most rounds of a full cluster none is).
        free = None
        taken = True
    else:
        free = FreeGpus(snapshot.cluster)
        taken = False
    for job, keep, chosen in choices:
        if (
            keep is not None
            and job.current is not None
            and (taken or (free is not None and free.take_slots(keep)))
        ):
            allocations[job.id] = job.current
        elif chosen is not None:
            typed.append((job, chosen))
        else:
            # Kept GPUs collided (cannot happen with valid current allocations); re-place.
            counts: dict[str, int] = {}
            for slot in keep or ():
                t = snapshot.cluster.gpu_type(slot)
                counts[t] = counts.get(t, 0) + 1
            typed.append((job, max(counts, key=lambda t: counts[t])))
    typed.sort(key=lambda c: -c[0].num_gpus)
    if typed and free is None:
        free = FreeGpus(snapshot.cluster, kept)
    for job, gpu_type in typed:
        assert free is not None
        slots = free.take(job.num_gpus, gpu_type)
        if slots is None:
            slots = free.take_any(job.num_gpus, {t for t in free.types() if job.allows(t)})
        if slots is None:
            reasons[job.id] = "waiting: GPUs claimed by jobs ahead of it"
            continue
        allocations[job.id] = Allocation.on(slots, job.batch_size)
    return Plan(allocations, reasons)
