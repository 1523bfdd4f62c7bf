"""Time limits for simulated jobs whose trace gives none, drawn as users overestimate them.

A backfilling scheduler (the ``slurm`` baseline) plans with the time limits users ask for,
and users ask for several times what their jobs use: sites running Slurm report requested
limits of two to five times the actual run time and more, since a job that reaches its
limit is killed. A job without a limit in its trace gets

    limit = (its run time alone on its slowest allowed GPU type) x f,

the run time at its own scale spread over servers (the slowest way it can run as one copy
of one type on this cluster), with ``f`` drawn uniformly from ``[low, high]`` (default 1.5
to 5) by a generator seeded with the seed and the job's id: a job gets the same limit
whichever policy runs, whatever the other jobs, on every run.

``low`` is at least 1 so that a job never needs more than its limit on one type: the
simulator does not stop jobs at their limits (the daemon does), so a limit below the run
time would model a user whose job Slurm kills, which no policy here is compared on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView
from master.sim.trace import TraceJob


@dataclass(frozen=True, slots=True)
class Overestimate:
    """How much longer than the run time a drawn limit is: a factor in ``[low, high]``."""

    low: float = 1.5
    high: float = 5.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1.0 <= self.low <= self.high < float("inf"):
            raise ValueError(
                f"limit overestimate must be a factor or range within [1, inf) with low <= "
                f"high, got {self.low:g}-{self.high:g}"
            )

    @classmethod
    def parse(cls, text: str, seed: int = 0) -> Overestimate:
        """``"1.5-5"`` (a range) or ``"3"`` (one factor for every job)."""
        low_text, sep, high_text = text.strip().partition("-")
        try:
            low = float(low_text)
            high = float(high_text) if sep else low
        except ValueError:
            raise ValueError(
                f"--limit-overestimate: {text!r} is not a factor or a LOW-HIGH range "
                "(e.g. 3 or 1.5-5)"
            ) from None
        try:
            return cls(low, high, seed)
        except ValueError:
            raise ValueError(
                f"--limit-overestimate: {text!r}: factors must be at least 1 and LOW at most "
                "HIGH (e.g. 3 or 1.5-5)"
            ) from None

    def __str__(self) -> str:
        return f"{self.low:g}" if self.low == self.high else f"{self.low:g}-{self.high:g}"

    def factor(self, job_id: int) -> float:
        """The factor drawn for job ``job_id`` (the same on every call)."""
        if self.low == self.high:
            return self.low
        return random.Random(f"limit:{self.seed}:{job_id}").uniform(self.low, self.high)


def slowest_rate(job: TraceJob, cluster: ClusterView, model: ThroughputModel) -> float:
    """Iterations/s of the job on its slowest allowed type that has its GPU count, spread
    over servers (0 when no allowed type has that many GPUs)."""
    rates = []
    for gpu_type, count in cluster.capacity_by_type().items():
        if count < job.num_gpus:
            continue
        if job.allowed_gpu_types and gpu_type not in job.allowed_gpu_types:
            continue
        for consolidated in (True, False):
            rate = model.throughput(job.job_type, gpu_type, job.num_gpus, consolidated=consolidated)
            if rate > 0:
                rates.append(rate)
    return min(rates, default=0.0)


def time_limit(
    job: TraceJob,
    iterations: float,
    cluster: ClusterView,
    model: ThroughputModel,
    overestimate: Overestimate,
) -> float:
    """The job's time limit in seconds: the trace's, else drawn; 0 (no limit) for a job
    that no allowed type can run."""
    if job.time_limit_s is not None:
        return job.time_limit_s
    rate = slowest_rate(job, cluster, model)
    if rate <= 0:
        return 0.0
    return iterations / rate * overestimate.factor(job.id)
