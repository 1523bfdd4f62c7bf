"""The research target on Gavel's 96-job trace (v100:8,p100:16,k80:24, 360 s rounds):
``hadare``'s average JCT is at least 1.5x better than ``gavel``'s and its p99 JCT no worse,
under Gavel's round model and under the daemon's (early rounds), with every job forkable
(allowed to run as averaged copies) and shareable: the "all jobs forkable" runs of
``bench/results.py``, which reports the same figures in docs/results.md. A Gavel trace marks
no job forkable, and hadare forks only jobs marked so."""

from __future__ import annotations

import dataclasses

import pytest

from master.scheduling.policy import make_policy
from master.scheduling.throughput import ThroughputModel
from master.sim.cluster_spec import build_cluster
from master.sim.engine import SimConfig, simulate
from master.sim.metrics import Summary, summarize
from master.sim.trace import read_gavel_trace
from tests.unit.sim.gavel_data import THROUGHPUTS, TRACES


def run(policy: str, early_rounds: bool) -> Summary:
    model = ThroughputModel.from_gavel_json(THROUGHPUTS)
    jobs = [
        dataclasses.replace(job, shareable=True)
        for job in read_gavel_trace(TRACES / "max_min_fairness.trace")
    ]
    config = SimConfig(round_s=360.0, early_rounds=early_rounds, fork_all=True)
    return summarize(
        simulate(make_policy(policy), jobs, build_cluster("v100:8,p100:16,k80:24"), model, config)
    )


@pytest.mark.parametrize("early_rounds", [False, True])
def test_hadare_beats_gavel_by_1_5x_without_a_worse_p99(early_rounds: bool) -> None:
    """hadare with every job forkable: average JCT <= gavel's / 1.5, p99 JCT <= gavel's."""
    hadare, gavel = run("hadare", early_rounds), run("gavel", early_rounds)
    ratio = gavel.avg_jct_s / hadare.avg_jct_s
    assert ratio >= 1.5, f"{ratio:.3f}x"
    assert hadare.p99_jct_s <= gavel.p99_jct_s
