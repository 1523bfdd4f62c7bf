"""Heterogeneity-aware max-min fairness (Gavel, Narayanan et al., OSDI 2020).

Allocation: a linear program over time fractions ``x[j, t]`` (the share of time job j
should spend on GPU type t) that maximizes the minimum, over jobs, of the job's
normalized effective throughput::

    maximize  min_j  sum_t  thr[j,t] * n_j * x[j,t] / (w_j * equal_share_thr_j)
    s.t.      sum_t x[j,t] <= 1                 (one placement at a time)
              sum_j n_j * x[j,t] <= capacity_t  (GPUs of each type)
              0 <= x <= 1

where ``n_j`` is the job's GPU count, ``w_j`` its priority weight and
``equal_share_thr_j`` its throughput under a capacity-proportional share of every
type, so that "1" means "as fast as an equal share". Multiplying by ``n_j`` makes a job
on n GPUs receive 1/n of the time of a one-GPU job with equal throughput, i.e. equal
GPU-time. A small ``efficiency_weight`` term also rewards total normalized throughput,
which picks, among the max-min optimal vertices, one that does not leave GPUs idle.
It is solved with HiGHS from scratch (its defaults, presolve included) while it holds
fewer than ``warm_from`` jobs (100 by default), where a solve takes milliseconds; from
that size on it is kept from one solve to the next and warm-started from its last basis
(:mod:`master.scheduling.policies._max_min_lp`), a few pivots instead of thousands. Both
reach the same optimum; where several vertices are optimal (identical jobs may swap
fractions) the warm-started one may differ from a cold solve's, so the threshold keeps
small clusters' plans exactly what a fresh solve gives (no bundled or generated trace of
docs/results.md has more than 96 jobs active at once). ``warm_from=0`` warm-starts
always.

Weights are divided by the largest one, which scales the whole objective and so changes
no optimal ``x``, and kept at least ``MIN_WEIGHT_RATIO`` (in
:mod:`master.scheduling.policies._max_min_lp`) of it: a job with a millionth of another's
weight is owed next to nothing by the max-min term either way,
while coefficients spread wider make the solver fail (a weight of 5e-324 made them
infinite).

Rounds: as in Gavel, each round every (job, type) gets priority = ``x[j,t]`` divided by
the fraction of time the job actually received on t since the allocation was computed;
types are visited fastest first, within a type by descending priority, and each job
takes the first type where its GPU count still fits. Placement keeps a job on its
current GPUs when it stays on the same type, otherwise consolidates it.

The LP is recomputed when the set of jobs changes, but at most once every
``min_recompute_s`` seconds (Gavel's simulator uses 1920 s; 0, the default here,
recomputes whenever the job set changed). Jobs that arrived after the last solve have
priority 0 and only use GPUs nobody else wants until the next solve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import highspy
import numpy as np
from highspy._core import _Highs as HighsCore

from master.scheduling.placement import FreeGpus, repack
from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.policies._greedy import current_slots_usable
from master.scheduling.policies._max_min_lp import MaxMinLp, job_columns, lp_types
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import JobView, Snapshot

NAME = "gavel"

_UNSEEN_PRIORITY = 1e9
_INF = highspy.kHighsInf
_COLWISE = int(highspy.MatrixFormat.kColwise)
_MINIMIZE = int(highspy.ObjSense.kMinimize)
_OPTIMAL = highspy.HighsModelStatus.kOptimal
#: Jobs in the LP from which it is warm-started rather than solved from scratch.
WARM_FROM = 100


def solve_max_min(
    jobs: Sequence[JobView],
    capacity: Mapping[str, int],
    throughput: Mapping[tuple[int, str], float],
    *,
    efficiency_weight: float = 1e-3,
) -> dict[int, dict[str, float]]:
    """The max-min fair time fractions ``{job id: {type: x}}`` (see the module docstring).

    ``throughput[(job id, type)]`` is the job's iterations/s on its GPU count of that type;
    pairs that are absent or zero are not allowed.
    """
    types = lp_types(capacity)
    rates = [tuple(throughput.get((job.id, t), 0.0) for t in types) for job in jobs]
    return _solve_max_min_rates(jobs, capacity, rates, efficiency_weight)


def _cold_model() -> HighsCore:
    # HiGHS with its defaults (presolve, its choice of solver), as SciPy's linprog runs it
    # with method="highs": on the 920 cold solves of the 10,000-job scale trace the two
    # give the same fractions. The core class, as in _max_min_lp, so that no banner is
    # printed.
    model = HighsCore()
    model.setOptionValue("output_flag", False)
    return model


def _solve_max_min_rates(
    jobs: Sequence[JobView],
    capacity: Mapping[str, int],
    rates: Sequence[tuple[float, ...]],
    efficiency_weight: float,
) -> dict[int, dict[str, float]]:
    """:func:`solve_max_min` with each job's throughputs per type of :func:`lp_types`."""
    types = lp_types(capacity)
    total = float(sum(capacity[t] for t in types))
    result: dict[int, dict[str, float]] = {job.id: {} for job in jobs}
    if not jobs or total == 0:
        return result
    heaviest = max(job.priority for job in jobs)
    # Jobs of one kind (GPU count, priority, rates) have the same coefficients.
    known: dict[tuple[int, float, tuple[float, ...]], tuple[tuple[int, float], ...]] = {}
    col_job: list[int] = []
    col_type: list[int] = []
    col_coef: list[float] = []
    for i, (job, job_rates) in enumerate(zip(jobs, rates, strict=True)):
        key = (job.num_gpus, job.priority, job_rates)
        part = known.get(key)
        if part is None:
            part = known[key] = job_columns(
                job.num_gpus, job.priority, job_rates, types, capacity, total, heaviest
            )[1]
        for type_index, coef in part:
            col_job.append(i)
            col_type.append(type_index)
            col_coef.append(coef)
    if not col_job:
        return result
    n_x = len(col_job)
    n_jobs = len(jobs)
    t_col = n_x  # the max-min variable
    # Rows 0..n_jobs-1:   t - sum_t coef x <= 0   (only for jobs with at least one column)
    # Rows n_jobs..2n-1:  sum_t x <= 1
    # Rows 2n..2n+T-1:    sum_j n_j x <= capacity_t
    # Per column its three entries, in that order; then t's entry in each job's first row.
    job_of = np.asarray(col_job, dtype=np.int64)
    coef_of = np.asarray(col_coef, dtype=float)
    gpus = np.asarray([float(job.num_gpus) for job in jobs])
    with_columns = np.unique(job_of)
    # Column-wise, as the solver keeps it: each x column's three entries in row order (its
    # job's max-min row, its job's one-placement row, its type's capacity row), then t's
    # entry in each job's max-min row.
    index = np.concatenate(
        [
            np.stack(
                [job_of, job_of + n_jobs, np.asarray(col_type, dtype=np.int64) + 2 * n_jobs],
                axis=1,
            ).ravel(),
            with_columns,
        ]
    ).astype(np.int32)
    value = np.concatenate(
        [
            np.stack([-coef_of, np.ones(n_x), gpus[job_of]], axis=1).ravel(),
            np.ones(len(with_columns)),
        ]
    )
    start = np.empty(n_x + 2, dtype=np.int32)
    start[: n_x + 1] = np.arange(0, 3 * n_x + 1, 3, dtype=np.int32)
    start[n_x + 1] = len(index)
    n_rows = 2 * n_jobs + len(types)
    row_upper = np.concatenate(
        [np.zeros(n_jobs), np.ones(n_jobs), np.array([capacity[t] for t in types], dtype=float)]
    )
    objective = np.empty(n_x + 1)
    objective[t_col] = -1.0
    active = max(1, len(with_columns))
    objective[:n_x] = -efficiency_weight * coef_of / active
    col_upper = np.ones(n_x + 1)
    col_upper[t_col] = _INF
    model = _cold_model()
    model.passModel(
        n_x + 1,
        n_rows,
        len(index),
        _COLWISE,
        _MINIMIZE,
        0.0,
        objective,
        np.zeros(n_x + 1),
        col_upper,
        np.full(n_rows, -_INF),
        row_upper,
        start,
        index,
        value,
        np.zeros(n_x + 1, dtype=np.int32),  # every column continuous
    )
    model.run()
    if model.getModelStatus() != _OPTIMAL:
        raise RuntimeError(
            "gavel: the allocation LP failed: " + model.modelStatusToString(model.getModelStatus())
        )
    solution = np.asarray(model.getSolution().col_value)
    x = np.clip(solution, 0.0, 1.0)
    for col in np.flatnonzero(x[:n_x] > 1e-9):
        result[jobs[col_job[col]].id][types[col_type[col]]] = float(x[col])
    return result


_Kind = tuple[str, int, frozenset[str], frozenset[str] | None]
#: A kind of job's GPU types: those it may use where it makes progress (in the order of
#: ``sorted(capacity)``), and its throughput on each type of :func:`lp_types` (0 where it
#: may not run).
_KindRates = tuple[tuple[str, ...], tuple[float, ...]]


class _RateCache:
    """Throughputs per kind of job (type, GPU count, allowed types), kept while the model
    object and the cluster's capacity stay (the daemon swaps in a new model when
    measurements change it). A copy starts empty: the model it would hold cannot be
    copied."""

    def __init__(self) -> None:
        self._model: object = None
        self._capacity: tuple[tuple[str, int], ...] = ()
        self._rates: dict[_Kind, _KindRates] = {}

    def __reduce__(self) -> tuple[type[_RateCache], tuple[()]]:
        return _RateCache, ()  # copies and pickles start empty

    def kept_for(self, model: ThroughputModel, capacity: Mapping[str, int]) -> _KindLookup:
        key = tuple(sorted(capacity.items()))
        if model is not self._model or key != self._capacity:
            self._model, self._capacity, self._rates = model, key, {}
        return _KindLookup(self._rates, model, capacity)


class _KindLookup:
    """:class:`_RateCache`'s entries for one model and capacity, filled as asked."""

    __slots__ = ("_lp_types", "_model", "_rates", "_types")

    def __init__(
        self,
        rates: dict[_Kind, _KindRates],
        model: ThroughputModel,
        capacity: Mapping[str, int],
    ) -> None:
        self._rates = rates
        self._model = model
        self._types = sorted(capacity)
        self._lp_types = lp_types(capacity)

    def of(self, job: JobView) -> _KindRates:
        kind = (job.job_type, job.num_gpus, job.allowed_gpu_types, job.memory_gpu_types)
        found = self._rates.get(kind)
        if found is None:
            model = self._model
            rate = {
                t: model.throughput(job.job_type, t, job.num_gpus)
                for t in self._types
                if job.allows(t)
            }
            found = self._rates[kind] = (
                tuple(t for t, r in rate.items() if r > 0),
                tuple(rate.get(t, 0.0) for t in self._lp_types),
            )
        return found


class _MadeAllocations:
    """The allocations the placement made, by (GPUs, global batch), up to
    ``_MADE_KEPT`` of them. A move the round holds back (it does not pay) is proposed again
    the next round on the same GPUs: the allocation is then the same object, which costs
    a lookup instead of a batch split and checks, and which every cache keyed by
    allocation knows. A copy starts empty."""

    def __init__(self) -> None:
        self._made: dict[tuple[tuple[GpuSlot, ...], int], Allocation] = {}

    def __reduce__(self) -> tuple[type[_MadeAllocations], tuple[()]]:
        return _MadeAllocations, ()

    def on(self, slots: tuple[GpuSlot, ...], batch_size: int) -> Allocation:
        key = (slots, batch_size)
        alloc = self._made.get(key)
        if alloc is None:
            if len(self._made) >= _MADE_KEPT:
                self._made = {}
            alloc = self._made[key] = Allocation.on(slots, batch_size)
        return alloc


_MADE_KEPT = 4096


def _arrival_key(
    entry: tuple[float, int, JobView, tuple[str, ...], Mapping[str, float]],
) -> tuple[float, int]:
    return entry[0], entry[1]


class GavelPolicy:
    name = NAME

    def __init__(
        self,
        *,
        min_recompute_s: float = 0.0,
        efficiency_weight: float = 1e-3,
        warm_from: int = WARM_FROM,
    ) -> None:
        if min_recompute_s < 0:
            raise ValueError("min_recompute_s must be >= 0")
        if warm_from < 0:
            raise ValueError(f"warm_from must be >= 0, got {warm_from}")
        self._warm_from = warm_from
        if efficiency_weight < 0:
            raise ValueError("efficiency_weight must be >= 0")
        self._min_recompute_s = min_recompute_s
        self._efficiency_weight = efficiency_weight
        self._lp = MaxMinLp(efficiency_weight=efficiency_weight)
        self._rates = _RateCache()
        self._made = _MadeAllocations()
        self._allocation: Mapping[int, Mapping[str, float]] = {}
        self._solved_for: frozenset[int] = frozenset()
        self._solved_capacity: dict[str, int] = {}
        self._last_solve: float | None = None
        self._received: dict[int, dict[str, float]] = {}
        self._elapsed = 0.0
        self._last_now: float | None = None
        self.solves = 0

    @property
    def cold_solves(self) -> int:
        """Times the kept (warm-started) LP was built from scratch."""
        return self._lp.cold_solves

    @property
    def allocation(self) -> Mapping[int, Mapping[str, float]]:
        """The current time fractions from the last solve."""
        return self._allocation

    def _account(self, snapshot: Snapshot, now: float) -> None:
        """Credit the time since the last round to the type each running job used."""
        if self._last_now is None:
            self._last_now = now
            return
        delta = max(0.0, now - self._last_now)
        self._last_now = now
        if delta == 0:
            return
        self._elapsed += delta
        type_of = snapshot.cluster.type_by_slot.get
        received = self._received
        for job in snapshot.jobs:
            current = job.current
            if current is None:
                continue
            gpu_type = type_of(current.slots[0])
            if gpu_type is None:
                continue
            per_type = received.get(job.id)
            if per_type is None:
                received[job.id] = {gpu_type: delta}
            else:
                per_type[gpu_type] = per_type.get(gpu_type, 0.0) + delta

    def _maybe_solve(self, snapshot: Snapshot, now: float, ids: frozenset[int]) -> None:
        capacity = snapshot.cluster.capacity_by_type()
        changed = ids != self._solved_for or capacity != self._solved_capacity
        if not changed:
            return
        due = (
            self._last_solve is None
            or not self._allocation
            or now - self._last_solve >= self._min_recompute_s
            or not (self._solved_for & ids)
        )
        if not due:
            return
        kinds = self._rates.kept_for(snapshot.throughput, capacity)
        rates = [kinds.of(job)[1] for job in snapshot.jobs]
        if len(snapshot.jobs) >= self._warm_from:
            self._allocation = self._lp.solve_rates(snapshot.jobs, capacity, rates)
        else:
            self._allocation = _solve_max_min_rates(
                snapshot.jobs, capacity, rates, self._efficiency_weight
            )
        self.solves += 1
        self._solved_for = ids
        self._solved_capacity = capacity
        self._last_solve = now
        self._received = {}
        self._elapsed = 0.0

    def priority(self, job_id: int, gpu_type: str) -> float:
        return self._priority(
            self._allocation.get(job_id, {}), self._received.get(job_id, {}), gpu_type
        )

    def _priority(
        self, share: Mapping[str, float], received: Mapping[str, float], gpu_type: str
    ) -> float:
        """:meth:`priority` from the job's time fractions and time received per type."""
        x = share.get(gpu_type, 0.0)
        if x <= 0:
            return 0.0
        got = received.get(gpu_type, 0.0)
        if got <= 0 or self._elapsed <= 0:
            return x * _UNSEEN_PRIORITY
        return x / (got / self._elapsed)

    def plan(self, snapshot: Snapshot, now: float) -> Plan:
        self._account(snapshot, now)
        ids = frozenset(job.id for job in snapshot.jobs)
        self._maybe_solve(snapshot, now, ids)
        if not ids.issuperset(self._received):
            self._received = {k: v for k, v in self._received.items() if k in ids}
        cluster = snapshot.cluster
        model = snapshot.throughput
        capacity = cluster.capacity_by_type()
        types = sorted(capacity, key=lambda t: (-model.speed(t), t))
        unclaimed = dict(capacity)
        chosen: dict[int, str] = {}
        keep: dict[int, tuple[GpuSlot, ...]] = {}
        # Non-preemptible running jobs stay where they are.
        for job in snapshot.jobs:
            if (
                job.current is not None
                and not job.preemptible
                and current_slots_usable(snapshot, job)
            ):
                for slot in job.current.slots:
                    unclaimed[cluster.gpu_type(slot)] -= 1
                keep[job.id] = job.current.slots
        # Per type, its candidates with a share of it as sort keys: highest priority
        # first, then the larger share, the earlier arrival, the lower id (unique, so the
        # job is never compared). A candidate without a share of the type has priority 0
        # and comes after them, by arrival and id: those are walked in one list, built
        # only when some job is left after a type's shares. A type the job may not use,
        # or on which it makes no progress, is left out.
        ranked: dict[str, list[tuple[float, float, float, int, JobView]]] = {t: [] for t in types}
        unshared: list[tuple[float, int, JobView, tuple[str, ...], Mapping[str, float]]] = []
        kinds = self._rates.kept_for(model, capacity)
        share_of, received_of = self._allocation.get, self._received.get
        elapsed = self._elapsed
        no_share: dict[str, float] = {}
        for job in snapshot.jobs:
            job_id = job.id
            if keep and job_id in keep:
                continue
            share = share_of(job_id, no_share)
            got = received_of(job_id, no_share)
            usable = kinds.of(job)[0]
            unshared.append((job.arrival_time, job_id, job, usable, share))
            for t in usable:
                # _priority's arithmetic written out: it runs for every job and type.
                x = share.get(t, 0.0)
                if x <= 0:
                    continue
                received = got.get(t, 0.0)
                if received <= 0 or elapsed <= 0:
                    priority = x * _UNSEEN_PRIORITY
                else:
                    priority = x / (received / elapsed)
                ranked[t].append((-priority, -x, job.arrival_time, job_id, job))
        candidates = len(unshared)
        by_arrival = False
        for t in types:
            if len(chosen) == candidates:
                break  # every job has its type
            entries = ranked[t]
            entries.sort()
            left = unclaimed[t]
            for entry in entries:
                job_id = entry[3]
                if job_id in chosen:
                    continue
                n = entry[4].num_gpus
                if left < n:
                    continue
                left -= n
                chosen[job_id] = t
            if len(chosen) < candidates:
                if not by_arrival:
                    unshared.sort(key=_arrival_key)
                    by_arrival = True
                for _, job_id, job, kept_types, fractions in unshared:
                    if job_id in chosen or t not in kept_types or fractions.get(t, 0.0) > 0:
                        continue
                    n = job.num_gpus
                    if left < n:
                        continue
                    left -= n
                    chosen[job_id] = t
            unclaimed[t] = left
        return self._place(snapshot, chosen, keep)

    def _place(
        self, snapshot: Snapshot, chosen: dict[int, str], keep: dict[int, tuple[GpuSlot, ...]]
    ) -> Plan:
        cluster = snapshot.cluster
        allocations: dict[int, Allocation] = {}
        reasons: dict[int, str] = {}
        jobs = snapshot.jobs_by_id()
        # Largest jobs first for locality; jobs staying on their type keep their GPUs.
        order = [j for _, j in sorted((-jobs[j].num_gpus, j) for j in chosen)]
        staying: dict[int, Allocation] = {}
        type_counts = cluster.type_counts
        for job_id in order:
            current = jobs[job_id].current
            if current is None:
                continue
            # All usable and of the chosen type, which the job may use: what
            # current_slots_usable asks is then true as well.
            counts = type_counts(current)
            if counts is None:
                continue
            gpu_type = chosen[job_id]
            if len(counts) == 1:
                if counts[0][0] == gpu_type:
                    staying[job_id] = current
            elif all(t == gpu_type for t, _ in counts):
                staying[job_id] = current
        held = [alloc for job_id in keep if (alloc := jobs[job_id].current) is not None]
        held += staying.values()
        taken, disjoint = cluster.held_by_place(held)
        # Kept and staying jobs' GPUs are all usable (see above and current_slots_usable).
        if disjoint:
            # No two of them share a GPU: taking them one at a time would succeed for each,
            # so they are taken at once, server by server.
            free = FreeGpus.without(cluster, taken)
            for job_id in keep:
                current = jobs[job_id].current
                assert current is not None
                allocations[job_id] = current
            allocations.update(staying)
            pending = [job_id for job_id in order if job_id not in staying]
        else:
            free = FreeGpus(cluster)
            for job_id, kept in keep.items():
                current = jobs[job_id].current
                if current is not None and free.take_slots(kept):
                    allocations[job_id] = current
            pending = []
            for job_id in order:
                current = staying.get(job_id)
                if current is not None and free.take_slots(current.slots):
                    allocations[job_id] = current
                else:
                    pending.append(job_id)
        for job_id in pending:
            job = jobs[job_id]
            slots = free.take(job.num_gpus, chosen[job_id])
            if slots is None:
                reasons[job_id] = f"waiting: no {job.num_gpus} free {chosen[job_id]} GPUs"
                continue
            allocations[job_id] = self._made.on(slots, job.batch_size)
        for job in snapshot.jobs:
            if job.id not in allocations and job.id not in reasons:
                share = self._allocation.get(job.id, {})
                if share:
                    text = ", ".join(f"{x:.2f} of {t}" for t, x in sorted(share.items()))
                    reasons[job.id] = (
                        f"waiting: other jobs are further below their fair share ({text})"
                    )
                else:
                    reasons[job.id] = (
                        "waiting: no fair share yet (allocation not recomputed since arrival)"
                    )
        # The round's packing of spread jobs, on this pass's ledger (the usable GPUs no
        # allocation holds) rather than on one the round would build again.
        running = {
            job_id: current
            for job_id in allocations
            if (current := jobs[job_id].current) is not None
        }
        allocations.update(repack(snapshot, allocations, running, free))
        return Plan(allocations, reasons, packed=True)


def make(
    *, min_recompute_s: float = 0.0, efficiency_weight: float = 1e-3, warm_from: int = WARM_FROM
) -> GavelPolicy:
    return GavelPolicy(
        min_recompute_s=min_recompute_s, efficiency_weight=efficiency_weight, warm_from=warm_from
    )
