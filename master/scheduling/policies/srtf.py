"""Shortest remaining time first (preemptive; job sizes known).

Each round jobs are ordered by remaining time: remaining iterations divided by the
job's throughput on its fastest allowed GPU type in the cluster (so the order compares
times, not iteration counts of different models). Jobs that fit are admitted in that
order, later ones backfill free GPUs; a running job keeps its GPUs when admitted again.
Placement is heterogeneity-agnostic: any type with enough free GPUs, seeded random.
Non-preemptible running jobs are never stopped.
"""

from __future__ import annotations

import random

from master.scheduling.plan import Plan
from master.scheduling.policies._greedy import greedy_plan, random_type_chooser
from master.scheduling.views import JobView, Snapshot

NAME = "srtf"


def fastest_rate(snapshot: Snapshot, job: JobView) -> float:
    """The job's throughput on its fastest allowed type (0 when none is usable)."""
    types = [t for t in snapshot.cluster.gpu_types if job.allows(t)]
    if not types:
        return 0.0
    model = snapshot.throughput
    return max(model.throughput(job.job_type, t, job.num_gpus) for t in types)


def remaining_seconds(snapshot: Snapshot, job: JobView) -> float:
    """Remaining time on the job's fastest allowed type (inf when none is usable)."""
    best = fastest_rate(snapshot, job)
    return job.remaining_iterations / best if best > 0 else float("inf")


class SrtfPolicy:
    name = NAME

    def __init__(self, *, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    #: Every running job keeps its GPUs when all fit (greedy, nothing drawn at random).
    stable_when_settled = True
    #: Jobs that left only free GPUs: the others keep their order and all still fit.
    stable_after_departures = True

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        del now
        pinned = [j for j in snapshot.jobs if j.current is not None and not j.preemptible]
        pinned_ids = {j.id for j in pinned}
        rest = [j for j in snapshot.jobs if j.id not in pinned_ids]
        # Jobs of one kind share their fastest rate: looked up once per kind.
        rates: dict[tuple[str, int, frozenset[str], frozenset[str] | None], float] = {}

        def rank(job: JobView) -> tuple[float, float, int]:
            kind = (job.job_type, job.num_gpus, job.allowed_gpu_types, job.memory_gpu_types)
            best = rates.get(kind)
            if best is None:
                best = rates[kind] = fastest_rate(snapshot, job)
            remaining = job.remaining_iterations / best if best > 0 else float("inf")
            return (remaining, job.arrival_time, job.id)

        order = sorted(rest, key=rank)
        return greedy_plan(
            snapshot, order, random_type_chooser(self._rng), pinned=pinned, policy_name=NAME
        )


def make(*, seed: int = 0) -> SrtfPolicy:
    return SrtfPolicy(seed=seed)
