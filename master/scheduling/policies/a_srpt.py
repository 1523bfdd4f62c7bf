"""A-SRPT: predicted remaining work, preemptive SRPT, communication-aware placement.

Luo et al., "Prediction-Assisted Online Distributed Deep Learning Workload Scheduling in
GPU Clusters" (arXiv 2501.05563).

Prediction: most training jobs recur, so a random forest (scikit-learn) learns each
job's total iterations from completed jobs with similar features: user, job type (model
and batch size), batch size, GPU count and the submitted estimate. It predicts the
logarithm of actual over submitted iterations, so that with no history, or a history
in which submissions were exact, the prediction is the submitted estimate itself.
It refits every ``refit_every`` new completions once ``min_history`` are known; while
every completion it is fitted on ran exactly its submitted iterations, the forest could
only learn a ratio of one, so none is built and the submission is the prediction. The
history survives a restart of the master: the policy exports it as JSON
(``export_memory``), the daemon stores it whenever the policy learns and restores it
(``import_memory``) at start.

Completions reach the predictor two ways: a caller that knows the exact count calls
``observe_completion(job, iterations, now)`` (see
:class:`master.scheduling.policy.CompletionObserver`); otherwise a job that was planned
to run and is absent from the next snapshot is taken as completed with
``min(submitted, iterations done + the round's predicted progress)`` iterations. Jobs that
leave without having been planned to run (cancelled while waiting) teach nothing.

Scheduling: the cluster is treated as one machine whose speed is its total GPU capacity;
a job's processing time there is its predicted remaining GPU-time (GPUs x predicted
remaining iterations / speed on its fastest allowed type), and the preemptive SRPT
order on that machine, optimal for average JCT on one machine, is the priority on the
real cluster. Jobs are placed in that order, each on the allowed type that gives it the
highest speed once placed on as few servers as possible (a type whose free GPUs fit on
one server is consolidated, which saves inter-server traffic); jobs later in the order
are preempted when the GPUs run out.

With ``variant="paper"`` the single machine is run as a schedule over time, as in the
paper: each job joins a virtual machine of the cluster's total GPU capacity at its arrival
with its predicted GPU-time as processing time, the machine runs preemptive SRPT on that
virtual work (not on the real jobs' progress), and the real cluster takes jobs in the
order they complete, or would complete with no further arrivals, on the virtual machine.
A job that a real cluster delays keeps its virtual place; one that ran ahead of its
virtual schedule does not lose it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from master.scheduling.placement import FreeGpus
from master.scheduling.plan import Allocation, Plan
from master.scheduling.policies._speeds import (
    allocation_on,
    allocation_rate,
    allowed_types,
    best_rate,
    current_usable,
    job_rate,
    keep_pinned,
)
from master.scheduling.views import JobView, Snapshot

if TYPE_CHECKING:
    from sklearn.ensemble import RandomForestRegressor

NAME = "a-srpt"
VARIANTS = ("default", "paper")
#: Version of the memory :meth:`IterationPredictor.export` writes.
MEMORY_VERSION = 1


@dataclass(frozen=True, slots=True)
class Completion:
    """One finished job as the predictor learns from it."""

    user: str
    job_type: str
    batch_size: int
    num_gpus: int
    submitted: float
    actual: float

    def as_row(self) -> tuple[str, str, int, int, float, float]:
        """The completion as one row of an exported history (a JSON array)."""
        return (
            self.user,
            self.job_type,
            self.batch_size,
            self.num_gpus,
            self.submitted,
            self.actual,
        )


def _target(completion: Completion) -> float:
    """What the forest learns of a completion: log of actual over submitted iterations."""
    return math.log(completion.actual / completion.submitted)


class IterationPredictor:
    """Random-forest predictor of a job's total iterations from completed jobs."""

    def __init__(
        self,
        *,
        min_history: int = 8,
        refit_every: int = 8,
        trees: int = 30,
        max_depth: int = 8,
        seed: int = 0,
    ) -> None:
        if min_history < 1 or refit_every < 1 or trees < 1 or max_depth < 1:
            raise ValueError("min_history, refit_every, trees and max_depth must be >= 1")
        self._min_history = min_history
        self._refit_every = refit_every
        self._trees = trees
        self._max_depth = max_depth
        self._seed = seed
        self._history: list[Completion] = []
        #: The history as :meth:`export` writes it, kept as it grows: the round exports it
        #: whenever the policy learned, and building every row each time made that cost
        #: more than the planning over a long history.
        self._rows: list[tuple[str, str, int, int, float, float]] = []
        self._codes: dict[str, dict[str, int]] = {"user": {}, "job_type": {}}
        #: Fitted (on the first ``_fitted_on`` completions); ``_forest`` is None while
        #: fitted on exact completions only (see :meth:`_fit`).
        self._trained = False
        self._forest: RandomForestRegressor | None = None
        self._fitted_on = 0
        #: Index in the history of the first completion whose actual iterations differ
        #: from its submission (None: none has yet).
        self._first_inexact: int | None = None
        #: How many of the first completions have their user and job type coded.
        self._coded = 0
        self._cache: dict[tuple[str, str, int, int, float], float] = {}

    @property
    def history(self) -> Sequence[Completion]:
        return tuple(self._history)

    @property
    def trained(self) -> bool:
        return self._trained

    def _code(self, kind: str, value: str) -> int:
        table = self._codes[kind]
        return table.setdefault(value, len(table))

    def _code_features(self, user: str, job_type: str) -> tuple[int, int]:
        return self._code("user", user), self._code("job_type", job_type)

    def _row(
        self, user: str, job_type: str, batch: int, gpus: int, submitted: float
    ) -> list[float]:
        user_code, type_code = self._code_features(user, job_type)
        return [
            float(user_code),
            float(type_code),
            float(batch),
            float(gpus),
            math.log(max(submitted, 1.0)),
        ]

    def observe(self, completion: Completion) -> None:
        """Add a completed job; refit when enough new ones have accumulated."""
        if completion.actual <= 0 or completion.submitted <= 0:
            return
        if self._first_inexact is None and _target(completion) != 0.0:
            self._first_inexact = len(self._history)
        self._history.append(completion)
        self._rows.append(completion.as_row())
        new = len(self._history) - self._fitted_on
        if len(self._history) >= self._min_history and (
            not self._trained or new >= self._refit_every
        ):
            self._fit()

    def export(self) -> dict[str, Any]:
        """The history, the feature codes and how much of the history the forest was fitted
        on, as JSON-ready values (see :meth:`restore`); each completion is a tuple, which
        JSON writes as an array, so the rows can be shared with later exports."""
        return {
            "version": MEMORY_VERSION,
            "history": list(self._rows),
            "fitted_on": self._fitted_on if self._trained else 0,
            "codes": {kind: dict(table) for kind, table in self._codes.items()},
        }

    def restore(self, memory: Mapping[str, Any]) -> None:
        """Replace what this predictor knows with an :meth:`export`: the same history, codes
        and forest (refitted on the same rows, so it predicts as the exported one did).
        Raises ValueError for a memory it cannot read; nothing changes then."""
        if memory.get("version") != MEMORY_VERSION:
            raise ValueError(f"a-srpt memory version {memory.get('version')!r} is not supported")
        try:
            history = [
                Completion(str(u), str(t), int(b), int(g), float(s), float(a))
                for u, t, b, g, s, a in memory["history"]
            ]
            fitted_on = int(memory["fitted_on"])
            codes = {
                kind: {str(k): int(v) for k, v in memory["codes"][kind].items()}
                for kind in ("user", "job_type")
            }
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"unreadable a-srpt memory: {exc!r}") from None
        if not 0 <= fitted_on <= len(history):
            raise ValueError(f"a-srpt memory fitted on {fitted_on} of {len(history)} completions")
        self._history = history
        self._rows = [c.as_row() for c in history]
        self._codes = codes
        self._trained = False
        self._forest = None
        self._fitted_on = 0
        self._first_inexact = next((i for i, c in enumerate(history) if _target(c) != 0.0), None)
        self._coded = 0
        self._cache.clear()
        if fitted_on:
            self._fit(fitted_on)

    def _fit(self, count: int | None = None) -> None:
        history = self._history if count is None else self._history[:count]
        if self._first_inexact is None or self._first_inexact >= len(history):
            # Every target is 0: each tree would be one leaf predicting exactly 0, that is
            # the submission itself. Fitting one costs as much as any other fit, and a
            # predictor sees one every ``refit_every`` completions, on a growing history.
            # The codes are given as a fit gives them, so a later forest sees the same.
            for c in history[self._coded :]:
                self._code_features(c.user, c.job_type)
            self._coded = max(self._coded, len(history))
            forest = None
        else:
            forest = self._fit_forest(history)
        self._forest = forest
        self._trained = True
        self._fitted_on = len(history)
        self._cache.clear()

    def _fit_forest(self, history: Sequence[Completion]) -> RandomForestRegressor:
        # Imported here: scikit-learn takes a second or more to import, and every process
        # that loads the policy registry would otherwise pay it.
        from sklearn.ensemble import RandomForestRegressor

        rows = [
            self._row(c.user, c.job_type, c.batch_size, c.num_gpus, c.submitted) for c in history
        ]
        target = [_target(c) for c in history]
        forest = RandomForestRegressor(
            n_estimators=self._trees,
            max_depth=self._max_depth,
            min_samples_leaf=2,
            random_state=self._seed,
            n_jobs=1,
        )
        forest.fit(np.asarray(rows), np.asarray(target))
        return forest

    def predict_many(self, jobs: Sequence[JobView]) -> dict[int, float]:
        """Predicted total iterations per job id (the submitted estimate when untrained or
        trained on exact completions only)."""
        out: dict[int, float] = {}
        todo: list[tuple[int, tuple[str, str, int, int, float]]] = []
        for job in jobs:
            submitted = job.predicted_iterations or job.total_iterations
            if self._forest is None:
                if self._trained:
                    # A forest would code the job's features to predict it; a later one
                    # must see the codes it would have given.
                    self._code_features(job.user, job.job_type)
                out[job.id] = submitted
                continue
            key = (job.user, job.job_type, job.batch_size, job.num_gpus, submitted)
            cached = self._cache.get(key)
            if cached is None:
                todo.append((job.id, key))
            else:
                out[job.id] = cached
        if todo and self._forest is not None:
            rows = np.asarray([self._row(*key) for _, key in todo])
            ratios = self._forest.predict(rows)
            for (job_id, key), ratio in zip(todo, ratios, strict=True):
                value = key[4] * math.exp(float(ratio))
                self._cache[key] = value
                out[job_id] = value
        return out

    def predict(self, job: JobView) -> float:
        return self.predict_many([job])[job.id]


class VirtualSrpt:
    """Preemptive SRPT on one virtual machine, advanced round by round.

    A job's processing time is its predicted GPU-seconds over the machine's speed (GPUs in
    the cluster). What the machine has done for a job is kept as work, not as a remaining
    time, so a new prediction of the job's size moves its remaining time with it. A job is
    forgotten once it leaves the policy's snapshot.
    """

    def __init__(self) -> None:
        self.clock: float | None = None
        self.done: dict[int, float] = {}
        self.finished: dict[int, float] = {}

    def advance(
        self,
        now: float,
        arrivals: Mapping[int, float],
        work: Mapping[int, float],
        speed: float,
    ) -> None:
        """Run the machine up to ``now`` over the jobs present (``arrivals`` by job id)."""
        for gone in [j for j in self.done if j not in arrivals]:
            del self.done[gone]
        for gone in [j for j in self.finished if j not in arrivals]:
            del self.finished[gone]
        clock = now if self.clock is None else self.clock
        # A job that arrived before the machine's clock (or before it existed) joins now:
        # the machine cannot serve the past.
        joined = {j: max(t, clock) for j, t in arrivals.items()}
        for job_id in arrivals:
            self.done.setdefault(job_id, 0.0)
        if speed <= 0:
            self.clock = max(clock, now)
            return
        while clock < now:
            present = [j for j, t in joined.items() if t <= clock and j not in self.finished]
            later = [t for j, t in joined.items() if clock < t < now]
            horizon = min(later, default=now)
            if not present:
                clock = horizon
                continue
            job_id = min(present, key=lambda j: (max(work[j] - self.done[j], 0.0), joined[j], j))
            left = max(work[job_id] - self.done[job_id], 0.0)
            if clock + left / speed <= horizon:
                clock += left / speed
                self.done[job_id] = work[job_id]
                self.finished[job_id] = clock
            else:
                self.done[job_id] += (horizon - clock) * speed
                clock = horizon
        self.clock = max(clock, now)

    def order_keys(self, work: Mapping[int, float]) -> dict[int, tuple[int, float]]:
        """Sort key per job: the finished by virtual completion time, then the rest by the
        order SRPT would complete them in with no more arrivals (remaining work)."""
        keys: dict[int, tuple[int, float]] = {}
        for job_id, done in self.done.items():
            finished = self.finished.get(job_id)
            if finished is not None:
                keys[job_id] = (0, finished)
            else:
                keys[job_id] = (1, max(work.get(job_id, math.inf) - done, 0.0))
        return keys


class ASrptPolicy:
    name = NAME

    def __init__(
        self,
        *,
        min_history: int = 8,
        refit_every: int = 8,
        trees: int = 30,
        max_depth: int = 8,
        seed: int = 0,
        variant: str = "default",
    ) -> None:
        if variant not in VARIANTS:
            raise ValueError(
                f"a-srpt variant must be one of {', '.join(VARIANTS)}, got {variant!r}"
            )
        self.variant = variant
        self.virtual = VirtualSrpt()
        self.predictor = IterationPredictor(
            min_history=min_history,
            refit_every=refit_every,
            trees=trees,
            max_depth=max_depth,
            seed=seed,
        )
        self._last_seen: dict[int, JobView] = {}
        self._last_progress: dict[int, float] = {}
        self._told: set[int] = set()

    # ------------------------------------------------------------------------ memory
    def export_memory(self) -> dict[str, Any]:
        """What the predictor learned (see :class:`RemembersAcrossRestarts`)."""
        return self.predictor.export()

    def import_memory(self, memory: Mapping[str, Any]) -> None:
        self.predictor.restore(memory)

    # ------------------------------------------------------------------ completions
    def observe_completion(self, job: JobView, iterations: float, now: float) -> None:
        """Learn from a job that completed after ``iterations`` (exact, from the caller)."""
        del now
        if job.id in self._told:
            return
        self._told.add(job.id)
        self._last_seen.pop(job.id, None)
        self._learn(job, iterations)

    def _learn(self, job: JobView, iterations: float) -> None:
        self.predictor.observe(
            Completion(
                user=job.user,
                job_type=job.job_type,
                batch_size=job.batch_size,
                num_gpus=job.num_gpus,
                submitted=job.predicted_iterations or job.total_iterations,
                actual=iterations,
            )
        )

    def _infer_completions(self, snapshot: Snapshot) -> None:
        present = {job.id for job in snapshot.jobs}
        for job_id, job in list(self._last_seen.items()):
            if job_id in present:
                continue
            del self._last_seen[job_id]
            progress = self._last_progress.pop(job_id, None)
            if progress is None or job_id in self._told:
                continue  # never planned to run: cancelled, not completed
            submitted = job.predicted_iterations or job.total_iterations
            self._learn(job, min(submitted, job.iterations_done + progress))
        self._told &= present

    # --------------------------------------------------------------------- planning
    def remaining_work(self, snapshot: Snapshot, jobs: Sequence[JobView]) -> dict[int, float]:
        """Predicted remaining GPU-seconds per job (its processing time on the one machine)."""
        predicted = self.predictor.predict_many(jobs)
        out: dict[int, float] = {}
        for job in jobs:
            total = predicted[job.id]
            # A job already past its prediction is assumed close to its end.
            left = max(total - job.iterations_done, 0.05 * total)
            rate = best_rate(snapshot, job)
            out[job.id] = job.num_gpus * left / rate if rate > 0 else math.inf
        return out

    def total_work(self, snapshot: Snapshot, jobs: Sequence[JobView]) -> dict[int, float]:
        """Predicted total GPU-seconds per job on its fastest allowed type."""
        predicted = self.predictor.predict_many(jobs)
        out: dict[int, float] = {}
        for job in jobs:
            rate = best_rate(snapshot, job)
            out[job.id] = job.num_gpus * predicted[job.id] / rate if rate > 0 else math.inf
        return out

    def _virtual_order(
        self, snapshot: Snapshot, now: float, jobs: Sequence[JobView]
    ) -> list[JobView]:
        work = self.total_work(snapshot, snapshot.jobs)
        arrivals = {job.id: job.arrival_time for job in snapshot.jobs}
        self.virtual.advance(now, arrivals, work, snapshot.cluster.num_gpus)
        keys = self.virtual.order_keys(work)
        return sorted(jobs, key=lambda j: (keys[j.id], j.arrival_time, j.id))

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        self._infer_completions(snapshot)
        free = FreeGpus(snapshot.cluster)
        allocations, rest = keep_pinned(snapshot, free)
        reasons: dict[int, str] = {}
        if self.variant == "paper":
            order = self._virtual_order(snapshot, now, rest)
            work: dict[int, float] = {}
        else:
            work = self.remaining_work(snapshot, rest)
            order = sorted(rest, key=lambda j: (work[j.id], j.arrival_time, j.id))
        for rank, job in enumerate(order):
            alloc = self._place(snapshot, job, free)
            if alloc is None:
                if self.variant == "paper":
                    basis = "in the virtual single-machine SRPT schedule"
                else:
                    basis = f"by predicted remaining work ({work[job.id] / 3600:.2f} GPU-hours)"
                reasons[job.id] = (
                    f"waiting: position {rank + 1} {basis}; no {job.num_gpus} free GPUs of "
                    "one allowed type"
                )
                continue
            allocations[job.id] = alloc
        self._last_seen = {job.id: job for job in snapshot.jobs}
        self._last_progress = {
            job_id: allocation_rate(snapshot, snapshot.job(job_id), alloc) * snapshot.round_seconds
            for job_id, alloc in allocations.items()
        }
        return Plan(allocations, reasons)

    @staticmethod
    def _place(snapshot: Snapshot, job: JobView, free: FreeGpus) -> Allocation | None:
        current = job.current
        n = job.num_gpus
        best: tuple[float, int, str] | None = None
        for t in allowed_types(snapshot, job):
            if free.count(t) < n:
                continue
            consolidated = free.max_free_on_one_node(t) >= n
            rate = job_rate(snapshot, job, t, consolidated=consolidated)
            servers = 1 if consolidated else 2
            if best is None or (rate, -servers) > (best[0], -best[1]):
                best = (rate, servers, t)
        if best is None:
            return None
        if (
            current is not None
            and current.num_copies == 1
            and current.shared_with is None
            and not current.folded
            and current_usable(snapshot, job)
            and all(snapshot.cluster.gpu_type(s) == best[2] for s in current.slots)
            and free.take_slots(current.slots)
        ):
            return current
        slots = free.take(n, best[2])
        assert slots is not None
        return allocation_on(snapshot, job, slots)


def make(
    *,
    min_history: int = 8,
    refit_every: int = 8,
    trees: int = 30,
    max_depth: int = 8,
    seed: int = 0,
    variant: str = "default",
) -> ASrptPolicy:
    return ASrptPolicy(
        min_history=min_history,
        refit_every=refit_every,
        trees=trees,
        max_depth=max_depth,
        seed=seed,
        variant=variant,
    )
