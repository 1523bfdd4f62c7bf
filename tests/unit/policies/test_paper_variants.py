"""Paper variants run whole traces in the simulator with every plan valid, and
`hctl simulate --param POLICY.variant=paper` reaches the policy."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings

from master.scheduling.policy import make_policy
from master.scheduling.throughput import ThroughputModel
from master.sim import command
from master.sim.cluster_spec import build_cluster
from master.sim.engine import SimConfig, simulate
from master.sim.trace import read_trace
from tests.unit.sim.gavel_data import THROUGHPUTS, TRACES
from tests.unit.sim.strategies import Case, cases
from tests.unit.sim.test_properties import check_invariants, simulate_case

TRACE = TRACES / "medium_test.trace"


@pytest.mark.parametrize("policy", ["a-srpt", "hadar", "hadare", "hare", "liu", "sjf-bsbf"])
def test_paper_variant_completes_a_trace_with_valid_plans(policy: str) -> None:
    """Every job completes, and no round's plan is invalid or fails (the run raises)."""
    trace = [dataclasses.replace(job, shareable=True) for job in read_trace(TRACE)]
    result = simulate(
        make_policy(policy, variant="paper"),
        trace,
        build_cluster("v100:4,p100:4,k80:4"),
        ThroughputModel.from_gavel_json(THROUGHPUTS),
        SimConfig(validate_plans=True),
    )
    assert len(result.jobs) == len(trace)
    assert result.fallback_rounds == 0 and result.isolated_rounds == 0


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=cases())
def test_hare_paper_variant_keeps_the_simulator_invariants(case: Case) -> None:
    """Tasks split across types and folded: no double-booked GPU, a copy never holds more
    GPUs than the job's tasks, exact iterations, and no job beats its lower bound."""
    result = simulate_case(case, make_policy("hare", variant="paper"))
    check_invariants(case, result)


def _avg_jct(capsys: pytest.CaptureFixture[str], *extra: str) -> float:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args(
        [
            "--trace",
            str(TRACES / "artifact_evaluation.trace"),
            "--throughputs",
            str(THROUGHPUTS),
            "--cluster",
            "v100:2,k80:4",
            "--policy",
            "hadar",
            "--json",
            *extra,
        ]
    )
    assert command.run(args) == 0
    return float(json.loads(capsys.readouterr().out)["results"][0]["avg_jct_s"])


def test_the_variant_parameter_reaches_the_policy(capsys: pytest.CaptureFixture[str]) -> None:
    """hadar's paper prices leave GPUs idle on this trace: a higher average JCT."""
    default = _avg_jct(capsys)
    assert _avg_jct(capsys, "--param", "hadar.variant=default") == default
    assert _avg_jct(capsys, "--param", "hadar.variant=paper") > default * 1.1


def test_an_unknown_variant_exits_2_naming_the_known_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A misspelt variant is a usage error whose message lists the variants."""
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    argv = ["--trace", str(TRACE), "--cluster", "v100:4", "--policy", "a-srpt"]
    args = parser.parse_args([*argv, "--param", "a-srpt.variant=papr"])
    assert command.run(args) == 2
    assert "a-srpt variant must be one of default, paper, got 'papr'" in capsys.readouterr().err
