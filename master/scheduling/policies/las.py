"""Least attained service, discretized as in Tiresias (2D-LAS).

Attained service is GPU-seconds received (GPUs x time, any type: this baseline is
heterogeneity-agnostic). Jobs fall into priority queues by attained service with
thresholds ``queue_thresholds`` (GPU-seconds, ascending); a lower queue always goes
first, and within a queue jobs go in arrival order, so jobs with similar service do not
thrash by overtaking each other every round. Preemptive, with backfilling. A job that
has waited ``starvation_s`` seconds since it last ran (or since arrival) is promoted to
the highest queue, Tiresias' guard against starvation (off by default).
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence
from operator import itemgetter

from master.scheduling.plan import Plan
from master.scheduling.policies._greedy import greedy_plan, random_type_chooser
from master.scheduling.views import JobView, Snapshot

NAME = "las"

#: One GPU-hour, then ten: the two thresholds of a three-queue Tiresias configuration.
DEFAULT_THRESHOLDS: tuple[float, ...] = (3600.0, 36000.0)


class LasPolicy:
    name = NAME

    def __init__(
        self,
        *,
        queue_thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
        starvation_s: float | None = None,
        seed: int = 0,
    ) -> None:
        thresholds = tuple(float(t) for t in queue_thresholds)
        if any(t <= 0 for t in thresholds) or list(thresholds) != sorted(set(thresholds)):
            raise ValueError(f"queue_thresholds must be positive and ascending: {thresholds}")
        if starvation_s is not None and starvation_s <= 0:
            raise ValueError("starvation_s must be > 0")
        self._thresholds = thresholds
        self._starvation_s = starvation_s
        self._rng = random.Random(seed)
        self._last_ran: dict[int, float] = {}
        # Views are immutable: a job's queue is recomputed only when its view changes.
        self._service_queue: dict[int, tuple[JobView, int]] = {}

    @property
    def stable_when_settled(self) -> bool:
        # Every running job keeps its GPUs when all fit and nothing came or went; without
        # starvation promotion, plan() then records nothing by time.
        return self._starvation_s is None

    @property
    def stable_after_departures(self) -> bool:
        # The others keep their order, and each finds at least the GPUs it found with the
        # departed jobs there: all still fit where they are, and none is placed anew.
        return self._starvation_s is None

    def queue_of(self, job: JobView, now: float) -> int:
        cached = self._service_queue.get(job.id)
        if cached is not None and cached[0] is job:
            queue = cached[1]
        else:
            service = sum(job.gpu_seconds_by_type.values())
            queue = bisect.bisect_right(self._thresholds, service)
            self._service_queue[job.id] = (job, queue)
        if self._starvation_s is not None and job.current is None:
            since = self._last_ran.get(job.id, job.arrival_time)
            if now - since >= self._starvation_s:
                return 0
        return queue

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        if len(self._service_queue) > 2 * len(snapshot.jobs) + 64:
            active = {job.id for job in snapshot.jobs}
            self._last_ran = {k: v for k, v in self._last_ran.items() if k in active}
            self._service_queue = {k: v for k, v in self._service_queue.items() if k in active}
        starvation = self._starvation_s is not None
        pinned: list[JobView] = []
        ordered: list[tuple[tuple[int, float, int], JobView]] = []
        for job in snapshot.jobs:
            if job.current is not None:
                if starvation:
                    self._last_ran[job.id] = now
                if not job.preemptible:
                    pinned.append(job)
                    continue
            ordered.append(((self.queue_of(job, now), job.arrival_time, job.id), job))
        ordered.sort(key=itemgetter(0))
        return greedy_plan(
            snapshot,
            [job for _, job in ordered],
            random_type_chooser(self._rng),
            pinned=pinned,
            policy_name=NAME,
        )


def make(
    *,
    queue_thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    starvation_s: float | None = None,
    seed: int = 0,
) -> LasPolicy:
    return LasPolicy(queue_thresholds=queue_thresholds, starvation_s=starvation_s, seed=seed)
