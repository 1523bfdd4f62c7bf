"""Fidelity against Gavel's own simulator (figures in the Gavel data README).

Settings as Gavel's: 360 s rounds, no restart overhead, Gavel's throughput table and
traces. Average JCT must be within 10 % of Gavel's:

- ``gavel`` vs Gavel's max_min_fairness_perf, both with the LP recomputed whenever the
  job set changes (our default) and at most every 1920 s as Gavel's simulator does;
- ``fifo`` vs Gavel's fifo. Gavel's FIFO puts a job on the alphabetically last type with
  any free GPU (see policies/_gavel_fifo.py), which a random-type FIFO does not do, so the
  comparison uses ``gavel_compat=True``; its figure depends on the seed, as Gavel's does
  (Gavel's driver runs unseeded), so the average over seeds is compared. The plain FIFO
  is checked on the small trace, where the two behaviours coincide in expectation.
"""

from __future__ import annotations

import statistics

import pytest

from master.scheduling.policy import make_policy
from master.scheduling.throughput import ThroughputModel
from master.sim.cluster_spec import build_cluster
from master.sim.engine import SimConfig, simulate
from master.sim.trace import read_gavel_trace
from tests.unit.sim.gavel_data import THROUGHPUTS, TRACES

HOUR = 3600.0
CASES = {
    # trace: (cluster, Gavel fifo avg JCT h, Gavel max_min_fairness_perf avg JCT h)
    "max_min_fairness": ("v100:8,p100:16,k80:24", 9.97, 4.06),
    "artifact_evaluation": ("v100:2,p100:0,k80:4", 2.11, 1.20),
}
CONFIG = SimConfig(round_s=360.0, overhead_s=0.0)


@pytest.fixture(scope="module")
def model() -> ThroughputModel:
    return ThroughputModel.from_gavel_json(THROUGHPUTS)


def avg_jct_hours(trace: str, policy_name: str, model: ThroughputModel, **params: object) -> float:
    cluster_spec = CASES[trace][0]
    jobs = read_gavel_trace(TRACES / f"{trace}.trace")
    result = simulate(
        make_policy(policy_name, **params), jobs, build_cluster(cluster_spec), model, CONFIG
    )
    assert len(result.jobs) == len(jobs)
    return statistics.fmean(job.jct_s for job in result.jobs) / HOUR


@pytest.mark.parametrize("trace", sorted(CASES))
@pytest.mark.parametrize("min_recompute_s", [0.0, 1920.0])
def test_gavel_matches_gavel_max_min_fairness_perf(
    trace: str, min_recompute_s: float, model: ThroughputModel
) -> None:
    """Our gavel policy's average JCT is within 10 % of Gavel's max_min_fairness_perf."""
    ours = avg_jct_hours(trace, "gavel", model, min_recompute_s=min_recompute_s)
    reference = CASES[trace][2]
    assert ours == pytest.approx(reference, rel=0.10), f"{ours:.2f} h vs Gavel {reference} h"


@pytest.mark.parametrize("trace", sorted(CASES))
def test_fifo_matches_gavel_fifo(trace: str, model: ThroughputModel) -> None:
    """Gavel-compatible FIFO, averaged over 8 seeds, is within 10 % of Gavel's fifo."""
    runs = [
        avg_jct_hours(trace, "fifo", model, seed=s, min_recompute_s=1920.0, gavel_compat=True)
        for s in range(8)
    ]
    ours = statistics.fmean(runs)
    reference = CASES[trace][1]
    assert ours == pytest.approx(reference, rel=0.10), f"{ours:.2f} h vs Gavel {reference} h"


def test_plain_fifo_matches_gavel_fifo_on_the_small_trace(model: ThroughputModel) -> None:
    """Random-type FIFO (mean of 8 seeds, Gavel's recompute interval) is within 10 %."""
    runs = [
        avg_jct_hours("artifact_evaluation", "fifo", model, seed=s, min_recompute_s=1920.0)
        for s in range(8)
    ]
    assert statistics.fmean(runs) == pytest.approx(CASES["artifact_evaluation"][1], rel=0.10)


def test_heterogeneity_awareness_pays_on_the_large_trace(model: ThroughputModel) -> None:
    """As in Gavel's evaluation, gavel beats heterogeneity-agnostic FIFO by a wide margin."""
    fifo = avg_jct_hours("max_min_fairness", "fifo", model)
    gavel = avg_jct_hours("max_min_fairness", "gavel", model)
    assert gavel < 0.6 * fifo
