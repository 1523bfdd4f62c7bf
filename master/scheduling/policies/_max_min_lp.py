"""Gavel's max-min fairness LP, kept between solves and warm-started.

The LP (see :mod:`master.scheduling.policies.gavel` for its definition) has, per job, one
column per allowed GPU type and two rows (its normalized throughput bounds the max-min
variable ``t``; its time fractions sum to at most 1), plus one capacity row per type.
From one round to the next only a few jobs arrive or leave, so instead of building and
solving a new LP each time, :class:`MaxMinLp` keeps one HiGHS model: it deletes the rows
and columns of the jobs that left, appends those of the jobs that arrived, rescales the
efficiency term of the objective, and re-runs the simplex from the last optimal basis. A
handful of pivots then replaces thousands: at 1,500 jobs, a re-solve after a few
arrivals and departures took 14 ms where a cold solve took 0.7-1.4 s on the same machine.

Jobs the LP cannot tell apart (one GPU count, one coefficient per type: in practice one
job type, size and weight) share one pair of rows and one column per type, the capacity
entries counting their jobs; all of them get the kind's fractions. Any optimum of the
per-job LP, averaged over each kind's jobs, is feasible with the same objective, so the
optimum is the same, with a tenth to a quarter of the rows where a queue repeats a few
dozen kinds of job. A job arriving or leaving then only changes its kind's count (one
coefficient per type), unless it is its kind's first or last.

Warm starting changes no optimum: the max-min value and the efficiency term are the same
as a cold solve's. Where the LP has several optimal vertices (kinds can swap fractions),
the one reached from the last basis may differ from a cold solve's; the same sequence of
job sets always gives the same fractions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

import highspy
import numpy as np
from highspy._core import _Highs as HighsCore

from master.scheduling.views import JobView

#: Smallest weight relative to the largest one the LP uses (see gavel's module docstring):
#: the priorities a job may ask for span 0.001 to 1000, fair share scales them by as little
#: as a millionth more.
MIN_WEIGHT_RATIO = 1e-6
#: Time fractions below this are read as 0.
_ZERO = 1e-9
#: Most kinds of job whose columns are kept; past it they are computed afresh.
_COLUMNS_KEPT = 4096

_INF = highspy.kHighsInf
_NO_INTS = np.empty(0, np.int64)
_NO_FLOATS = np.empty(0)
_OPTIMAL = highspy.HighsModelStatus.kOptimal

# A job's part of the LP: (GPU count, ((type index, coefficient), ...)).
_Columns = tuple[int, tuple[tuple[int, float], ...]]


class _Kind:
    """Jobs the LP cannot tell apart: the same GPU count and the same coefficient on each
    type (jobs of one type, size and weight; also jobs whose throughputs differ by one
    factor throughout). Hashed by identity: :class:`MaxMinLp` makes one per distinct
    part."""

    __slots__ = ("columns", "ident", "num_gpus")

    def __init__(self, ident: int, part: _Columns) -> None:
        self.ident = ident
        self.num_gpus, self.columns = part


# The fractions of a job the LP gives nothing.
_NONE: Mapping[str, float] = MappingProxyType({})


class MaxMinLp:
    """One max-min fairness LP, updated in place as jobs come and go (see the module
    docstring). ``solve`` returns the time fractions ``{job id: {type: x}}``."""

    def __init__(self, *, efficiency_weight: float = 1e-3) -> None:
        if efficiency_weight < 0:
            raise ValueError("efficiency_weight must be >= 0")
        self._efficiency_weight = efficiency_weight
        self._scale: tuple[tuple[tuple[str, int], ...], float] | None = None
        self._types: tuple[str, ...] = ()
        self._model = _new_model()
        # The kinds in the model and their jobs there.
        self._count: dict[_Kind, int] = {}
        # A job's kind by (GPU count, priority, rates per type), for the scale they were
        # computed at (None: no column); one kind object per distinct part.
        self._columns_scale: tuple[tuple[tuple[str, int], ...], float] | None = None
        self._columns: dict[tuple[int, float, tuple[float, ...]], _Kind | None] = {}
        self._kinds: dict[_Columns, _Kind] = {}
        # Per job id, the rates object, GPU count and priority its kind was last found for:
        # a caller that hands the same rates object again (one per kind of job) is answered
        # by one lookup by id instead of hashing the rates.
        self._job_kind: dict[int, tuple[tuple[float, ...], int, float, _Kind | None]] = {}
        # Per column after ``t`` (column 0): its kind's ident, type index, coefficient and
        # jobs; per row after the capacity rows: its kind's ident.
        # Arrays: a kind leaving takes its entries out of them with a mask, not a loop.
        self._col_kind = _NO_INTS
        self._col_type = _NO_INTS
        self._col_coef = _NO_FLOATS
        self._col_jobs = _NO_FLOATS
        self._row_kind = _NO_INTS
        self._jobs = 0
        #: Simplex iterations of the last solve (a warm re-solve takes a few).
        self.iterations = 0
        #: Solves that started from scratch (first solve, new capacity or weights, failure).
        self.cold_solves = 0

    def __reduce__(self) -> tuple[type[MaxMinLp], tuple[()], dict[str, float]]:
        # A copy (the round plans with copies of a failing policy; pickling) starts cold:
        # HiGHS's model cannot be copied, and a cold solve reaches the same optimum.
        return MaxMinLp, (), {"_efficiency_weight": self._efficiency_weight}

    def __setstate__(self, state: dict[str, float]) -> None:
        self._efficiency_weight = state["_efficiency_weight"]

    @property
    def kinds(self) -> int:
        """Kinds of job in the model: each has one pair of rows and its columns."""
        return len(self._count)

    def solve(
        self,
        jobs: Sequence[JobView],
        capacity: Mapping[str, int],
        throughput: Mapping[tuple[int, str], float],
    ) -> dict[int, Mapping[str, float]]:
        types = lp_types(capacity)
        rates = [tuple(throughput.get((job.id, t), 0.0) for t in types) for job in jobs]
        return self.solve_rates(jobs, capacity, rates)

    def solve_rates(
        self,
        jobs: Sequence[JobView],
        capacity: Mapping[str, int],
        rates: Sequence[tuple[float, ...]],
    ) -> dict[int, Mapping[str, float]]:
        """:meth:`solve` with each job's throughputs given per type of :func:`lp_types`
        (``rates[i]`` for ``jobs[i]``, 0 where not allowed): a caller that knows them per
        kind of job need not spell them out per job. The jobs of one kind share one
        read-only mapping of fractions."""
        types = lp_types(capacity)
        result: dict[int, Mapping[str, float]] = dict.fromkeys([job.id for job in jobs], _NONE)
        total = float(sum(capacity[t] for t in types))
        if not jobs or total == 0:
            return result
        heaviest = max(job.priority for job in jobs)
        scale = (tuple((t, capacity[t]) for t in types), heaviest)
        if scale != self._columns_scale or len(self._columns) > _COLUMNS_KEPT:
            self._columns_scale = scale
            self._columns = {}
            self._kinds = {}
            self._job_kind = {}
            self._scale = None  # the model's kinds belong to the cache just dropped
        known = self._columns
        by_job = self._job_kind
        if len(by_job) > _COLUMNS_KEPT:
            by_job.clear()
        members: list[tuple[int, _Kind]] = []
        counts: dict[_Kind, int] = {}
        for job, job_rates in zip(jobs, rates, strict=True):
            job_id = job.id
            seen = by_job.get(job_id)
            if (
                seen is not None
                and seen[0] is job_rates
                and seen[1] == job.num_gpus
                and seen[2] == job.priority
            ):
                kind = seen[3]
            else:
                key = (job.num_gpus, job.priority, job_rates)
                if key in known:
                    kind = known[key]
                else:
                    kind = known[key] = self._kind_of(
                        job_columns(
                            job.num_gpus, job.priority, job_rates, types, capacity, total, heaviest
                        )
                    )
                by_job[job_id] = (job_rates, job.num_gpus, job.priority, kind)
            if kind is not None:
                members.append((job_id, kind))
                counts[kind] = counts.get(kind, 0) + 1
        if not members:
            return result
        if scale != self._scale:
            self._reset(scale, types)
        held = self._count
        gone = [kind for kind in held if kind not in counts]
        if gone:
            self._remove(gone)
        recounted = {k: c for k, c in counts.items() if k in held and held[k] != c}
        if recounted:
            self._recount(recounted)
        self._add({k: c for k, c in counts.items() if k not in held})
        self._jobs = len(members)
        if not self._run():
            # A model the simplex could not finish from its basis: once more from scratch.
            kept = dict(self._count)
            self._reset(scale, types)
            self._add(kept)
            if not self._run():
                status = self._model.modelStatusToString(self._model.getModelStatus())
                self._reset(None, ())
                raise RuntimeError(f"gavel: the allocation LP failed: {status}")
        values = np.clip(np.asarray(self._model.getSolution().col_value)[1:], 0.0, 1.0)
        cols = np.flatnonzero(values > _ZERO)
        shares: dict[int, dict[str, float]] = {}
        for ident, type_index, value in zip(
            self._col_kind[cols].tolist(),
            self._col_type[cols].tolist(),
            values[cols].tolist(),
            strict=True,
        ):
            share = shares.get(ident)
            if share is None:
                shares[ident] = {types[type_index]: value}
            else:
                share[types[type_index]] = value
        # Read-only: a kind's jobs share one.
        frozen = {ident: MappingProxyType(share) for ident, share in shares.items()}
        for job_id, kind in members:
            found = frozen.get(kind.ident)
            if found is not None:
                result[job_id] = found
        return result

    def _kind_of(self, part: _Columns) -> _Kind | None:
        if not part[1]:
            return None
        kind = self._kinds.get(part)
        if kind is None:
            kind = self._kinds[part] = _Kind(len(self._kinds), part)
        return kind

    def _reset(
        self, scale: tuple[tuple[tuple[str, int], ...], float] | None, types: tuple[str, ...]
    ) -> None:
        self._scale = scale
        self._types = types
        self._model = _new_model()
        self._count = {}
        self._col_kind, self._col_type, self._row_kind = _NO_INTS, _NO_INTS, _NO_INTS
        self._col_coef, self._col_jobs = _NO_FLOATS, _NO_FLOATS
        self.cold_solves += 1
        model = self._model
        model.addCol(-1.0, 0.0, _INF, 0, np.empty(0, np.int32), np.empty(0))  # t
        if scale is None:
            return
        for _, count in scale[0]:
            model.addRow(-_INF, float(count), 0, np.empty(0, np.int32), np.empty(0))

    def _remove(self, kinds: Sequence[_Kind]) -> None:
        idents = {kind.ident for kind in kinds}
        col_gone = _among(self._col_kind, idents)
        row_gone = _among(self._row_kind, idents)
        cols = np.flatnonzero(col_gone).astype(np.int32)
        rows = np.flatnonzero(row_gone).astype(np.int32)
        offset = len(self._types)
        # Column 0 is t and the first rows are the capacities: neither is ever deleted.
        self._model.deleteCols(len(cols), cols + 1)
        self._model.deleteRows(len(rows), rows + offset)
        keep = ~col_gone
        self._col_kind = self._col_kind[keep]
        self._col_type = self._col_type[keep]
        self._col_coef = self._col_coef[keep]
        self._col_jobs = self._col_jobs[keep]
        self._row_kind = self._row_kind[~row_gone]
        for kind in kinds:
            del self._count[kind]

    def _recount(self, counts: Mapping[_Kind, int]) -> None:
        """A kind's jobs take ``count`` times its GPU count of each type's capacity."""
        model = self._model
        for kind, count in counts.items():
            cols = np.flatnonzero(self._col_kind == kind.ident)
            self._col_jobs[cols] = count
            gpus = float(count * kind.num_gpus)
            for col, type_index in zip(cols.tolist(), self._col_type[cols].tolist(), strict=True):
                model.changeCoeff(type_index, col + 1, gpus)
            self._count[kind] = count

    def _add(self, counts: Mapping[_Kind, int]) -> None:
        if not counts:
            return
        model = self._model
        first_row = model.getNumRow()
        # Two rows per kind: "t - sum coef x <= 0" (its entry in t now, the x entries with
        # the columns) and "sum x <= 1".
        kinds = len(counts)
        lower = np.full(2 * kinds, -_INF)
        upper = np.tile(np.array([0.0, 1.0]), kinds)
        starts = np.repeat(np.arange(kinds, dtype=np.int32), 2) + np.tile(
            np.array([0, 1], np.int32), kinds
        )
        model.addRows(
            2 * kinds, lower, upper, kinds, starts, np.zeros(kinds, np.int32), np.ones(kinds)
        )
        col_starts: list[int] = []
        indices: list[int] = []
        values: list[float] = []
        row_kind: list[int] = []
        col_kind: list[int] = []
        col_type: list[int] = []
        col_coef: list[float] = []
        col_jobs: list[float] = []
        for k, (kind, count) in enumerate(counts.items()):
            fair = first_row + 2 * k
            ident = kind.ident
            row_kind += [ident, ident]
            gpus = float(count * kind.num_gpus)
            for type_index, coef in kind.columns:
                col_starts.append(len(indices))
                indices += [fair, fair + 1, type_index]
                values += [-coef, 1.0, gpus]
                col_kind.append(ident)
                col_type.append(type_index)
                col_coef.append(coef)
                col_jobs.append(float(count))
            self._count[kind] = count
        self._row_kind = np.concatenate([self._row_kind, np.asarray(row_kind, np.int64)])
        self._col_kind = np.concatenate([self._col_kind, np.asarray(col_kind, np.int64)])
        self._col_type = np.concatenate([self._col_type, np.asarray(col_type, np.int64)])
        self._col_coef = np.concatenate([self._col_coef, np.asarray(col_coef, float)])
        self._col_jobs = np.concatenate([self._col_jobs, np.asarray(col_jobs, float)])
        new = len(col_starts)
        model.addCols(
            new,
            np.zeros(new),
            np.zeros(new),
            np.ones(new),
            len(indices),
            np.asarray(col_starts, np.int32),
            np.asarray(indices, np.int32),
            np.asarray(values),
        )

    def _run(self) -> bool:
        model = self._model
        n = len(self._col_coef)
        # The efficiency term sums over the jobs (each of a kind's jobs has its columns'
        # fractions) and is averaged over them, so every cost moves with their count.
        costs = np.empty(n + 1)
        costs[0] = -1.0
        costs[1:] = self._col_coef * self._col_jobs * (-self._efficiency_weight / self._jobs)
        model.changeColsCost(n + 1, np.arange(n + 1, dtype=np.int32), costs)
        model.run()
        self.iterations = int(model.getInfo().simplex_iteration_count)
        return bool(model.getModelStatus() == _OPTIMAL)


def _among(values: np.ndarray, wanted: set[int]) -> np.ndarray:
    """Where ``values`` is in ``wanted``: compared one by one for the few kinds that leave
    at a time, where np.isin's sorting costs more."""
    if len(wanted) > 8:
        return np.isin(values, np.fromiter(wanted, np.int64, len(wanted)))
    found = np.zeros(len(values), dtype=bool)
    for value in wanted:
        found |= values == value
    return found


def lp_types(capacity: Mapping[str, int]) -> tuple[str, ...]:
    """The GPU types the LP has columns for: those with GPUs, sorted."""
    return tuple(sorted(t for t, c in capacity.items() if c > 0))


def _new_model() -> HighsCore:
    # The solver's core class: highspy.Highs adds Python callbacks, and creating the first
    # one in a process prints a banner on standard output (into `hctl simulate --json`),
    # before output can be turned off.
    model = HighsCore()
    model.setOptionValue("output_flag", False)
    # A warm basis makes presolve pointless (and it would discard the basis).
    model.setOptionValue("presolve", "off")
    model.setOptionValue("solver", "simplex")
    return model


def job_columns(
    num_gpus: int,
    priority: float,
    rates: tuple[float, ...],
    types: tuple[str, ...],
    capacity: Mapping[str, int],
    total: float,
    heaviest: float,
) -> _Columns:
    """A job's coefficients per allowed type from its GPU count, priority and throughput per
    type (``rates``, in ``types``' order): its throughput there, times its GPU count, over
    its weight times its throughput on an equal share of every type."""
    equal_share = sum(r * capacity[t] / total for r, t in zip(rates, types, strict=True))
    if equal_share <= 0:
        return num_gpus, ()
    weight = max(priority / heaviest, MIN_WEIGHT_RATIO)
    return num_gpus, tuple(
        (k, r * num_gpus / (weight * equal_share))
        for k, (r, t) in enumerate(zip(rates, types, strict=True))
        if r > 0 and num_gpus <= capacity[t]
    )
