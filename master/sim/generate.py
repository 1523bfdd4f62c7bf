"""Synthetic traces in the style of Gavel's generator, for benchmarks and what-if studies.

Each job draws a job type uniformly from the throughput model's known types (or from
``job_types``), a GPU count (1: 70 %, 2: 10 %, 4: 15 %, 8: 5 %), and a duration on its
reference type: 10^U(1.5, 3) minutes with probability 0.8, else 10^U(3, 4) minutes (many
short jobs, a few very long ones). Iterations are that duration times the job's
throughput on ``reference_type``. Arrivals are a Poisson process with mean gap
``mean_interarrival_s``. ``forkable_fraction`` of the jobs (drawn independently) are
marked forkable. The same seed always gives the same trace.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence

from master.scheduling.throughput import ThroughputModel
from master.sim.trace import TraceJob, batch_size_of

_SIZES = ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05))


def generate_trace(
    num_jobs: int,
    model: ThroughputModel,
    *,
    mean_interarrival_s: float,
    seed: int = 0,
    reference_type: str = "v100",
    job_types: Sequence[str] | None = None,
    max_gpus: int = 8,
    users: int = 20,
    forkable_fraction: float = 0.0,
) -> list[TraceJob]:
    if not 0.0 <= forkable_fraction <= 1.0:
        raise ValueError("forkable_fraction must be in [0, 1]")
    if num_jobs < 1:
        raise ValueError("num_jobs must be >= 1")
    if mean_interarrival_s < 0:
        raise ValueError("mean_interarrival_s must be >= 0")
    types = list(job_types) if job_types is not None else list(model.job_types())
    if not types:
        raise ValueError("no job types: give job_types or a model with a profile")
    rng = random.Random(seed)
    # Its own stream, so marking jobs forkable leaves every other draw as it was.
    marks = random.Random(f"{seed}-forkable")
    sizes = [(n, p) for n, p in _SIZES if n <= max_gpus]
    weights = [p for _, p in sizes]
    jobs: list[TraceJob] = []
    now = 0.0
    for job_id in range(num_jobs):
        job_type = rng.choice(types)
        num_gpus = rng.choices([n for n, _ in sizes], weights)[0]
        low, high = (1.5, 3.0) if rng.random() < 0.8 else (3.0, 4.0)
        minutes = 10 ** rng.uniform(low, high)
        rate = model.throughput(job_type, reference_type, num_gpus)
        iterations = max(1.0, math.floor(minutes * 60.0 * rate))
        jobs.append(
            TraceJob(
                id=job_id,
                arrival_s=now,
                job_type=job_type,
                num_gpus=num_gpus,
                iterations=iterations,
                user=f"user{rng.randrange(users):02d}",
                batch_size=batch_size_of(job_type),
                forkable=marks.random() < forkable_fraction,
            )
        )
        if mean_interarrival_s > 0:
            now += rng.expovariate(1.0 / mean_interarrival_s)
    return jobs


def with_estimates(
    jobs: Sequence[TraceJob],
    *,
    seed: int = 0,
    habit: tuple[float, float] = (0.5, 4.0),
    noise: float = 0.25,
) -> list[TraceJob]:
    """The jobs with users' estimates of their iterations (``submitted_iterations``).

    Users pad or trim by habit: each user's estimates are the true count times a factor
    drawn once per user, log-uniform in ``habit``, and per job ``exp(N(0, noise))``; so a
    predictor that knows the user can correct most of the error, and nothing can correct
    the rest. Jobs given by duration keep exact estimates.
    """
    low, high = habit
    if not 0 < low <= high or not math.isfinite(high):
        raise ValueError(f"habit must be 0 < LOW <= HIGH, got {habit}")
    if not 0 <= noise < math.inf:
        raise ValueError(f"noise must be >= 0, got {noise}")
    rng = random.Random(f"{seed}-estimates")
    factors: dict[str, float] = {}
    out: list[TraceJob] = []
    for job in jobs:
        if job.iterations is None:
            out.append(job)
            continue
        factor = factors.get(job.user)
        if factor is None:
            factor = math.exp(rng.uniform(math.log(low), math.log(high)))
            factors[job.user] = factor
        submitted = job.iterations * factor * math.exp(rng.gauss(0.0, noise))
        out.append(dataclasses.replace(job, submitted_iterations=max(1.0, submitted)))
    return out
