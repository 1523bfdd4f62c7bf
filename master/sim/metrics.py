"""Summary figures of a simulation run and the lower bound they are compared with.

Definitions (all times in seconds):

- JCT: finish time minus arrival time; queueing delay: first start minus arrival.
- makespan: last finish minus first arrival.
- utilization: GPU-time held by jobs (including restart overhead) divided by the
  cluster's GPU-time from the first arrival to the last finish.
- lower bound: each job alone on its fastest allowed GPU type from its arrival (no
  queueing, no overhead); its average JCT and makespan. HadarE copies can beat it, so
  for runs that used copies the bound with one copy per node is used.
- planning time: wall time spent deciding rounds (the daemon's round function: the
  policy's plan, its checks, the diff); total in seconds, per round mean, p99 and max in
  milliseconds.
- finish-time fairness (Themis rho): JCT divided by the time the job would need alone
  on a 1/c share of the cluster, where c is the average GPU demand of the active jobs
  over the cluster's GPUs during the job's life (at least 1); rho <= 1 is fair.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from master.sim.engine import SimResult


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile, ``q`` in [0, 100]."""
    if not values:
        return math.nan
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass(frozen=True, slots=True)
class Summary:
    policy: str
    jobs: int
    avg_jct_s: float
    median_jct_s: float
    p95_jct_s: float
    p99_jct_s: float
    makespan_s: float
    avg_queue_s: float
    utilization: float
    rho_mean: float
    rho_max: float
    unfair_fraction: float
    preemptions: int
    migrations: int
    rounds: int
    plan_ms_mean: float
    plan_ms_max: float
    plan_ms_p99: float
    planning_s: float
    lower_bound_avg_jct_s: float
    lower_bound_makespan_s: float

    @property
    def jct_ratio(self) -> float:
        """Average JCT over the lower bound's average JCT (>= 1)."""
        return self.avg_jct_s / self.lower_bound_avg_jct_s

    @property
    def makespan_ratio(self) -> float:
        return self.makespan_s / self.lower_bound_makespan_s

    def as_json(self) -> dict[str, float | int | str]:
        return {
            "policy": self.policy,
            "jobs": self.jobs,
            "avg_jct_s": self.avg_jct_s,
            "median_jct_s": self.median_jct_s,
            "p95_jct_s": self.p95_jct_s,
            "p99_jct_s": self.p99_jct_s,
            "makespan_s": self.makespan_s,
            "utilization": self.utilization,
            "avg_queue_s": self.avg_queue_s,
            "rho_mean": self.rho_mean,
            "rho_max": self.rho_max,
            "rounds": self.rounds,
            "preemptions": self.preemptions,
            "migrations": self.migrations,
            "planning_s": self.planning_s,
            "plan_ms_mean": self.plan_ms_mean,
            "plan_ms_p99": self.plan_ms_p99,
            "plan_ms_max": self.plan_ms_max,
            "jct_ratio_to_lower_bound": self.jct_ratio,
        }


def job_bound(result: SimResult, job_index: int) -> float:
    job = result.jobs[job_index]
    return job.copies_bound_s if job.used_copies else job.lower_bound_s


def summarize(result: SimResult) -> Summary:
    jobs = result.jobs
    # A job Gavel-compatible rounds gave up on has no JCT, as in Gavel's own figures.
    jcts = [job.jct_s for job in jobs if not job.failed] or [job.jct_s for job in jobs]
    first_arrival = min(job.arrival_s for job in jobs)
    last_finish = max(job.finish_s for job in jobs)
    makespan = last_finish - first_arrival
    total_gpus = sum(result.capacity_by_type.values())
    # Each GPU counted once per round, even when two jobs share it.
    busy = sum(r.busy_gpu_seconds for r in result.rounds)
    utilization = busy / (total_gpus * makespan) if makespan > 0 else 0.0
    bounds = [job_bound(result, i) for i in range(len(jobs))]
    rhos = [job.rho for job in jobs]
    plan_ms = [r.plan_ms for r in result.rounds]
    return Summary(
        policy=result.policy,
        jobs=len(jobs),
        avg_jct_s=statistics.fmean(jcts),
        median_jct_s=percentile(jcts, 50),
        p95_jct_s=percentile(jcts, 95),
        p99_jct_s=percentile(jcts, 99),
        makespan_s=makespan,
        avg_queue_s=statistics.fmean(job.queue_s for job in jobs),
        utilization=utilization,
        rho_mean=statistics.fmean(rhos),
        rho_max=max(rhos),
        unfair_fraction=sum(1 for r in rhos if r > 1.0) / len(rhos),
        preemptions=sum(job.preemptions for job in jobs),
        migrations=sum(job.migrations for job in jobs),
        rounds=len(result.rounds),
        plan_ms_mean=statistics.fmean(plan_ms) if plan_ms else 0.0,
        plan_ms_max=max(plan_ms, default=0.0),
        plan_ms_p99=percentile(plan_ms, 99) if plan_ms else 0.0,
        planning_s=math.fsum(plan_ms) / 1000.0,
        lower_bound_avg_jct_s=statistics.fmean(bounds),
        lower_bound_makespan_s=max(j.arrival_s + b for j, b in zip(jobs, bounds, strict=True))
        - first_arrival,
    )
