"""SJF-BSBF: shortest job first with best-sharing-benefit-first GPU sharing.

Luo et al., "Scheduling Deep Learning Jobs in Multi-Tenant GPU Clusters via Wise Resource
Sharing" (arXiv 2407.13088).

Non-preemptive: a running job keeps its GPUs until it completes. Waiting jobs go
shortest first (remaining time on their fastest allowed type); each takes free GPUs of
the fastest allowed type that has enough of them. When none has, the job may share the
GPUs of a running job ``b`` (both shareable, same GPU count, all of ``b``'s GPUs of one
type, not already shared). With remaining solo times ``e_a``, ``e_b`` on those GPUs and
co-location slowdowns ``s_a``, ``s_b`` (isolated over co-located throughput, from the
profile's pair figures or measurements), running the pair together until the shorter
finishes and the other then alone gives an average JCT ``co``; running ``b`` then ``a``
gives ``seq = e_b + e_a / 2``. The pair shares only when ``co < seq``, and among the
candidates the one with the largest benefit ``seq - co`` wins. Without a co-location
figure for a pair the policy does not share (no evidence it would pay).

Memory: the sharing job runs a sub-batch ``B/k`` with ``k`` gradient-accumulation steps,
the smallest ``k`` (power of two up to ``max_accumulation``) for which both jobs fit in
the GPU's memory. A job's footprint at sub-batch ``B/k`` is modelled as
``state + (need - state) / k`` with ``state = state_fraction * need`` (weights, gradients
and optimizer state do not shrink with the batch; activations do). When a job's need or a
GPU's memory is unknown (0), the profile's pair figure is the only evidence that the two
fit, as in Gavel's tables where infeasible pairs are zero.

With ``variant="paper"`` the job also chooses when it starts, as the paper picks a pair's
scheduling time point: now, sharing, or alone at the earliest time its GPU count of an
allowed type is released by the running jobs (each holds its GPUs until it completes,
at its current speed). Sharing must beat that start, not only waiting for the partner:
the alternative pair average is ``(e_b + w_a) / 2`` with ``w_a`` the job's completion time
when it starts alone at that point. A later start of the sharing itself is never
better: while the sharer finishes first, delaying it delays only its own completion, and
once the partner would finish first the pair's average is linear in the start time, so
its best is an end point, now or the partner's completion.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from master.scheduling.memory import gpu_memory
from master.scheduling.placement import FreeGpus
from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.policies._speeds import (
    allocation_on,
    allocation_rate,
    allowed_types,
    current_usable,
    job_rate,
    remaining_seconds,
)
from master.scheduling.views import JobView, Snapshot

NAME = "sjf-bsbf"
VARIANTS = ("default", "paper")


def paired_jct(e_a: float, e_b: float, s_a: float, s_b: float) -> float:
    """Average JCT (from now) of ``a`` and ``b`` sharing until the first finishes.

    ``e_*`` are solo remaining times, ``s_*`` >= 1 the co-location slowdowns.
    """
    t_a, t_b = e_a * s_a, e_b * s_b
    if t_a <= t_b:
        # b has done t_a / s_b of its solo work when a finishes, then runs alone.
        return (t_a + t_a + (e_b - t_a / s_b)) / 2.0
    return (t_b + t_b + (e_a - t_b / s_a)) / 2.0


def sequential_jct(e_a: float, e_b: float) -> float:
    """Average JCT (from now) when ``b`` finishes first and ``a`` then runs alone."""
    return (e_b + (e_b + e_a)) / 2.0


@dataclass(frozen=True, slots=True)
class Sharing:
    """A decision to co-locate ``job`` with ``partner`` (recorded for inspection)."""

    job: int
    partner: int
    paired: float
    sequential: float
    accumulation_steps: int

    @property
    def benefit(self) -> float:
        return self.sequential - self.paired


class SjfBsbfPolicy:
    name = NAME

    def __init__(
        self,
        *,
        max_accumulation: int = 8,
        state_fraction: float = 0.35,
        assumed_pair_slowdown: float = 0.0,
        variant: str = "default",
    ) -> None:
        if variant not in VARIANTS:
            raise ValueError(
                f"sjf-bsbf variant must be one of {', '.join(VARIANTS)}, got {variant!r}"
            )
        self.variant = variant
        if max_accumulation < 1:
            raise ValueError(f"max_accumulation must be >= 1, got {max_accumulation}")
        if not 0 <= state_fraction <= 1:
            raise ValueError(f"state_fraction must be in [0, 1], got {state_fraction}")
        if assumed_pair_slowdown != 0 and assumed_pair_slowdown < 1:
            raise ValueError(
                f"assumed_pair_slowdown must be 0 (off) or >= 1, got {assumed_pair_slowdown}"
            )
        self._max_accumulation = max_accumulation
        self._state_fraction = state_fraction
        # Slowdown each job of a pair is assumed to suffer when no co-location figure exists
        # (0: such pairs never share). A cluster whose GPUs are mostly idle time for a single
        # job, like fake GPUs paced on a CPU, can set it close to 1.
        self._assumed_pair_slowdown = assumed_pair_slowdown
        self.last_sharing: list[Sharing] = []

    def footprint(self, job: JobView, accumulation_steps: int) -> int:
        """Bytes per GPU at sub-batch ``B / accumulation_steps`` (0 when unknown)."""
        need = job.memory_bytes_per_gpu
        state = self._state_fraction * need
        return int(state + (need - state) / accumulation_steps)

    def gpu_memory(self, snapshot: Snapshot, alloc: Allocation) -> int:
        """Smallest memory over the allocation's GPUs (0 when unknown)."""
        sizes = []
        for slot in alloc.slots:
            gpu = snapshot.cluster.gpu(slot)
            sizes.append(gpu_memory(gpu.type, gpu.memory_bytes))
        return min(sizes, default=0)

    def accumulation_for(self, job: JobView, resident: JobView, memory: int) -> int | None:
        """Smallest power-of-two ``k`` for which ``job`` at ``B/k`` fits beside ``resident``."""
        if memory <= 0 or job.memory_bytes_per_gpu <= 0 or resident.memory_bytes_per_gpu <= 0:
            return 1
        resident_k = resident.current.accumulation_steps if resident.current else 1
        taken = self.footprint(resident, resident_k)
        k = 1
        while k <= self._max_accumulation:
            if k <= max(1, job.batch_size) and taken + self.footprint(job, k) <= memory:
                return k
            k *= 2
        return None

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        del now
        cluster = snapshot.cluster
        jobs = {job.id: job for job in snapshot.jobs}
        free = FreeGpus(cluster)
        allocations: dict[int, Allocation] = {}
        reasons: dict[int, str] = {}
        self.last_sharing = []
        # Non-preemptive: every running job keeps its GPUs; a pair whose partner left
        # continues alone with its full batch.
        for job in snapshot.jobs:
            current = job.current
            if current is None or not current_usable(snapshot, job):
                continue
            if current.shared_with is not None:
                partner = jobs.get(current.shared_with)
                if (
                    partner is not None
                    and partner.current is not None
                    and partner.current.shared_with == job.id
                ):
                    allocations[job.id] = current
                    continue
                alone = allocation_on(snapshot, job, current.slots)
                if free.take_slots(current.slots):
                    allocations[job.id] = alone
                continue
            if free.take_slots(current.slots):
                allocations[job.id] = current
        for alloc in allocations.values():
            # Shared GPUs were taken by one of the two partners only.
            if alloc.shared_with is not None:
                for slot in alloc.slots:
                    if free.is_free(slot):
                        free.take_slots([slot])
        waiting = sorted(
            (j for j in snapshot.jobs if j.id not in allocations),
            key=lambda j: (remaining_seconds(snapshot, j), j.arrival_time, j.id),
        )
        residents = Residents(self, snapshot)
        for job_id, alloc in allocations.items():
            residents.add(jobs[job_id], alloc)
        releases = Releases(snapshot)
        if self.variant == "paper":
            for job_id, alloc in allocations.items():
                releases.hold(jobs[job_id], alloc)
        for job in waiting:
            types = [t for t in allowed_types(snapshot, job) if free.count(t) >= job.num_gpus]
            if types:
                fastest = max(types, key=lambda t: (job_rate(snapshot, job, t), t))
                slots = free.take(job.num_gpus, fastest)
                assert slots is not None
                allocations[job.id] = allocation_on(snapshot, job, slots)
                residents.add(job, allocations[job.id])
                if self.variant == "paper":
                    releases.hold(job, allocations[job.id])
                continue
            wait_jct = releases.alone_jct(job, free) if self.variant == "paper" else None
            sharing = self.best_partner(snapshot, job, residents, alone_jct=wait_jct)
            if sharing is None:
                reasons[job.id] = (
                    "waiting: no free GPUs, and sharing with no running job would lower the "
                    "pair's average JCT (sjf-bsbf)"
                )
                if wait_jct is not None and math.isfinite(wait_jct):
                    reasons[job.id] += (
                        f"; waiting, it completes alone within {wait_jct / 3600:.2f} h"
                    )
                continue
            self.pair(snapshot, allocations, jobs, sharing)
            if self.variant == "paper":
                releases.hold(jobs[sharing.partner], allocations[sharing.partner])
                releases.hold(job, allocations[job.id])
            self.last_sharing.append(sharing)
            residents.shared.add(sharing.partner)
        return Plan(allocations, reasons)

    @staticmethod
    def pair(
        snapshot: Snapshot,
        allocations: dict[int, Allocation],
        jobs: Mapping[int, JobView],
        sharing: Sharing,
    ) -> None:
        """Co-locate ``sharing.job`` on its partner's GPUs, with its accumulation steps."""
        partner_alloc = allocations[sharing.partner]
        allocations[sharing.partner] = Allocation(
            copies=partner_alloc.copies,
            batch_shares=partner_alloc.batch_shares,
            accumulation_steps=partner_alloc.accumulation_steps,
            shared_with=sharing.job,
        )
        allocations[sharing.job] = allocation_on(
            snapshot,
            jobs[sharing.job],
            partner_alloc.slots,
            accumulation_steps=sharing.accumulation_steps,
            shared_with=sharing.partner,
        )

    def best_partner(
        self,
        snapshot: Snapshot,
        job: JobView,
        residents: Residents,
        *,
        alone_jct: float | None = None,
    ) -> Sharing | None:
        """The resident whose pairing with ``job`` lowers the pair's average JCT most.

        Without sharing the job waits: for the partner's completion, or, given
        ``alone_jct``, until it completes alone from its earliest start (seconds from now).
        """
        if not job.shareable:
            return None
        model = snapshot.throughput
        best: Sharing | None = None
        for gpu_type, group in residents.groups_for(job.num_gpus):
            if not job.allows(gpu_type):
                continue
            solo_by_layout: dict[bool, float] = {}
            remaining = job.remaining_iterations
            # Residents repeat a few job types; look each pair figure up once.
            pair_by_type: dict[str, tuple[float, float] | None] = {}
            for resident in group:
                if resident.job.id in residents.shared:
                    continue
                partner = resident.job
                if partner.job_type in pair_by_type:
                    pair = pair_by_type[partner.job_type]
                else:
                    pair = model.colocated(partner.job_type, job.job_type, gpu_type, job.num_gpus)
                    pair_by_type[partner.job_type] = pair
                if pair is None and not self._assumed_pair_slowdown:
                    continue
                k = self.accumulation_for(job, partner, resident.memory)
                if k is None:
                    continue
                solo_a = solo_by_layout.get(resident.consolidated)
                if solo_a is None:
                    solo_a = job_rate(snapshot, job, gpu_type, consolidated=resident.consolidated)
                    solo_by_layout[resident.consolidated] = solo_a
                solo_b = resident.rate
                if solo_a <= 0 or solo_b <= 0:
                    continue
                e_a = remaining / solo_a
                e_b = resident.remaining / solo_b
                if pair is None:
                    s_a = s_b = self._assumed_pair_slowdown
                else:
                    s_b = max(1.0, solo_b / pair[0])
                    s_a = max(1.0, solo_a / pair[1])
                paired = paired_jct(e_a, e_b, s_a, s_b)
                if alone_jct is None:
                    sequential = sequential_jct(e_a, e_b)
                else:
                    sequential = (e_b + min(alone_jct, e_b + e_a)) / 2.0
                if paired >= sequential:
                    continue
                candidate = Sharing(job.id, partner.id, paired, sequential, k)
                if best is None or candidate.benefit > best.benefit:
                    best = candidate
        return best


class Releases:
    """When the GPUs held this round are released, in seconds from now: each job holds
    its GPUs until it completes at its allocation's speed (sjf-bsbf never preempts)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._at: dict[GpuSlot, float] = {}

    def hold(self, job: JobView, alloc: Allocation) -> None:
        rate = allocation_rate(self._snapshot, job, alloc)
        left = job.remaining_iterations / rate if rate > 0 else math.inf
        for slot in alloc.slots:
            # A shared GPU is released when the later of its two jobs completes.
            self._at[slot] = max(self._at.get(slot, 0.0), left)

    def alone_jct(self, job: JobView, free: FreeGpus) -> float:
        """The job's completion time, from now, alone on the allowed type where it would
        complete first once enough GPUs are free (inf when no type ever has enough)."""
        cluster = self._snapshot.cluster
        best = math.inf
        for gpu_type in allowed_types(self._snapshot, job):
            need = job.num_gpus - free.count(gpu_type)
            times = sorted(t for s, t in self._at.items() if cluster.gpu_type(s) == gpu_type)
            if need > len(times):
                continue
            start = times[need - 1] if need > 0 else 0.0
            rate = job_rate(self._snapshot, job, gpu_type)
            if rate > 0:
                best = min(best, start + job.remaining_iterations / rate)
        return best


@dataclass(frozen=True, slots=True)
class _Resident:
    job: JobView
    rate: float
    memory: int
    consolidated: bool
    remaining: float


class Residents:
    """Jobs that could host a sharer, by (GPU count, GPU type); built once per round."""

    def __init__(self, policy: SjfBsbfPolicy, snapshot: Snapshot) -> None:
        self._policy = policy
        self._snapshot = snapshot
        self._groups: dict[int, dict[str, list[_Resident]]] = {}
        self.shared: set[int] = set()

    def add(self, job: JobView, alloc: Allocation) -> None:
        if (
            not job.shareable
            or alloc.shared_with is not None
            or alloc.folded
            or alloc.num_copies != 1
        ):
            return
        cluster = self._snapshot.cluster
        types = {cluster.gpu_type(slot) for slot in alloc.slots}
        if len(types) != 1:
            return
        resident = _Resident(
            job,
            allocation_rate(self._snapshot, job, alloc),
            self._policy.gpu_memory(self._snapshot, alloc),
            len(alloc.nodes) == 1,
            job.remaining_iterations,
        )
        per_type = self._groups.setdefault(alloc.num_gpus, {})
        per_type.setdefault(next(iter(types)), []).append(resident)

    def groups_for(self, num_gpus: int) -> list[tuple[str, list[_Resident]]]:
        return sorted(self._groups.get(num_gpus, {}).items())


def make(
    *,
    max_accumulation: int = 8,
    state_fraction: float = 0.35,
    assumed_pair_slowdown: float = 0.0,
    variant: str = "default",
) -> SjfBsbfPolicy:
    return SjfBsbfPolicy(
        max_accumulation=max_accumulation,
        state_fraction=state_fraction,
        assumed_pair_slowdown=assumed_pair_slowdown,
        variant=variant,
    )


def residents_of(
    policy: SjfBsbfPolicy,
    snapshot: Snapshot,
    jobs: Mapping[int, JobView],
    allocations: Mapping[int, Allocation],
) -> Residents:
    """The jobs of ``allocations`` that could host a sharer (shared ones marked taken)."""
    residents = Residents(policy, snapshot)
    for job_id, alloc in allocations.items():
        residents.add(jobs[job_id], alloc)
        if alloc.shared_with is not None:
            residents.shared.add(job_id)
    return residents
