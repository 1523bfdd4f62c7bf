"""Formatting of durations, times, progress, sizes, placements and ETAs for people."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from clients.cli import format as fmt
from clients.cli.jobs import queue_table
from clients.types import (
    Job,
    JobSpec,
    JobState,
    Program,
    Task,
    TaskState,
    Throughput,
)

NOW = datetime(2026, 3, 14, 12, 0, 0, tzinfo=UTC)


def make_job(**changes) -> Job:
    job = Job(
        id=7,
        spec=JobSpec("resnet-a", Program.builtin("resnet"), iterations=1000, num_gpus=2),
        user="alice",
        state=JobState.PENDING,
        reason="",
        iterations_done=0,
        attained_service=0.0,
        submitted_at=NOW - timedelta(minutes=5),
        started_at=None,
        finished_at=None,
        tasks=(),
        retries=0,
        exit_code=None,
        throughputs=(),
        version=1,
        preemptions=0,
        migrations=0,
        checkpoint_iterations=0,
    )
    return replace(job, **changes)


def make_task(node: str, gpu_type: str, gpus=(0, 1), shared: int = 0) -> Task:
    return Task(7, 0, node, tuple(gpus), gpu_type, 3, TaskState.RUNNING, 0, 64, 1, shared)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (float("nan"), "-"),
        (-3, "0s"),
        (0, "0s"),
        (0.4, "<1s"),
        (45, "45s"),
        (59.6, "1m00s"),
        (187, "3m07s"),
        (3600, "1h00m"),
        (7500, "2h05m"),
        (3 * 86400 + 4 * 3600 + 59, "3d04h"),
    ],
)
def test_durations_show_the_two_most_significant_units(seconds, text):
    """Durations are compact and never negative; unknown durations print as a dash."""
    assert fmt.format_duration(seconds) == text


def test_ages_count_back_from_now_and_forward_for_future_times():
    """An age says how long ago; a time in the future reads as 'in ...'."""
    assert fmt.format_age(NOW - timedelta(seconds=12), NOW) == "12s ago"
    assert fmt.format_age(NOW + timedelta(seconds=30), NOW) == "in 30s"
    assert fmt.format_age(None, NOW) == "-"


def test_times_drop_the_date_only_when_it_is_today():
    """Same-day times show the clock only; other days add the date; other years the year."""
    now = datetime(2026, 3, 14, 12, 0, tzinfo=UTC)
    assert fmt.format_time(datetime(2026, 3, 14, 9, 30, 5, tzinfo=UTC), now) == "09:30:05"
    assert fmt.format_time(datetime(2026, 3, 2, 9, 30, tzinfo=UTC), now) == "Mar 02 09:30"
    assert fmt.format_time(datetime(2025, 3, 2, 9, 30, tzinfo=UTC), now) == "2025-03-02"
    assert fmt.format_timestamp(datetime(2026, 3, 2, 9, 30, tzinfo=UTC)) == "2026-03-02T09:30:00Z"


@pytest.mark.parametrize(
    ("done", "total", "text"),
    [
        (0, 1000, "0% 0/1000"),
        (370, 1000, "37% 370/1000"),
        (999, 1000, "99% 999/1000"),
        (1000, 1000, "100% 1000/1000"),
        (25_000, 120_000, "20% 25k/120k"),
        (1_500_000, 3_000_000, "50% 1.5M/3M"),
        (12, 0, "12 it"),
    ],
)
def test_progress_is_floored_so_100_percent_means_done(done, total, text):
    """Progress never rounds up to 100% before the last iteration."""
    assert fmt.format_progress(done, total) == text


def test_sizes_parse_binary_units_and_print_back():
    """GPU memory sizes accept KiB/MiB/GiB or plain bytes, and print in binary units."""
    assert fmt.parse_size("16GiB") == 16 * 1024**3
    assert fmt.parse_size("512M") == 512 * 1024**2
    assert fmt.parse_size("1.5G") == int(1.5 * 1024**3)
    assert fmt.parse_size("4096") == 4096
    assert fmt.format_bytes(16 * 1024**3) == "16GiB"
    assert fmt.format_bytes(1536 * 1024**2) == "1.5GiB"
    with pytest.raises(ValueError, match="not a size"):
        fmt.parse_size("lots")


def test_rates_switch_to_per_minute_when_slow():
    """Slow jobs read in iterations per minute rather than as 0.00 it/s."""
    assert fmt.format_rate(250.0) == "250 it/s"
    assert fmt.format_rate(3.5) == "3.50 it/s"
    assert fmt.format_rate(0.05) == "3.00 it/min"
    assert fmt.format_rate(0) == "-"


def test_node_or_reason_shows_placement_when_running_and_reason_otherwise():
    """Running jobs list node[gpus] per task (+job for a shared GPU); others say why."""
    running = make_job(
        state=JobState.RUNNING,
        tasks=(make_task("gpu-01", "v100"), make_task("gpu-02", "k80", (3,), shared=9)),
    )
    assert fmt.node_or_reason(running) == "gpu-01[0,1],gpu-02[3]+9"
    waiting = make_job(reason="waiting for 2 v100 GPUs")
    assert fmt.node_or_reason(waiting) == "(waiting for 2 v100 GPUs)"
    assert fmt.node_or_reason(make_job()) == "(waiting for the next round)"


def test_placement_of_a_moving_job_lists_only_its_new_tasks():
    """While a job moves, its old placement's tasks still stop beside the new ones (on the
    same GPU here): the placement names the new lease's tasks, no GPU twice."""
    old = replace(make_task("local-2", "p100", (0,)), lease=3, state=TaskState.STOPPING)
    new = [
        replace(make_task("local-2", "p100", (0,)), lease=4, state=TaskState.STARTING),
        replace(make_task("local-3", "k80", (1,)), task_index=1, lease=4),
    ]
    running = make_job(state=JobState.RUNNING, tasks=(old, new[0], new[1]))
    assert fmt.node_or_reason(running) == "local-2[0],local-3[1]"


def test_run_time_counts_from_first_start_to_the_end_or_now():
    """Elapsed time starts at the first start and stops when the job ends."""
    assert fmt.run_time(make_job(), NOW) is None
    started = make_job(started_at=NOW - timedelta(minutes=10))
    assert fmt.run_time(started, NOW) == 600
    ended = replace(started, finished_at=NOW - timedelta(minutes=4))
    assert fmt.run_time(ended, NOW) == 360


def test_eta_of_a_running_job_uses_the_slowest_gpu_type_it_spans():
    """Synchronous data parallel runs at the slowest task's pace."""
    job = make_job(
        state=JobState.RUNNING,
        iterations_done=400,
        started_at=NOW - timedelta(minutes=1),
        tasks=(make_task("gpu-01", "v100"), make_task("gpu-02", "k80")),
        throughputs=(
            Throughput("v100", 10.0, "measured"),
            Throughput("k80", 2.0, "prior"),
        ),
    )
    eta = fmt.estimate_eta(job, NOW)
    assert eta is not None
    assert eta.seconds == pytest.approx(600 / 2.0)
    assert "current GPUs" in eta.basis


def test_eta_falls_back_to_the_average_rate_without_a_model_figure():
    """Without a throughput for its GPU type, a running job extrapolates its own pace."""
    job = make_job(
        state=JobState.RUNNING,
        iterations_done=250,
        started_at=NOW - timedelta(seconds=100),
        tasks=(make_task("gpu-01", "rtx3090"),),
    )
    eta = fmt.estimate_eta(job, NOW)
    assert eta is not None
    assert eta.seconds == pytest.approx(750 * 100 / 250)
    assert "average" in eta.basis


def test_eta_of_a_waiting_job_uses_the_fastest_allowed_type():
    """A pending job is estimated on the best GPU type it may use, once it starts."""
    spec = JobSpec(
        "x", Program.builtin("resnet"), iterations=1000, allowed_gpu_types=("v100", "k80")
    )
    job = make_job(
        spec=spec,
        throughputs=(
            Throughput("a100-40gb", 50.0, "profile"),
            Throughput("v100", 20.0, "profile"),
            Throughput("k80", 5.0, "profile"),
        ),
    )
    eta = fmt.estimate_eta(job, NOW)
    assert eta is not None
    assert eta.seconds == pytest.approx(1000 / 20.0)
    assert "once running" in eta.basis


def test_eta_is_unknown_for_ended_jobs_and_without_any_speed():
    """No estimate is better than a made-up one."""
    assert fmt.estimate_eta(make_job(state=JobState.COMPLETED, iterations_done=1000), NOW) is None
    assert fmt.estimate_eta(make_job(), NOW) is None
    done = make_job(state=JobState.RUNNING, iterations_done=1000)
    eta = fmt.estimate_eta(done, NOW)
    assert eta is not None
    assert eta.seconds == 0


def test_a_job_that_reports_no_progress_shows_its_exit_code_and_run_time():
    """Commands and scripts that never reported progress show no iterations or ETA: the
    queue shows `exit N` once they end (`-` before), `show` how they ended and how long they
    ran; a script that has reported progress shows its iterations like a workload."""
    command = make_job(
        spec=JobSpec("prep", Program.command(["bash", "prep.sh"]), iterations=5, num_gpus=1),
        state=JobState.COMPLETED,
        iterations_done=5,
        exit_code=0,
        started_at=NOW - timedelta(seconds=130),
        finished_at=NOW,
    )
    assert fmt.job_progress(command) == "exit 0"
    assert fmt.progress_line(command, NOW) == "completed (exit 0) after 2m10s"
    failed = replace(command, state=JobState.FAILED, exit_code=2)
    assert fmt.job_progress(failed) == "exit 2"
    assert fmt.progress_line(failed, NOW) == "failed (exit 2) after 2m10s"

    script = make_job(
        spec=JobSpec("plain", Program.script(["python3", "train.py"]), iterations=1000),
        state=JobState.RUNNING,
        iterations_done=0,
        started_at=NOW - timedelta(seconds=45),
        throughputs=(Throughput("v100", 10.0, "prior"),),
        tasks=(make_task("gpu-01", "v100", gpus=(0,)),),
    )
    assert fmt.job_progress(script) == "-"
    assert fmt.progress_line(script, NOW) == (
        "not reported by the program; running for 45s, until it exits"
    )
    assert fmt.estimate_eta(script, NOW) is None
    managed = replace(script, reports_progress=True, iterations_done=400)
    assert fmt.job_progress(managed) == "40% 400/1000"
    assert fmt.estimate_eta(managed, NOW) is not None


def test_show_gives_one_run_time_the_limit_counts_not_the_span_since_the_first_start() -> None:
    """A job preempted once ran 26 s in its attempts but 28 s passed since its first start:
    `hctl show` says 26 s wherever it says how long the job ran."""
    job = make_job(
        spec=JobSpec("prep", Program.command(["bash", "prep.sh"]), iterations=5, num_gpus=1),
        state=JobState.COMPLETED,
        exit_code=0,
        started_at=NOW - timedelta(seconds=28),
        finished_at=NOW,
        run_seconds=26.0,
    )
    assert fmt.time_run(job, NOW) == 26.0
    assert fmt.progress_line(job, NOW) == "completed (exit 0) after 26s"
    assert "ran 26s in all attempts" in fmt.time_limit_line(job)
    assert fmt.time_run(replace(job, run_seconds=0.0), NOW) == 28.0


def test_the_queues_elapsed_column_is_the_run_time_show_gives() -> None:
    """`hctl queue`'s ELAPSED for a job preempted once is its run time over its attempts
    (26 s, what `hctl show` says), not the 28 s since its first start; a job that never
    ran shows none."""
    ran = make_job(
        state=JobState.RUNNING,
        started_at=NOW - timedelta(seconds=28),
        run_seconds=26.0,
        preemptions=1,
    )
    grid = queue_table(
        [ran, replace(ran, id=8, state=JobState.PENDING, started_at=None, run_seconds=0.0)], NOW
    )
    column = grid.headers.index("ELAPSED")
    assert [row[column] for row in grid.rows] == [fmt.format_duration(fmt.time_run(ran, NOW)), "-"]
    assert grid.rows[0][column] == "26s"
