"""The warm-started max-min LP reaches a cold solve's optimum as jobs come and go; gavel
uses it from its threshold on."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import pytest
from scipy.optimize import linprog

from master.scheduling.policies._max_min_lp import MaxMinLp
from master.scheduling.policies.gavel import GavelPolicy
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView, JobView, Snapshot
from tests.unit.sim.gavel_data import THROUGHPUTS

CAPACITY = {"v100": 6, "p100": 5, "k80": 8}
TYPES = sorted(CAPACITY)


def job(job_id: int, rng: random.Random, priority: float = 1.0) -> JobView:
    return JobView(
        id=job_id,
        job_type=f"t{job_id}",
        num_gpus=rng.choice((1, 1, 2, 4)),
        total_iterations=1.0,
        priority=priority,
    )


def rates(jobs: list[JobView], rng: random.Random) -> dict[tuple[int, str], float]:
    return {(j.id, t): rng.uniform(0.5, 10.0) for j in jobs for t in TYPES if rng.random() > 0.1}


def objective(
    jobs: list[JobView], thr: dict[tuple[int, str], float], x: Mapping[int, Mapping[str, float]]
) -> tuple[float, float]:
    """(the minimum normalized throughput, the mean normalized throughput) of ``x``."""
    total = sum(CAPACITY.values())
    heaviest = max(j.priority for j in jobs)
    normalized = []
    for j in jobs:
        equal = sum(thr.get((j.id, t), 0.0) * CAPACITY[t] / total for t in TYPES)
        weight = j.priority / heaviest
        got = sum(thr.get((j.id, t), 0.0) * f for t, f in x[j.id].items())
        normalized.append(got * j.num_gpus / (weight * equal))
    return min(normalized), sum(normalized) / len(normalized)


def cold_optimum(jobs: list[JobView], thr: dict[tuple[int, str], float]) -> tuple[float, float]:
    """The same LP built densely and solved from scratch by SciPy: (min, mean)."""
    total = sum(CAPACITY.values())
    heaviest = max(j.priority for j in jobs)
    n, k = len(jobs), len(TYPES)
    coef = np.zeros((n, k))
    for i, j in enumerate(jobs):
        equal = sum(thr.get((j.id, t), 0.0) * CAPACITY[t] / total for t in TYPES)
        for c, t in enumerate(TYPES):
            if thr.get((j.id, t), 0.0) > 0 and j.num_gpus <= CAPACITY[t]:
                coef[i, c] = thr[(j.id, t)] * j.num_gpus / (j.priority / heaviest * equal)
    size = n * k + 1
    rows = []
    bounds_b = []
    for i in range(n):
        fair = np.zeros(size)
        fair[i * k : (i + 1) * k] = -coef[i]
        fair[-1] = 1.0
        one = np.zeros(size)
        one[i * k : (i + 1) * k] = 1.0
        rows += [fair, one]
        bounds_b += [0.0, 1.0]
    for c, t in enumerate(TYPES):
        cap = np.zeros(size)
        for i, j in enumerate(jobs):
            cap[i * k + c] = j.num_gpus
        rows.append(cap)
        bounds_b.append(float(CAPACITY[t]))
    cost = np.zeros(size)
    cost[-1] = -1.0
    cost[:-1] = -1e-3 * coef.ravel() / n
    bounds = [(0.0, 1.0 if coef.ravel()[v] > 0 else 0.0) for v in range(n * k)] + [(0.0, None)]
    solution = linprog(cost, A_ub=np.array(rows), b_ub=np.array(bounds_b), bounds=bounds)
    x = {j.id: {t: solution.x[i * k + c] for c, t in enumerate(TYPES)} for i, j in enumerate(jobs)}
    return objective(jobs, thr, x)


def test_warm_solves_match_cold_optima_as_jobs_arrive_and_leave() -> None:
    """Over forty job sets, each a few arrivals and departures from the last (and one with
    a new heaviest weight, which rebuilds the LP), the kept model's fractions respect every
    constraint and reach the max-min value and mean that a cold solve reaches; the warm
    re-solves take a few simplex pivots."""
    rng = random.Random(7)
    jobs = [job(i, rng) for i in range(30)]
    thr = rates(jobs, rng)
    lp = MaxMinLp()
    next_id = 30
    warm_iterations = []
    for step in range(40):
        for _ in range(rng.randrange(0, 4)):
            jobs.pop(rng.randrange(len(jobs)))
        arriving = [job(next_id + k, rng, 3.0 if step == 20 else 1.0) for k in range(3)]
        next_id += 3
        thr.update(rates(arriving, rng))
        jobs += arriving
        x = lp.solve(jobs, CAPACITY, thr)
        for t in TYPES:
            assert sum(j.num_gpus * x[j.id].get(t, 0.0) for j in jobs) <= CAPACITY[t] + 1e-6
        assert all(sum(x[j.id].values()) <= 1 + 1e-6 for j in jobs)
        assert all(thr.get((j, t), 0.0) > 0 for j, share in x.items() for t in share)
        low, mean = objective(jobs, thr, x)
        cold_low, cold_mean = cold_optimum(jobs, thr)
        assert low == pytest.approx(cold_low, rel=1e-6)
        assert mean == pytest.approx(cold_mean, rel=1e-4)
        if step not in (0, 20):
            warm_iterations.append(lp.iterations)
    assert lp.cold_solves == 2
    assert sorted(warm_iterations)[len(warm_iterations) // 2] < 30


def test_a_job_whose_figures_change_is_re_entered() -> None:
    """A job seen again with other throughputs gets columns from its new figures."""
    rng = random.Random(1)
    jobs = [job(i, rng) for i in range(4)]
    thr = {(j.id, t): 1.0 for j in jobs for t in TYPES}
    lp = MaxMinLp()
    lp.solve(jobs, CAPACITY, thr)
    # Job 0 now runs only on k80.
    thr = {**thr, (0, "v100"): 0.0, (0, "p100"): 0.0}
    x = lp.solve(jobs, CAPACITY, thr)
    assert set(x[0]) <= {"k80"} and x[0]


def test_gavel_warm_starts_from_its_threshold_and_plans_validly() -> None:
    """With ``warm_from=0`` gavel keeps one LP over rounds of arrivals and departures
    (solved from scratch once), and every plan is one the cluster can run; a negative
    threshold is refused."""
    cluster = ClusterView.from_counts({"v100": 4, "p100": 4, "k80": 8}, gpus_per_server=4)
    model = ThroughputModel.from_gavel_json(THROUGHPUTS)
    kinds = sorted(model.job_types())
    policy = GavelPolicy(warm_from=0)
    live = [
        JobView(id=i, job_type=kinds[i % len(kinds)], num_gpus=1 + i % 2, total_iterations=1e6)
        for i in range(12)
    ]
    for round_number in range(8):
        snapshot = Snapshot(cluster, tuple(live), round_number, 360.0, model)
        plan = policy.plan(snapshot, 360.0 * round_number)
        assert plan.violations(snapshot) == []
        assert plan.allocations
        live = [replace(j, current=plan.allocations.get(j.id)) for j in live[2:]] + [
            JobView(
                id=100 + 2 * round_number + k, job_type=kinds[k], num_gpus=1, total_iterations=1e6
            )
            for k in range(2)
        ]
    assert policy.solves == 8
    assert policy.cold_solves == 1
    with pytest.raises(ValueError, match="warm_from"):
        GavelPolicy(warm_from=-1)


def test_kept_columns_follow_a_job_whose_priority_changes() -> None:
    """Columns are kept per kind of job between solves, yet a job that keeps its id but
    comes back with another priority is solved by its new weight: two one-GPU jobs on one
    GPU split it evenly, then, with one at half the weight, a third and two thirds."""
    jobs = [
        JobView(id=i, job_type="same", num_gpus=1, total_iterations=1.0, priority=1.0)
        for i in range(2)
    ]
    thr = {(0, "v100"): 2.0, (1, "v100"): 2.0}
    lp = MaxMinLp(efficiency_weight=0.0)
    x = lp.solve(jobs, {"v100": 1}, thr)
    assert x[0]["v100"] == pytest.approx(0.5)
    assert x[1]["v100"] == pytest.approx(0.5)
    x = lp.solve([replace(jobs[0], priority=0.5), jobs[1]], {"v100": 1}, thr)
    assert x[0]["v100"] == pytest.approx(1 / 3)
    assert x[1]["v100"] == pytest.approx(2 / 3)


def test_jobs_the_lp_cannot_tell_apart_share_rows_and_get_equal_fractions() -> None:
    """Jobs of one type, size and weight are one kind in the model (one pair of rows, one
    column per type) whatever their number: each gets the same fractions, the optimum is
    a per-job solve's, and as jobs of a kind come and go only its count changes."""
    rng = random.Random(3)
    kinds = [job(i, rng) for i in range(5)]
    thr_kind = rates(kinds, rng)
    next_id = 100
    live: list[JobView] = []
    lp = MaxMinLp()
    for _ in range(12):
        for _ in range(rng.randrange(0, 6)):
            if live:
                live.pop(rng.randrange(len(live)))
        for _ in range(rng.randrange(1, 8)):
            like = rng.choice(kinds)
            live.append(replace(like, id=next_id))
            next_id += 1
        thr = {
            (j.id, t): thr_kind[(kinds[int(j.job_type[1:])].id, t)]
            for j in live
            for t in TYPES
            if (kinds[int(j.job_type[1:])].id, t) in thr_kind
        }
        x = lp.solve(live, CAPACITY, thr)
        assert lp.kinds == len({j.job_type for j in live if any(k[0] == j.id for k in thr)})
        by_type: dict[str, Mapping[str, float]] = {}
        for j in live:
            assert x[j.id] == pytest.approx(by_type.setdefault(j.job_type, x[j.id]))
        for t in TYPES:
            assert sum(j.num_gpus * x[j.id].get(t, 0.0) for j in live) <= CAPACITY[t] + 1e-6
        low, mean = objective(live, thr, x)
        cold_low, cold_mean = cold_optimum(live, thr)
        assert low == pytest.approx(cold_low, rel=1e-6)
        assert mean == pytest.approx(cold_mean, rel=1e-4)
    assert lp.cold_solves == 1
