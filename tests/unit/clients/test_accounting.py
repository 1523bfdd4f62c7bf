"""hctl's side of time limits and accounting: --time and job files, TIMEOUT in wait and
show, and the usage and history tables and JSON."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from clients.cli import format as fmt
from clients.cli.accounting import history_table, usage_table
from clients.cli.command import Context, ExitCode
from clients.cli.jobfile import SpecError, build_spec, normalize
from clients.cli.jobs import WAIT_EXIT_CODES
from clients.cli.main import main
from clients.cli.shapes import OUTPUTS, check, encode
from clients.convert import spec_from_proto, spec_to_proto
from clients.types import (
    JobRecord,
    JobState,
    UsageGrouping,
    UsageReport,
    UsageRow,
)
from tests.unit.clients.test_format import NOW, make_job


def test_time_in_a_job_file_becomes_the_specs_limit_in_seconds() -> None:
    """`time = "1-00:00:00"` is one day; the limit survives the trip through protobuf."""
    values = normalize({"workload": "resnet", "iterations": 10, "time": "1-00:00:00"})
    spec = build_spec(values)
    assert spec.time_limit_s == 86400
    assert spec_from_proto(spec_to_proto(spec)).time_limit_s == 86400
    assert build_spec(normalize({"workload": "resnet", "iterations": 10})).time_limit_s == 0


def test_a_malformed_time_is_a_spec_error_naming_the_key() -> None:
    with pytest.raises(SpecError, match=r"^time: '2 hours' is not a duration"):
        normalize({"time": "2 hours"})
    with pytest.raises(SpecError, match="time: expected a string"):
        normalize({"time": 30})


def test_a_malformed_time_flag_exits_2_before_contacting_the_master(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`hctl submit --time 2x` fails locally with one line naming the field and the forms."""
    argv = ["--master", "127.0.0.1:1", "submit", "--workload", "resnet", "--iterations", "5"]
    assert main([*argv, "--time", "2x"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.startswith("error: argument -t/--time: '2x' is not a duration; write it as 30s, 90m")
    assert err.count("\n") == 1


def test_wait_gives_timeout_its_own_exit_code() -> None:
    """A job stopped at its time limit makes `hctl wait` exit 104, apart from failure (100),
    cancellation (103) and wait's own --timeout (124)."""
    assert WAIT_EXIT_CODES[JobState.TIMEOUT] is ExitCode.JOB_TIMEOUT
    assert int(ExitCode.JOB_TIMEOUT) == 104
    codes = {*WAIT_EXIT_CODES.values(), ExitCode.TIMEOUT}
    assert len(codes) == len(WAIT_EXIT_CODES) + 1
    assert set(WAIT_EXIT_CODES) == {s for s in JobState if s.terminal}


def test_timeout_is_terminal_and_parses_from_slurms_code() -> None:
    assert JobState.TIMEOUT.terminal
    assert JobState.parse("TO") is JobState.TIMEOUT
    assert JobState.parse("timeout") is JobState.TIMEOUT


def test_gpu_time_reads_in_gpu_hours_and_short_runs_in_gpu_seconds() -> None:
    assert fmt.format_gpu_hours(0) == "0 GPU-s"
    assert fmt.format_gpu_hours(20.4) == "20 GPU-s"
    assert fmt.format_gpu_hours(900) == "0.25 GPU-h"
    assert fmt.format_gpu_hours(7200) == "2.00 GPU-h"


def test_the_limit_line_says_how_much_of_it_was_used() -> None:
    job = make_job(state=JobState.TIMEOUT, run_seconds=31.0)
    limited = replace(job, spec=replace(job.spec, time_limit_s=30))
    assert fmt.time_limit_line(limited) == (
        "30s of run time; used 31s (100%) in all attempts; stopped at it"
    )
    running = replace(limited, state=JobState.RUNNING, run_seconds=15.0)
    assert fmt.time_limit_line(running) == "30s of run time; used 15s (50%) in all attempts"
    assert fmt.time_limit_line(make_job(run_seconds=5.0)) == "none (ran 5s in all attempts)"


def test_the_limit_line_of_a_requeued_job_counts_from_its_last_requeue() -> None:
    """A requeue starts a new run: its limit counts only the run time since then."""
    job = make_job(state=JobState.RUNNING, run_seconds=40.0)
    requeued = replace(
        job, spec=replace(job.spec, time_limit_s=30), requeues=1, limit_run_seconds=6.0
    )
    assert fmt.time_limit_line(requeued) == (
        "30s of run time; used 6s (20%) since its last requeue"
    )


def test_since_takes_ages_dates_and_times() -> None:
    """--since 30d counts back from now; a date is midnight UTC; a bad value says the forms."""
    assert fmt.parse_since("30d", NOW) == NOW - timedelta(days=30)
    assert fmt.parse_since("2026-03-01", NOW) == datetime(2026, 3, 1, tzinfo=UTC)
    assert fmt.parse_since("2026-03-01T08:30+01:00", NOW) == datetime(2026, 3, 1, 7, 30, tzinfo=UTC)
    with pytest.raises(ValueError, match="neither an age"):
        fmt.parse_since("last week", NOW)


def report() -> UsageReport:
    return UsageReport(
        grouping=UsageGrouping.USER,
        rows=(UsageRow("alice", 5400.0, 2, 3), UsageRow("bob", 1800.0, 1, 1)),
        total_gpu_seconds=7200.0,
        since=NOW - timedelta(days=30),
        until=NOW,
    )


def rendered(table: object) -> list[str]:
    ctx = Context()
    with ctx.out.capture() as captured:
        ctx.out.print(table)
    return [line.rstrip() for line in captured.get().splitlines()]


def test_usage_table_shows_gpu_hours_shares_and_a_total() -> None:
    lines = rendered(usage_table(report()))
    assert lines[0].split() == ["USER", "GPU-HOURS", "SHARE", "JOBS", "ATTEMPTS"]
    assert lines[1].split() == ["alice", "1.50", "75.0%", "2", "3"]
    assert lines[2].split() == ["bob", "0.50", "25.0%", "1", "1"]
    assert lines[3].split() == ["total", "2.00"]


def test_history_table_has_state_exit_code_run_time_and_gpu_hours() -> None:
    job = make_job(
        id=12,
        state=JobState.TIMEOUT,
        exit_code=None,
        started_at=NOW - timedelta(hours=1),
        finished_at=NOW,
        reason="time limit 00:30:00 reached after 00:30:02 of run time",
    )
    failed = make_job(id=11, state=JobState.FAILED, exit_code=3, reason="exit code 3")
    records = [
        JobRecord(job, 1802.0, 3604.0, 1, ("v100",)),
        JobRecord(failed, 10.0, 20.0, 2, ("k80", "v100")),
    ]
    lines = rendered(history_table(records, NOW))
    assert lines[0].split()[:5] == ["ID", "NAME", "USER", "STATE", "EXIT"]
    first = lines[1].split()
    assert first[:5] == ["12", "resnet-a", "alice", "timeout", "-"]
    assert "30m02s" in first and "v100" in first and "1.00" in first
    second = lines[2].split()
    assert second[3:5] == ["failed", "3"] and "k80,v100" in second


def test_usage_and_history_json_match_their_documented_shapes() -> None:
    """--json documents validate against the shapes docs/cli.md is generated from."""
    usage = json.loads(json.dumps(encode({"usage": report()})))
    assert check(usage, OUTPUTS["usage"]) == []
    assert usage["usage"]["rows"][0] == {
        "key": "alice",
        "gpu_seconds": 5400.0,
        "jobs": 2,
        "attempts": 3,
    }
    assert usage["usage"]["grouping"] == "user"
    record = JobRecord(make_job(state=JobState.TIMEOUT), 31.0, 62.0, 1, ("v100",))
    history = json.loads(json.dumps(encode({"jobs": [record]})))
    assert check(history, OUTPUTS["history"]) == []
    assert history["jobs"][0]["job"]["state"] == "timeout"
    assert history["jobs"][0]["gpu_seconds"] == 62.0
