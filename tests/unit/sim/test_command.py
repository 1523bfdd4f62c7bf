"""The simulate command: JSON output, reports on disk, clear errors and exit codes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from master.scheduling.policy import make_policy
from master.scheduling.throughput import ThroughputModel
from master.sim import command
from master.sim.cluster_spec import build_cluster
from master.sim.engine import SimConfig, simulate
from master.sim.trace import read_trace
from tests.unit.sim.gavel_data import THROUGHPUTS, TRACES

SMALL = TRACES / "artifact_evaluation.trace"


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a usage error: argparse has said what is wrong
        return int(exc.code or 0)
    return command.run(args)


def base(*extra: str) -> list[str]:
    return [
        "--trace",
        str(SMALL),
        "--throughputs",
        str(THROUGHPUTS),
        "--cluster",
        "v100:2,p100:0,k80:4",
        *extra,
    ]


def test_json_output_has_the_documented_fields(capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints one result per policy with every documented key, plus the lower bound."""
    assert run(base("--policy", "fifo,gavel", "--json")) == 0
    doc = json.loads(capsys.readouterr().out)
    keys = {
        "policy",
        "jobs",
        "avg_jct_s",
        "p95_jct_s",
        "p99_jct_s",
        "makespan_s",
        "utilization",
        "avg_queue_s",
        "rounds",
        "preemptions",
        "migrations",
        "planning_s",
        "plan_ms_mean",
        "plan_ms_p99",
        "plan_ms_max",
    }
    assert [r["policy"] for r in doc["results"]] == ["fifo", "gavel"]
    for result in doc["results"]:
        assert keys <= set(result)
        assert result["jobs"] == 15
        assert result["avg_jct_s"] >= doc["lower_bound"]["avg_jct_s"]
        assert 0 < result["utilization"] <= 1
    assert set(doc["lower_bound"]) == {"avg_jct_s", "makespan_s"}


def test_json_counts_rounds_moves_and_planning_time(capsys: pytest.CaptureFixture[str]) -> None:
    """--json reports, per policy, the rounds decided, the jobs' preemptions and migrations
    summed, and the planning time: its total is the per-round mean times the rounds, and
    the per-round p99 lies between the mean's floor (0) and the max."""
    argv = base("--policy", "las,gavel", "--json", "--round", "120")
    assert run(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    trace = read_trace(SMALL)
    cluster = build_cluster("v100:2,p100:0,k80:4")
    model = ThroughputModel.from_gavel_json(THROUGHPUTS)
    for result in doc["results"]:
        direct = simulate(
            make_policy(result["policy"]), trace, cluster, model, SimConfig(round_s=120.0)
        )
        assert result["rounds"] == len(direct.rounds) > 0
        assert result["preemptions"] == sum(j.preemptions for j in direct.jobs)
        assert result["migrations"] == sum(j.migrations for j in direct.jobs)
        assert result["planning_s"] == pytest.approx(
            result["plan_ms_mean"] * result["rounds"] / 1000.0
        )
        assert 0 < result["plan_ms_mean"] <= result["plan_ms_max"]
        assert 0 < result["plan_ms_p99"] <= result["plan_ms_max"]
    # Time slicing on a crowded cluster stops jobs: the counts are not trivially zero.
    assert any(r["preemptions"] > 0 for r in doc["results"])


def test_table_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --json a table is printed; --out writes per-job CSVs, summaries and plots."""
    out = tmp_path / "report"
    code = run(
        base("--policy", "las,srtf", "--out", str(out), "--overhead", "30", "--round", "120")
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "las" in text and "srtf" in text and "lower bound" in text
    names = {p.name for p in out.iterdir()}
    assert {
        "jobs_las.csv",
        "jobs_srtf.csv",
        "summary.json",
        "summary.csv",
        "jct_cdf.png",
        "utilization.png",
        "occupancy.png",
    } <= names
    rows = (out / "jobs_las.csv").read_text().splitlines()
    assert len(rows) == 16 and rows[0].startswith("job_id,job_type,num_gpus")
    assert (out / "jct_cdf.png").read_bytes()[:4] == b"\x89PNG"


def test_policy_parameters_and_seed(capsys: pytest.CaptureFixture[str]) -> None:
    """--param reaches the policy; the same seed gives the same figures twice."""
    assert run(base("--policy", "gavel", "--param", "gavel.min_recompute_s=1920", "--json")) == 0
    first = json.loads(capsys.readouterr().out)
    assert run(base("--policy", "gavel", "--param", "gavel.min_recompute_s=1920", "--json")) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["avg_jct_s"] == pytest.approx(
        first["results"][0]["avg_jct_s"]
    )


def test_early_rounds_reach_the_simulator(capsys: pytest.CaptureFixture[str]) -> None:
    """--early-rounds re-plans on job exits: on the artifact trace, where jobs wait behind
    others that finish mid-round, gavel's average JCT drops."""
    assert run(base("--policy", "gavel", "--json")) == 0
    fixed = json.loads(capsys.readouterr().out)["results"][0]
    assert run(base("--policy", "gavel", "--early-rounds", "--json")) == 0
    early = json.loads(capsys.readouterr().out)["results"][0]
    assert early["avg_jct_s"] < fixed["avg_jct_s"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policy", "nope"], "unknown policy 'nope'; known policies: "),
        (["--policy", "fifo,fifo"], "lists a policy twice"),
        (["--param", "gavel.x=1", "--policy", "fifo"], "not simulated"),
        (["--param", "fifo.no_such=1", "--policy", "fifo"], "bad parameters for policy 'fifo'"),
        (["--gpus-per-server", "0"], "--gpus-per-server: 0 is out of range: 1..2147483647"),
        (["--round", "0"], "--round: 0 is out of range: more than 0, up to 31622400"),
        (["--round", "nan"], "--round: nan is not a finite number"),
        (["--overhead", "-1"], "--overhead: -1 is out of range: 0..31622400"),
        (["--seed", "-1"], "--seed: -1 is out of range: 0..4294967295"),
        (["--copy-efficiency", "1.5"], "--copy-efficiency: 1.5 is out of range: more than 0"),
        (["--min-migration-gain", "inf"], "--min-migration-gain: inf is not a finite number"),
        (["--shares", "alice"], "--shares: 'alice' is not USER=SHARE"),
        (["--shares", "alice=0"], "share of 'alice' must be > 0"),
        (["--shares", "alice=x"], "share of 'alice' is not a number"),
        (["--fair-share-half-life", "soon"], "'soon' is not a duration"),
        (["--max-gpus-per-user", "-1"], "--max-gpus-per-user: -1 is out of range: 0..2147483647"),
        (
            ["--limit-overestimate", "0.5"],
            "--limit-overestimate: '0.5': factors must be at least 1",
        ),
        (["--limit-overestimate", "5-2"], "LOW at most HIGH (e.g. 3 or 1.5-5)"),
        (["--limit-overestimate", "lots"], "'lots' is not a factor or a LOW-HIGH range"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(base(*argv)) == 2
    assert message in capsys.readouterr().err


def test_bad_trace_line_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A corrupt trace line stops the command with file:line on stderr."""
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,arrival_s,job_type,num_gpus,iterations\n0,0,a,1,10\n1,0,a,two,10\n")
    assert run(["--trace", str(trace), "--cluster", "v100:2"]) == 2
    assert "t.csv:3: num_gpus is not a whole number" in capsys.readouterr().err


def test_unschedulable_job_fails_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job no GPU type can hold makes the policy stall; the command says so and exits 1."""
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,arrival_s,job_type,num_gpus,iterations\n0,0,a,8,10\n")
    assert run(["--trace", str(trace), "--cluster", "v100:2,k80:2", "--policy", "las"]) == 1
    assert "made no progress" in capsys.readouterr().err


def test_min_migration_gain_holds_back_moves_as_the_daemon_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """By default the daemon's hysteresis applies (10 %): a larger --min-migration-gain holds
    back more moves; a negative gain is bad input, named."""

    def migrations(*extra: str) -> int:
        argv = [
            "--trace",
            str(TRACES / "medium_test.trace"),
            "--throughputs",
            str(THROUGHPUTS),
            "--cluster",
            "v100:4,p100:4,k80:4",
            "--policy",
            "hare",
            "--json",
            *extra,
        ]
        assert run(argv) == 0
        (result,) = json.loads(capsys.readouterr().out)["results"]
        count: int = result["migrations"]
        return count

    assert migrations("--min-migration-gain", "2") < migrations()
    assert run(base("--policy", "fifo", "--min-migration-gain", "-0.5")) == 2
    assert "--min-migration-gain: -0.5 is out of range: at least 0" in capsys.readouterr().err


def test_shares_reach_the_simulator_and_write_per_user_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--shares and --fair-share-half-life turn fair share on with those shares; --out
    then writes users_<policy>.csv, per round and user, whose GPU-seconds add up to the
    jobs'; a quota alone leaves shares off; no flag, no fair share."""
    trace = tmp_path / "two.csv"
    rows = ["job_id,arrival_s,job_type,num_gpus,duration_s,user"]
    rows += [f"{i},0,ResNet-18 (batch size 64),1,3600,bob" for i in range(8)]
    rows += [f"{8 + i},0,ResNet-18 (batch size 64),1,3600,alice" for i in range(2)]
    trace.write_text("\n".join(rows) + "\n")
    argv = ["--trace", str(trace), "--throughputs", str(THROUGHPUTS), "--cluster", "v100:4"]
    out = tmp_path / "fs"
    assert (
        run(
            [
                *argv,
                "--policy",
                "fifo",
                "--shares",
                "alice=1,bob=1",
                "--fair-share-half-life",
                "1d",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    lines = (out / "users_fifo.csv").read_text().splitlines()
    assert lines[0] == "round,start_s,end_s,user,gpu_seconds,waiting_jobs"
    first = [line.split(",") for line in lines[1:3]]
    # First round: two GPUs each (equal shares), bob with six jobs left waiting.
    assert {(r[3], float(r[4]), int(r[5])) for r in first} == {
        ("alice", 2 * 360.0, 0),
        ("bob", 2 * 360.0, 6),
    }
    jobs = (out / "jobs_fifo.csv").read_text().splitlines()
    assert len(jobs) == 11
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    config = command.fair_share_config(parser.parse_args([*argv, "--shares", "a=2,b=1"]))
    assert config is not None and config.enabled and dict(config.user_shares) == {"a": 2, "b": 1}
    assert config.half_life_s == 7 * 86400
    quota = command.fair_share_config(parser.parse_args([*argv, "--max-gpus-per-user", "2"]))
    assert quota is not None and not quota.enabled and quota.quota("x") == 2
    assert command.fair_share_config(parser.parse_args(argv)) is None
