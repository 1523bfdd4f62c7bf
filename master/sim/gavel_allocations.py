"""The allocations Gavel's policies compute, as its simulator computes them.

Gavel's max-min and finish-time-fairness programs have many optimal solutions: with
every throughput 1 (``max_min_fairness``) any split of a job's time over the GPU types
is as good as any other, and in the heterogeneity-aware programs only the worst-off jobs
are pinned down. Which optimum is returned decides which GPUs the rounds hand out, so it
decides the JCTs. Gavel solves the programs with ECOS, a primal-dual interior-point
method, whose iterates approach the analytic centre of the optimal set: a job's time is
spread over the types roughly in proportion to their capacity, and jobs that are not
worst off share the slack. A simplex solver (HiGHS, used by the daemon's ``gavel``)
returns a vertex instead, putting each job on one type; on Gavel's 15-job trace under
``max_min_fairness`` that moves the average JCT from 1.68 h to 1.34 h.

So this module states Gavel's programs with exactly their constraints (``x >= 0``, at
most one unit of time per job, GPUs per type; no others, since every constraint shifts
the centre) and solves them with ECOS. The daemon's policies are not touched.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from master.scheduling.views import JobView

Fractions = dict[int, dict[str, float]]


class AllocationError(RuntimeError):
    """The solver found no allocation."""


def _columns(
    jobs: Sequence[JobView],
    types: Sequence[str],
    throughput: Mapping[tuple[int, str], float],
) -> list[tuple[int, str]]:
    return [(i, t) for i, job in enumerate(jobs) for t in types if (job.id, t) in throughput]


def _base_rows(
    jobs: Sequence[JobView],
    types: Sequence[str],
    capacity: Mapping[str, int],
    columns: Sequence[tuple[int, str]],
    width: int,
) -> tuple[list[int], list[int], list[float], list[float]]:
    """Gavel's constraints on x (columns 0..len(columns)-1 of ``width``) as G x <= h rows:
    x >= 0, GPUs per type, at most one unit of time per job."""
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    h: list[float] = []
    for col in range(len(columns)):
        rows.append(len(h))
        cols.append(col)
        vals.append(-1.0)
        h.append(0.0)
    type_row = {}
    for t in types:
        type_row[t] = len(h)
        h.append(float(capacity[t]))
    job_row = {}
    for i in range(len(jobs)):
        job_row[i] = len(h)
        h.append(1.0)
    for col, (i, t) in enumerate(columns):
        rows += [type_row[t], job_row[i]]
        cols += [col, col]
        vals += [float(jobs[i].num_gpus), 1.0]
    del width
    return rows, cols, vals, h


def _unpack(
    jobs: Sequence[JobView], columns: Sequence[tuple[int, str]], x: np.ndarray
) -> Fractions:
    result: Fractions = {job.id: {} for job in jobs}
    for col, (i, t) in enumerate(columns):
        value = float(min(1.0, max(0.0, x[col])))
        if value > 0.0:
            result[jobs[i].id][t] = value
    return result


def _solve(
    c: np.ndarray,
    rows: list[int],
    cols: list[int],
    vals: list[float],
    h: list[float],
    linear: int,
    cones: list[int],
) -> np.ndarray:
    # Imported here: only --gavel-compat runs solve these, and ECOS with SciPy's sparse
    # matrices cost a fifth of a second to import in every other simulation.
    import ecos
    from scipy.sparse import csc_matrix

    g = csc_matrix((vals, (rows, cols)), shape=(len(h), len(c)))
    out = ecos.solve(
        c, g, np.array(h, dtype=float), {"l": linear, "q": cones, "e": 0}, verbose=False
    )
    # 0: optimal; 10: optimal to reduced accuracy (Gavel takes both).
    if out["info"]["exitFlag"] not in (0, 10):
        raise AllocationError(f"ECOS: {out['info']['infostring']}")
    return np.asarray(out["x"], dtype=float)


def max_min_fractions(
    jobs: Sequence[JobView],
    capacity: Mapping[str, int],
    throughput: Mapping[tuple[int, str], float],
) -> Fractions:
    """Gavel's max-min fairness: maximize the smallest ``sum_t thr x n / (w p)`` over
    jobs, ``p`` being the job's throughput on a capacity-proportional share of every
    type. With every throughput 1 this is Gavel's heterogeneity-agnostic version."""
    types = sorted(t for t, n in capacity.items() if n > 0)
    if not jobs or not types:
        return {job.id: {} for job in jobs}
    total = float(sum(capacity[t] for t in types))
    columns = _columns(jobs, types, throughput)
    n_x = len(columns)
    rows, cols, vals, h = _base_rows(jobs, types, capacity, columns, n_x + 1)
    scale: dict[int, float] = {}
    for i, job in enumerate(jobs):
        proportional = sum(throughput.get((job.id, t), 0.0) * capacity[t] / total for t in types)
        scale[i] = job.num_gpus / (job.priority * proportional) if proportional > 0 else 0.0
    # t - sum_t coef x <= 0 for every job (the max-min epigraph).
    first = {}
    for i in range(len(jobs)):
        first[i] = len(h)
        rows.append(len(h))
        cols.append(n_x)
        vals.append(1.0)
        h.append(0.0)
    for col, (i, t) in enumerate(columns):
        rows.append(first[i])
        cols.append(col)
        vals.append(-throughput[(jobs[i].id, t)] * scale[i])
    c = np.zeros(n_x + 1)
    c[n_x] = -1.0
    x = _solve(c, rows, cols, vals, h, len(h), [])
    return _unpack(jobs, columns, x)


def isolated_fractions(
    jobs: Sequence[JobView], capacity: Mapping[str, int]
) -> dict[int, dict[str, float]]:
    """Each job's isolated share as Gavel defines it: every type's GPUs split evenly
    over the jobs, per GPU of the job, scaled down so the job's time adds up to at most 1."""
    types = sorted(t for t, n in capacity.items() if n > 0)
    out: dict[int, dict[str, float]] = {}
    for job in jobs:
        share = {t: capacity[t] / len(jobs) / job.num_gpus for t in types}
        norm = max(1.0, sum(share.values()))
        out[job.id] = {t: v / norm for t, v in share.items()}
    return out


def finish_time_fair_fractions(
    jobs: Sequence[JobView],
    capacity: Mapping[str, int],
    throughput: Mapping[tuple[int, str], float],
    *,
    since_arrival: Mapping[int, float],
    remaining: Mapping[int, float],
    isolated_s: Mapping[int, float],
) -> Fractions:
    """Gavel's finish-time fairness: minimize the largest
    ``(since_arrival + remaining / sum_t thr x) / isolated_s`` over jobs, ``isolated_s``
    being the job's finish time on its isolated share. ``1 / sum_t thr x`` is bounded by
    an auxiliary ``s`` with ``s * sum_t thr x >= 1``, a second-order cone."""
    types = sorted(t for t, n in capacity.items() if n > 0)
    if not jobs or not types:
        return {job.id: {} for job in jobs}
    columns = _columns(jobs, types, throughput)
    n_x = len(columns)
    m = len(jobs)
    rho = n_x + m  # variables: x, s per job, rho
    rows, cols, vals, h = _base_rows(jobs, types, capacity, columns, rho + 1)
    for i, job in enumerate(jobs):
        alone = isolated_s[job.id]
        if not math.isfinite(alone) or alone <= 0:
            raise AllocationError(f"job {job.id} has no isolated finish time")
        # (since + remaining * s) / alone - rho <= 0
        row = len(h)
        rows += [row, row]
        cols += [n_x + i, rho]
        vals += [remaining[job.id] / alone, -1.0]
        h.append(-since_arrival[job.id] / alone)
    linear = len(h)
    by_job: dict[int, list[tuple[int, float]]] = {i: [] for i in range(m)}
    for col, (i, t) in enumerate(columns):
        by_job[i].append((col, throughput[(jobs[i].id, t)]))
    for i in range(m):
        # (s + a, s - a, 2) in the cone: ||(s - a, 2)|| <= s + a, i.e. s * a >= 1.
        top, mid = len(h), len(h) + 1
        rows += [top, mid]
        cols += [n_x + i, n_x + i]
        vals += [-1.0, -1.0]
        for col, rate in by_job[i]:
            rows += [top, mid]
            cols += [col, col]
            vals += [-rate, rate]
        h += [0.0, 0.0, 2.0]
    c = np.zeros(rho + 1)
    c[rho] = 1.0
    x = _solve(c, rows, cols, vals, h, linear, [3] * m)
    return _unpack(jobs, columns, x)
