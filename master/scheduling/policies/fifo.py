"""First in, first out, heterogeneity-agnostic and non-preemptive.

Jobs start in arrival order; a running job keeps its GPUs until it finishes. The head
of the queue blocks everyone behind it (no backfilling) unless ``backfill=True``. The
GPU type is any type with enough free GPUs, picked at random with a seeded generator,
as in Gavel's FIFO baseline.

``min_recompute_s`` reproduces Gavel's simulator, which admits queued jobs only when
it recomputes its allocation: after the set of jobs changed and at least that many
seconds since the previous recompute (1920 s there). The default 0 admits jobs in every
round, which is what a lab wants from FIFO.

``gavel_compat=True`` reproduces Gavel's FIFO including its type choice (see
:mod:`master.scheduling.policies._gavel_fifo`); use it with ``min_recompute_s=1920`` to
compare with Gavel's published figures.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from master.scheduling.plan import Plan
from master.scheduling.policies._gavel_fifo import GavelFifo
from master.scheduling.policies._greedy import greedy_plan, random_type_chooser
from master.scheduling.views import JobView, Snapshot

NAME = "fifo"


class FifoPolicy:
    name = NAME

    def __init__(
        self,
        *,
        seed: int = 0,
        backfill: bool = False,
        min_recompute_s: float = 0.0,
        gavel_compat: bool = False,
    ) -> None:
        if min_recompute_s < 0:
            raise ValueError("min_recompute_s must be >= 0")
        self._compat = GavelFifo(random.Random(seed), min_recompute_s) if gavel_compat else None
        self._rng = random.Random(seed)
        self._backfill = backfill
        self._min_recompute_s = min_recompute_s
        self._last_decision: float | None = None
        self._decided_for: frozenset[int] = frozenset()

    @property
    def stable_when_settled(self) -> bool:
        # Running jobs are pinned; with the same job set no admission time moves. Gavel's
        # FIFO re-draws types, so its mode is not.
        return self._compat is None

    @property
    def stable_after_departures(self) -> bool:
        # A departure only frees GPUs, and with every job running nobody waits for them.
        # The admission time it then records is read only with min_recompute_s.
        return self._compat is None and self._min_recompute_s == 0

    def starts_none(self, waiting: Sequence[JobView], free_by_type: Mapping[str, int]) -> bool:
        """Whether the head of the queue does not fit (see StartsNone): without backfill
        nobody behind it starts then, and running jobs are pinned. Only for the plain mode:
        Gavel's re-draws types and admission by time keeps bookkeeping by time."""
        if self._compat is not None or self._backfill or self._min_recompute_s != 0:
            return False
        if not waiting:
            return False
        head = min(waiting, key=lambda j: (j.arrival_time, j.id))
        if head.memory_bytes_per_gpu > 0:
            return False  # its allowed types come from the snapshot's memory check
        # What greedy_plan admits the head by: some allowed type with that many unclaimed.
        n = head.num_gpus
        return not any(free >= n and head.allows(t) for t, free in free_by_type.items())

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        if self._compat is not None:
            return self._compat.plan(snapshot, now)
        running = sorted(
            (job for job in snapshot.jobs if job.current is not None),
            key=lambda j: (j.arrival_time, j.id),
        )
        waiting = sorted(
            (job for job in snapshot.jobs if job.current is None),
            key=lambda j: (j.arrival_time, j.id),
        )
        ids = frozenset(job.id for job in snapshot.jobs)
        admit = (
            self._min_recompute_s == 0
            or self._last_decision is None
            or (ids != self._decided_for and now - self._last_decision >= self._min_recompute_s)
        )
        if not admit:
            assert self._last_decision is not None
            next_at = self._last_decision + self._min_recompute_s
            plan = greedy_plan(snapshot, [], random_type_chooser(self._rng), pinned=running)
            reasons = {job.id: f"waiting: next admission at t={next_at:.0f}s" for job in waiting}
            return Plan(plan.allocations, reasons)
        if ids != self._decided_for:
            self._last_decision = now
            self._decided_for = ids
        return greedy_plan(
            snapshot,
            waiting,
            random_type_chooser(self._rng),
            backfill=self._backfill,
            pinned=running,
            policy_name=NAME,
        )


def make(
    *,
    seed: int = 0,
    backfill: bool = False,
    min_recompute_s: float = 0.0,
    gavel_compat: bool = False,
) -> FifoPolicy:
    return FifoPolicy(
        seed=seed, backfill=backfill, min_recompute_s=min_recompute_s, gavel_compat=gavel_compat
    )
