"""The scale trace written in Gavel's format for Gavel's own simulator: read back with
``read_gavel_trace`` it gives the same jobs, so both simulators run one workload."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench.bench_sim import gavel_table, plain_gavel_job, versus_lines, write_gavel_trace
from master.scheduling.throughput import ThroughputModel
from master.sim.data import THROUGHPUTS
from master.sim.generate import generate_trace
from master.sim.trace import TraceJob, read_gavel_trace


def test_generated_jobs_round_trip_through_gavels_format(tmp_path: Path) -> None:
    """Every job comes back with its type, GPU count, iterations, priority and exact
    arrival time; only what the format has no column for (user, shareable) is lost."""
    model = ThroughputModel.from_gavel_json(THROUGHPUTS)
    jobs = [
        dataclasses.replace(job, shareable=True)
        for job in generate_trace(300, model, mean_interarrival_s=170.0, seed=1)
    ]
    trace = tmp_path / "scale.trace"
    write_gavel_trace(trace, jobs)
    back = read_gavel_trace(trace)
    assert back == [dataclasses.replace(job, user="", shareable=False) for job in jobs]
    assert back == [plain_gavel_job(job) for job in jobs]
    # Gavel splits each line into exactly ten tab-separated columns.
    assert all(line.count("\t") == 9 for line in trace.read_text().splitlines())


def test_jobs_are_written_in_arrival_order_and_keep_a_priority(tmp_path: Path) -> None:
    """Gavel numbers jobs by line and needs arrival times that never decrease."""
    late = TraceJob(0, 500.5, "ResNet-18 (batch size 64)", 2, 1200.0, priority=2.0)
    early = TraceJob(1, 0.25, "LM (batch size 20)", 1, 7.0)
    trace = tmp_path / "two.trace"
    write_gavel_trace(trace, [late, early])
    back = read_gavel_trace(trace)
    assert [(j.arrival_s, j.num_gpus, j.iterations, j.priority) for j in back] == [
        (0.25, 1, 7.0, 1.0),
        (500.5, 2, 1200.0, 2.0),
    ]
    assert [j.batch_size for j in back] == [20, 64]


def test_a_fractional_iteration_count_is_refused(tmp_path: Path) -> None:
    """Gavel reads total_steps as a whole number; a fraction would change the job."""
    job = TraceJob(0, 0.0, "LM (batch size 20)", 1, 7.5)
    with pytest.raises(ValueError, match="whole iteration count"):
        write_gavel_trace(tmp_path / "bad.trace", [job])


def test_the_table_gives_the_ratio_over_all_runs_or_says_what_did_not_finish() -> None:
    """Each run's rows with its CPU; the ratio is of the summed wall times, with each
    run's own beside it, and the machine's speed that day is named."""
    ours = {
        "simulator": "ours",
        "policy": "gavel",
        "wall_s": 30.0,
        "cpu_s": 29.0,
        "sim_wall_s": 28.0,
        "sim_cpu_s": 27.5,
        "avg_jct_h": 15.1,
        "finished": 10_000,
        "cpu": 0,
    }
    gavel = {
        "simulator": "theirs",
        "policy": "max_min_fairness_perf",
        "wall_s": 420.0,
        "cpu_s": 410.0,
        "avg_jct_h": 15.3,
        "finished": 10_000,
        "cpu": 1,
    }
    slower = {**ours, "wall_s": 50.0, "cpu_s": 49.0, "cpu": 1}
    faster = {**gavel, "wall_s": 280.0, "cpu_s": 270.0, "cpu": 0}
    result = {
        "runs": [[ours, gavel], [slower, faster]],
        "gavel_commit": "c",
        "load": (1, 2),
        "python_loop_s": 0.35,
        "filled_in": [("A3C", 2), ("LM (batch size 5)", 4), ("LM (batch size 80)", 2)],
        "filled_in_jobs": 3,
    }
    text = "\n".join(versus_lines(result, 9))
    assert "| 1 | theirs | `max_min_fairness_perf` | 1 | 420.0 | 410.0 | 15.30 | 10,000 |" in text
    assert "| 2 | ours | `gavel` | 1 | 50.0 | 49.0 | 15.10 | 10,000 |" in text
    assert "all runs together: 8.8x" in text and "run by run 14.0x, 5.6x" in text
    assert "misses the 10x target" in text
    assert "a 20,000,000-step Python loop took 0.35 s before the runs" in text
    assert "no figure for 3 of the jobs (A3C, LM on more than one GPU" in text
    stopped = {"simulator": "theirs", "policy": "p", "stopped": "1200 CPU s", "cpu_s": 1200.0}
    text = "\n".join(versus_lines({**result, "runs": [[ours, {**stopped, "cpu": 1}]]}, 9))
    assert "not finished after 1200 CPU s" in text


def test_gavels_table_gains_the_rates_ours_uses_for_what_it_lacks() -> None:
    """A one-GPU-only job type on four GPUs gets our model's rate on every GPU type;
    everything the table had stays as it was."""
    model = ThroughputModel.from_gavel_json(THROUGHPUTS)
    table = json.loads(THROUGHPUTS.read_text())
    jobs = [
        TraceJob(0, 0.0, "A3C", 4, 100.0),
        TraceJob(1, 1.0, "ResNet-18 (batch size 64)", 4, 100.0),
    ]
    added, needed = gavel_table(table, jobs, model)
    assert needed == [jobs[0]]
    for gpu_type in ("v100", "p100", "k80"):
        assert added[gpu_type]["('A3C', 4)"] == {"null": model.throughput("A3C", gpu_type, 4)}
        del added[gpu_type]["('A3C', 4)"]
    assert added == table
