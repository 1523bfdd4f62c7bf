"""Time limits drawn for trace jobs without one: the documented model, reproducible, and
what the ``slurm`` policy plans by."""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path

import pytest

from master.scheduling.plan import Allocation, Plan
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import Snapshot
from master.sim import command
from master.sim.cluster_spec import build_cluster
from master.sim.engine import SimConfig, Simulator
from master.sim.limits import Overestimate, slowest_rate, time_limit
from master.sim.trace import TraceJob, read_csv_trace, write_csv_trace
from tests.unit.sim.gavel_data import THROUGHPUTS, TRACES

JOB_TYPE = "ResNet-18 (batch size 64)"


@functools.cache
def model() -> ThroughputModel:
    return ThroughputModel.from_gavel_json(THROUGHPUTS)


def trace_job(job_id: int, **fields: object) -> TraceJob:
    values: dict[str, object] = {
        "id": job_id,
        "arrival_s": 0.0,
        "job_type": JOB_TYPE,
        "num_gpus": 2,
        "iterations": 10_000.0,
    }
    values.update(fields)
    return TraceJob(**values)  # type: ignore[arg-type]


def test_drawn_limit_is_the_slowest_run_time_times_a_factor_in_range() -> None:
    """Every drawn limit lies between 1.5 and 5 times the run time on the slowest allowed
    type (k80 here), and the factors spread over the range rather than sit at one value."""
    cluster = build_cluster("v100:4,k80:4", 4)
    slow = 10_000.0 / slowest_rate(trace_job(0), cluster, model())
    assert slowest_rate(trace_job(0), cluster, model()) == min(
        model().throughput(JOB_TYPE, "k80", 2, consolidated=c) for c in (True, False)
    )
    factors = [
        time_limit(trace_job(i), 10_000.0, cluster, model(), Overestimate()) / slow
        for i in range(200)
    ]
    assert all(1.5 <= f <= 5.0 for f in factors)
    assert min(factors) < 2.0 and max(factors) > 4.5


def test_allowed_types_decide_the_slowest_type() -> None:
    """A job allowed only v100 gets its limit from its v100 run time."""
    cluster = build_cluster("v100:4,k80:4", 4)
    job = trace_job(1, allowed_gpu_types=frozenset({"v100"}))
    limit = time_limit(job, 10_000.0, cluster, model(), Overestimate(3.0, 3.0))
    v100 = min(model().throughput(JOB_TYPE, "v100", 2, consolidated=c) for c in (True, False))
    assert limit == pytest.approx(3.0 * 10_000.0 / v100)


def test_draws_are_reproducible_per_job_and_seed() -> None:
    """A job's factor depends on the seed and its id alone: the same on every call and
    in any order, and another seed draws another."""
    over = Overestimate(seed=7)
    first = [over.factor(i) for i in range(50)]
    assert [over.factor(i) for i in reversed(range(50))] == list(reversed(first))
    assert [Overestimate(seed=8).factor(i) for i in range(50)] != first


def test_a_trace_limit_is_kept_and_round_trips_through_csv(tmp_path: Path) -> None:
    """A limit the trace gives is used as is, and the CSV format reads and writes it."""
    job = trace_job(3, time_limit_s=5400.0)
    cluster = build_cluster("v100:4", 4)
    assert time_limit(job, 10_000.0, cluster, model(), Overestimate()) == 5400.0
    path = tmp_path / "t.csv"
    write_csv_trace(path, [job, trace_job(4)])
    back = read_csv_trace(path)
    assert [j.time_limit_s for j in back] == [5400.0, None]


def test_the_simulator_shows_policies_the_limits() -> None:
    """The views a policy sees carry each job's limit: the trace's, else the drawn one."""
    seen: dict[int, float] = {}

    class Recorder:
        name = "recorder"

        def plan(self, snapshot: Snapshot, now: float) -> Plan:
            for job in snapshot.jobs:
                seen[job.id] = job.time_limit_s
            free = list(snapshot.cluster.usable_gpus())
            out: dict[int, Allocation] = {}
            for job in snapshot.jobs:
                if len(free) >= job.num_gpus:
                    out[job.id] = Allocation.on([g.slot for g in free[: job.num_gpus]], 64)
                    free = free[job.num_gpus :]
            return Plan(out)

    cluster = build_cluster("v100:4", 4)
    jobs = [trace_job(1, time_limit_s=7200.0), trace_job(2)]
    Simulator(
        Recorder(), jobs, cluster, model(), SimConfig(limit_overestimate=Overestimate(2.0, 2.0))
    ).run()
    v100 = min(model().throughput(JOB_TYPE, "v100", 2, consolidated=c) for c in (True, False))
    assert seen[1] == 7200.0
    assert seen[2] == pytest.approx(2.0 * 10_000.0 / v100)


def test_the_flag_changes_what_slurm_backfills(capsys: pytest.CaptureFixture[str]) -> None:
    """--limit-overestimate reaches the slurm policy: with exact limits (factor 1) it
    backfills differently than with users asking for five times the run time."""

    def avg_jct(factor: str) -> float:
        parser = argparse.ArgumentParser()
        command.add_arguments(parser)
        argv = [
            "--trace",
            str(TRACES / "artifact_evaluation.trace"),
            "--throughputs",
            str(THROUGHPUTS),
            "--cluster",
            "v100:2,k80:4",
            "--policy",
            "slurm",
            "--limit-overestimate",
            factor,
            "--json",
        ]
        assert command.run(parser.parse_args(argv)) == 0
        return float(json.loads(capsys.readouterr().out)["results"][0]["avg_jct_s"])

    assert avg_jct("1") != avg_jct("5")
