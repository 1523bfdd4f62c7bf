"""Slurm as labs run it: priority order with EASY backfill, the baseline to beat.

Slurm's default scheduler (``sched/backfill`` over ``select/cons_tres``) as a lab's
cluster typically configures it, reduced to what decides who runs where:

- Priority: the multifactor plugin with its two factors that matter in a lab, fair share
  and age: ``fairshare_weight * priority + age_weight * min(age / max_age, 1)``, highest
  first, then submit time. ``priority`` is the job's priority as the round shows it, that
  is times its user's fair-share factor when fair share is on
  (:mod:`master.scheduling.fairshare`); with fair share off and equal priorities the order
  is submit time. The default weights (10000 and 1000, ``PriorityMaxAge`` 7 days) are a
  common lab configuration, where fair share dominates and age breaks near-ties.
- EASY backfill: jobs start in priority order while they fit. The first job that does not
  fit (the head) gets a reservation: the earliest time at which enough GPUs of one allowed
  type are free, from the running jobs' expected ends by their time limits (the *shadow
  time*), on the type that is free first. A later job may start now (backfill) when it
  cannot delay that reservation: it runs on another type, or by its own time limit it ends
  by the shadow time, or it fits in the GPUs of the reserved type that the head leaves
  over at the shadow time. Only the head holds a reservation, as in EASY. A job that
  could start only spread over more servers than the GPUs of a type it may not take now
  need waits too: the round packs spread jobs onto the fewest servers
  (:func:`master.scheduling.placement.pack_spread`), which could delay the head.
- Time limits are run time estimates (``JobView.time_limit_s``, which the daemon already
  set to the cluster's default for a job that gave none, as Slurm's ``DefaultTime``). A
  job with no limit at all runs, as Slurm's ``INFINITE``, for an unknown time: while it
  runs its GPUs never count as freed for a reservation, and it backfills only where it
  cannot delay the head (another type, or GPUs the head leaves over). A head that waits
  for such GPUs has a reservation that cannot be dated; then nothing backfills on its type
  (a job with a limit would always "end before" it, and the head would starve). A running
  job past its limit is taken to end now (it is about to be stopped).
- Placement: heterogeneity-agnostic apart from typed GRES: any allowed type (a job that
  names types gets one of them), all of a job's GPUs of one type, on as few servers as
  possible, the type whose free GPUs pack the job best. No preemption, no migration, no
  sharing: a running job keeps its GPUs until it ends.

Stateless: every round is decided from the snapshot alone, so a restarted master plans
the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from master.scheduling.placement import FreeGpus
from master.scheduling.plan import Allocation, Plan
from master.scheduling.policies._greedy import current_slots_usable
from master.scheduling.views import JobView, Snapshot
from protos.durations import format_duration

NAME = "slurm"

#: Slurm's PriorityWeightFairshare and PriorityWeightAge in a common lab configuration.
DEFAULT_FAIRSHARE_WEIGHT = 10000.0
DEFAULT_AGE_WEIGHT = 1000.0
#: PriorityMaxAge: the age at which a job's age factor reaches 1 (Slurm's default, 7 days).
DEFAULT_MAX_AGE_S = 7 * 86400.0


@dataclass(frozen=True, slots=True)
class Reservation:
    """The head job's reservation: ``gpus`` GPUs of ``gpu_type`` from ``start`` (the
    shadow time, seconds on the round's clock; ``inf`` when never), of which ``spare``
    more are free then than the head needs."""

    job_id: int
    gpu_type: str
    gpus: int
    start: float
    spare: int


def expected_end(job: JobView, now: float) -> float:
    """When a running job ends by its time limit (``inf`` without one)."""
    if job.time_limit_s <= 0:
        return math.inf
    return now + max(0.0, job.time_limit_s - job.run_seconds)


def reserve(
    job: JobView, free: FreeGpus, releases: dict[str, list[tuple[float, int]]], now: float
) -> Reservation | None:
    """The earliest start of ``job`` on one allowed type from the GPUs free now and those
    running jobs release at their expected ends (``releases``: type -> (time, GPUs));
    None when no allowed type has enough GPUs at all."""
    best: Reservation | None = None
    for gpu_type in sorted(set(free.types()) | set(releases)):
        if not job.allows(gpu_type):
            continue
        have = free.count(gpu_type)
        start = now
        if have < job.num_gpus:
            start = math.inf
            for at, gpus in sorted(releases.get(gpu_type, ())):
                have += gpus
                if have >= job.num_gpus:
                    start = at
                    break
            if have < job.num_gpus:
                continue
        if math.isinf(start):
            spare = 0  # an undated reservation leaves nothing over that could be planned
        else:
            freed = sum(g for at, g in releases.get(gpu_type, ()) if at <= start)
            spare = free.count(gpu_type) + freed - job.num_gpus
        candidate = Reservation(job.id, gpu_type, job.num_gpus, start, spare)
        if best is None or (candidate.start, candidate.gpu_type) < (best.start, best.gpu_type):
            best = candidate
    return best


class SlurmPolicy:
    name = NAME

    #: When every job runs where it ran and none came or went, each keeps its GPUs and
    #: none waits: nothing is reserved and nothing depends on the time.
    stable_when_settled = True
    #: With every job running nothing waits, whoever left: still nothing to reserve.
    stable_after_departures = True

    def __init__(
        self,
        *,
        fairshare_weight: float = DEFAULT_FAIRSHARE_WEIGHT,
        age_weight: float = DEFAULT_AGE_WEIGHT,
        max_age_s: float = DEFAULT_MAX_AGE_S,
    ) -> None:
        if fairshare_weight < 0 or age_weight < 0:
            raise ValueError("fairshare_weight and age_weight must be >= 0")
        if not max_age_s > 0:
            raise ValueError(f"max_age_s must be > 0, got {max_age_s}")
        self._fairshare_weight = fairshare_weight
        self._age_weight = age_weight
        self._max_age_s = max_age_s
        #: The latest round's reservation (None when every waiting job started or none
        #: could be reserved), for inspection.
        self.last_reservation: Reservation | None = None

    def priority(self, job: JobView, now: float) -> float:
        """Slurm's multifactor priority of a waiting job (fair share and age)."""
        age = min(max(0.0, now - job.arrival_time) / self._max_age_s, 1.0)
        return self._fairshare_weight * job.priority + self._age_weight * age

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        free = FreeGpus(snapshot.cluster)
        allocations: dict[int, Allocation] = {}
        releases: dict[str, list[tuple[float, int]]] = {}
        waiting: list[JobView] = []
        for job in snapshot.jobs:
            current = job.current
            if (
                current is not None
                and current_slots_usable(snapshot, job)
                and free.take_slots(current.slots)
            ):
                allocations[job.id] = current
                end = expected_end(job, now)
                for slot in current.slots:
                    releases.setdefault(free.type_of(slot), []).append((end, 1))
            else:
                waiting.append(job)
        waiting.sort(key=lambda j: (-self.priority(j, now), j.arrival_time, j.id))
        reasons: dict[int, str] = {}
        head: Reservation | None = None
        self.last_reservation = None
        for job in waiting:
            allowed = [t for t in free.types() if job.allows(t)]
            if head is None:
                gpu_type = free.packed_type(job.num_gpus, allowed)
                if gpu_type is not None:
                    allocations[job.id] = self._start(job, gpu_type, free)
                    # Its GPUs come back by its limit: the reservation may count on them.
                    releases.setdefault(gpu_type, []).append((expected_end(job, now), job.num_gpus))
                    continue
                head = reserve(job, free, releases, now)
                if head is None:
                    reasons[job.id] = _never_reason(snapshot, job)
                    continue
                self.last_reservation = head
                when = "no start time yet (it waits for jobs without time limits)"
                if math.isfinite(head.start):
                    # Whole minutes: the reason stays the same from round to round.
                    minutes = math.ceil((head.start - now) / 60.0)
                    when = f"to start within {format_duration(60.0 * minutes)}"
                reasons[job.id] = (
                    f"waiting: first in line ({NAME}), {head.gpus} {head.gpu_type} GPUs "
                    f"reserved for it, {when}"
                )
                continue
            ends = expected_end(job, now)
            admissible = [t for t in allowed if t != head.gpu_type]
            spare = False
            if head.gpu_type in allowed and math.isfinite(head.start):
                fits = free.count(head.gpu_type) >= job.num_gpus
                if fits and ends <= head.start:
                    admissible.append(head.gpu_type)
                elif fits and job.num_gpus <= head.spare:
                    admissible.append(head.gpu_type)
                    spare = True
            gpu_type = free.packed_type(job.num_gpus, admissible)
            # Spread over more servers than a type it may not take now needs: the round
            # would pack it there (placement.pack_spread), delaying the head.
            n = job.num_gpus
            if gpu_type is not None and free.servers_needed(n, gpu_type) != (
                free.fewest_servers(n, allowed)
            ):
                gpu_type = None
            if gpu_type is None:
                reasons[job.id] = (
                    f"waiting: queued behind job {head.job_id} ({NAME}); starting now would "
                    f"delay its reservation or no GPUs fit"
                )
                continue
            if spare and gpu_type == head.gpu_type:
                head = Reservation(
                    head.job_id, head.gpu_type, head.gpus, head.start, head.spare - job.num_gpus
                )
            allocations[job.id] = self._start(job, gpu_type, free)
        return Plan(allocations, reasons)

    @staticmethod
    def _start(job: JobView, gpu_type: str, free: FreeGpus) -> Allocation:
        slots = free.take(job.num_gpus, gpu_type)
        if slots is None:  # pragma: no cover - the type was chosen for its free GPUs
            raise AssertionError(f"{job.num_gpus} free {gpu_type} GPUs promised but not found")
        return Allocation.on(slots, job.batch_size)


def _never_reason(snapshot: Snapshot, job: JobView) -> str:
    allowed = [t for t in snapshot.cluster.gpu_types if job.allows(t)]
    if not allowed:
        wanted = ", ".join(sorted(job.allowed_gpu_types)) or "any"
        return f"waiting: no usable GPU of an allowed type ({wanted})"
    return f"waiting: needs {job.num_gpus} GPUs of one type, no allowed type has that many"


def make(
    *,
    fairshare_weight: float = DEFAULT_FAIRSHARE_WEIGHT,
    age_weight: float = DEFAULT_AGE_WEIGHT,
    max_age_s: float = DEFAULT_MAX_AGE_S,
) -> SlurmPolicy:
    return SlurmPolicy(
        fairshare_weight=fairshare_weight, age_weight=age_weight, max_age_s=max_age_s
    )
