"""Liu et al.: proportional workload split and matching-market placement.

Liu, Wang, Huang et al., "Heterogeneity-aware multi-job placement" (IEEE TPDS 2024).

Proportional training workload: a job spanning GPU types gives each worker a share of
the global batch proportional to that GPU's speed for the job, so all workers finish an
iteration together; the job then runs at the mean of its types' paces (at its scale)
instead of the slowest one's.

Feasible solution categories: the placements of a job on ``n`` GPUs grouped by their
multiset of types (e.g. 2 v100 + 2 k80); the job's completion time on a category is its
remaining iterations over the category's speed. Matching market: jobs propose to their
categories in order of completion time (best first); a category holds a job as long as
the GPU types it needs have room; when a type is over-subscribed, the cluster rejects,
among the jobs it holds on that type, the one with the longest completion time on its
held category (shortest completion first), and the rejected job proposes to its next
category (deferred acceptance, Gale-Shapley). The result is stable: no job and category
would both prefer each other to what they got.

Sampling: each job ranks only its single-type categories plus ``sample`` categories drawn
at random from the mixed ones (seeded), which keeps the market small with little loss.
Categories are listed only while there are at most :data:`ENUMERATE_MAX` of them (a job of
8 GPUs over 4 types has 165); a large job over many types, whose categories run into the
millions, has its mixed ones drawn directly instead.
Placement consolidates each type's GPUs on as few servers as possible, largest jobs
first, and keeps a running job on its GPUs when its category is unchanged.

With ``variant="paper"`` every feasible category is ranked (the paper's full category
set, no sampling); a job whose categories are too many to list still has its mixed ones
drawn, :data:`PAPER_DRAWS` of them.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import deque
from collections.abc import Mapping

from master.scheduling.placement import FreeGpus
from master.scheduling.plan import GpuSlot, Plan
from master.scheduling.policies._speeds import (
    allocation_on,
    allowed_types,
    cluster_types,
    current_usable,
    job_rate,
    keep_pinned,
    single_type_bound,
    type_counts,
)
from master.scheduling.views import JobView, Snapshot

NAME = "liu"

Category = tuple[tuple[str, int], ...]

#: Most categories of one job listed in full.
ENUMERATE_MAX = 20_000

#: Mixed categories drawn under the paper variant for a job with more than ENUMERATE_MAX.
PAPER_DRAWS = 256

VARIANTS = ("default", "paper")


def categories(types: list[str], n: int) -> list[Category]:
    """All multisets of ``n`` GPUs over ``types``, as sorted (type, count) tuples."""
    out: list[Category] = []
    for combo in itertools.combinations_with_replacement(sorted(types), n):
        counts: dict[str, int] = {}
        for t in combo:
            counts[t] = counts.get(t, 0) + 1
        out.append(tuple(sorted(counts.items())))
    return out


def category_count(types: int, n: int) -> int:
    """How many multisets of ``n`` GPUs ``types`` types make (:func:`categories`)."""
    return math.comb(n + types - 1, types - 1) if types else 0


def sample_mixed(
    capacity: Mapping[str, int], n: int, count: int, rng: random.Random
) -> list[Category]:
    """Up to ``count`` distinct mixed categories of ``n`` GPUs within ``capacity`` (type ->
    GPUs), drawn without listing them all: each draw splits ``n`` over the types in a
    random order, each type taking a random share of what the types after it cannot
    hold."""
    types = sorted(t for t, c in capacity.items() if c > 0)
    found: dict[Category, None] = {}
    for _ in range(count * 8):
        if len(found) >= count:
            break
        order = rng.sample(types, len(types))
        left = n
        room_after = sum(capacity[t] for t in order)
        counts: dict[str, int] = {}
        for t in order:
            room_after -= capacity[t]
            k = rng.randint(max(0, left - room_after), min(capacity[t], left))
            if k:
                counts[t] = k
            left -= k
        if left == 0 and len(counts) > 1:
            found[tuple(sorted(counts.items()))] = None
    return list(found)


def category_rate(snapshot: Snapshot, job: JobView, category: Category) -> float:
    """Iterations/s on a category with a speed-proportional batch split."""
    if len(category) == 1:
        return job_rate(snapshot, job, category[0][0])
    n = job.num_gpus
    return sum(k * job_rate(snapshot, job, t, consolidated=False) for t, k in category) / n


class LiuPolicy:
    name = NAME

    def __init__(self, *, sample: int = 6, seed: int = 0, variant: str = "default") -> None:
        if sample < 0:
            raise ValueError(f"sample must be >= 0, got {sample}")
        if variant not in VARIANTS:
            raise ValueError(f"liu variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
        self.variant = variant
        self._every = variant == "paper"
        self._sample = sample
        self._seed = seed
        self._categories: dict[tuple[tuple[str, ...], int], list[Category]] = {}

    def _candidates(self, snapshot: Snapshot, job: JobView) -> list[Category]:
        capacity = snapshot.cluster.capacity_by_type()
        types = [t for t in allowed_types(snapshot, job) if capacity.get(t, 0) > 0]
        n = job.num_gpus
        if n > sum(capacity[t] for t in types):
            return []
        if category_count(len(types), n) > ENUMERATE_MAX:
            pure = [((t, n),) for t in types if capacity[t] >= n]
            room = {t: capacity[t] for t in types}
            draws = PAPER_DRAWS if self._every else self._sample
            return pure + sample_mixed(room, n, draws, self._rng(snapshot, job))
        key = (tuple(types), n)
        every = self._categories.get(key)
        if every is None:
            every = categories(types, n)
            self._categories[key] = every
        feasible = [c for c in every if all(k <= capacity.get(t, 0) for t, k in c)]
        pure = [c for c in feasible if len(c) == 1]
        mixed = [c for c in feasible if len(c) > 1]
        if not self._every and len(mixed) > self._sample:
            mixed = self._rng(snapshot, job).sample(mixed, self._sample)
        return pure + mixed

    def _rng(self, snapshot: Snapshot, job: JobView) -> random.Random:
        """The job's draws this round, seeded by round and job: made only when a draw is
        needed, since seeding from a string costs more than the rest of a job's turn."""
        return random.Random(f"{self._seed}:{snapshot.round_number}:{job.id}")

    def match(
        self, snapshot: Snapshot, jobs: list[JobView], room: dict[str, int]
    ) -> dict[int, Category]:
        """Deferred acceptance between ``jobs`` and categories under per-type ``room``."""
        prefs: dict[int, list[tuple[float, Category]]] = {}
        for job in jobs:
            ranked = []
            bound = single_type_bound(snapshot, job)
            for c in self._candidates(snapshot, job):
                if any(k > room.get(t, 0) for t, k in c):
                    continue
                rate = category_rate(snapshot, job, c)
                if len(c) > 1 and rate > bound * (1 + 1e-9):
                    continue
                if rate > 0:
                    ranked.append((job.remaining_iterations / rate, c))
            ranked.sort()
            prefs[job.id] = ranked
        nxt = dict.fromkeys(prefs, 0)
        held: dict[int, tuple[float, Category]] = {}
        used = dict.fromkeys(room, 0)
        holders: dict[str, list[tuple[float, int]]] = {t: [] for t in room}
        free_jobs = deque(job.id for job in sorted(jobs, key=lambda j: (j.arrival_time, j.id)))
        while free_jobs:
            job_id = free_jobs.popleft()
            ranked = prefs[job_id]
            if nxt[job_id] >= len(ranked):
                continue  # exhausted its list: stays unmatched this round
            time_, category = ranked[nxt[job_id]]
            nxt[job_id] += 1
            held[job_id] = (time_, category)
            for t, k in category:
                used[t] += k
                heapq.heappush(holders[t], (-time_, job_id))
            for t, _ in category:
                while used[t] > room[t]:
                    neg_time, loser = heapq.heappop(holders[t])
                    entry = held.get(loser)
                    if entry is None or entry[0] != -neg_time or t not in dict(entry[1]):
                        continue  # stale heap entry
                    del held[loser]
                    for lt, lk in entry[1]:
                        used[lt] -= lk
                    free_jobs.append(loser)
        return {job_id: category for job_id, (_, category) in held.items()}

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        del now
        free = FreeGpus(snapshot.cluster)
        allocations, rest = keep_pinned(snapshot, free)
        reasons: dict[int, str] = {}
        room = {t: free.count(t) for t in cluster_types(snapshot.cluster)}
        matched = self.match(snapshot, rest, room)
        jobs = {j.id: j for j in rest}
        # Running jobs whose category is unchanged keep their GPUs.
        pending: list[int] = []
        for job_id, category in matched.items():
            job = jobs[job_id]
            current = job.current
            if (
                current is not None
                and current.num_copies == 1
                and current.shared_with is None
                and current.num_gpus == job.num_gpus
                and current_usable(snapshot, job)
                and tuple(sorted(type_counts(snapshot, current.slots).items())) == category
                and free.take_slots(current.slots)
            ):
                allocations[job_id] = current
            else:
                pending.append(job_id)
        pending.sort(key=lambda j: (-jobs[j].num_gpus, j))
        for job_id in pending:
            job = jobs[job_id]
            slots: list[GpuSlot] = []
            for t, k in sorted(matched[job_id], key=lambda e: (-e[1], e[0])):
                got = free.take(k, t)
                if got is None:  # pragma: no cover - the match respects free counts
                    raise AssertionError(f"matched {k} {t} GPUs that are not free")
                slots.extend(got)
            allocations[job_id] = allocation_on(snapshot, job, slots)
        for job in rest:
            if job.id not in allocations:
                reasons[job.id] = "waiting: rejected by every sampled GPU category this round"
        return Plan(allocations, reasons)


def make(*, sample: int = 6, seed: int = 0, variant: str = "default") -> LiuPolicy:
    """A Liu et al. policy. ``variant="paper"`` ranks every feasible category (``sample``
    then only matters for jobs with more than :data:`ENUMERATE_MAX` categories, which the
    paper variant draws :data:`PAPER_DRAWS` of)."""
    return LiuPolicy(sample=sample, seed=seed, variant=variant)
