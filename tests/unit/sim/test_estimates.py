"""Users' estimates of their jobs' iterations: drawn by habit, and shown to policies."""

from __future__ import annotations

import pytest

from master.scheduling.policies.a_srpt import ASrptPolicy
from master.scheduling.throughput import ThroughputModel
from master.sim.cluster_spec import build_cluster
from master.sim.engine import simulate
from master.sim.generate import with_estimates
from master.sim.trace import TraceJob

JOB_TYPE = "ResNet-18 (batch size 64)"


def _jobs() -> list[TraceJob]:
    return [
        TraceJob(i, 60.0 * i, JOB_TYPE, 1, 1000.0 * (i + 1), user=f"u{i % 3}") for i in range(9)
    ] + [TraceJob(9, 0.0, JOB_TYPE, 1, None, duration_s=600.0, user="u0")]


def test_each_user_pads_by_one_habit_within_its_range() -> None:
    """Without noise a user's estimates are their jobs' counts times one factor in range;
    jobs given by duration keep exact estimates; the same seed draws the same."""
    out = with_estimates(_jobs(), seed=3, habit=(0.5, 4.0), noise=0.0)
    factors: dict[str, set[float]] = {}
    for job in out[:9]:
        assert job.iterations is not None and job.submitted_iterations is not None
        factors.setdefault(job.user, set()).add(round(job.submitted_iterations / job.iterations, 9))
    assert all(len(f) == 1 for f in factors.values())
    assert all(0.5 <= next(iter(f)) <= 4.0 for f in factors.values())
    assert len({next(iter(f)) for f in factors.values()}) == 3
    assert out[9].submitted_iterations is None
    assert with_estimates(_jobs(), seed=3, noise=0.0) == out


def test_bad_habit_or_noise_is_refused() -> None:
    """A habit range that is empty or not positive, or a negative noise, is an error."""
    with pytest.raises(ValueError, match="habit must be 0 < LOW <= HIGH"):
        with_estimates(_jobs(), habit=(2.0, 1.0))
    with pytest.raises(ValueError, match="noise must be >= 0"):
        with_estimates(_jobs(), noise=-1.0)


def test_the_predictor_learns_from_the_submitted_estimates() -> None:
    """The simulator shows the estimate as predicted_iterations: a-srpt's history holds the
    submitted estimate next to the count each job ran (for every job but those that end
    in the last round, which no later round tells it of)."""
    jobs = with_estimates(_jobs()[:9], seed=1)
    # No fit (sklearn is slow to load): the history is what is checked.
    policy = ASrptPolicy(min_history=100)
    model = ThroughputModel({(JOB_TYPE, "v100", 1, True): 10.0, (JOB_TYPE, "v100", 1, False): 10.0})
    simulate(policy, jobs, build_cluster("v100:2"), model)
    learned = {(c.submitted, c.actual) for c in policy.predictor.history}
    assert len(learned) >= len(jobs) - 2
    assert learned <= {(j.submitted_iterations, j.iterations) for j in jobs}
    assert all(submitted != actual for submitted, actual in learned)
