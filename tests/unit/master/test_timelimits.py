"""Time limits on the master's side: what a submission may ask for, run time over attempts,
the cluster's settings, and usage reports clipped to a period."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from master.errors import InvalidArgumentError
from master.jobs.timelimits import apply_time_limit, stop_due, timeout_reason
from master.jobs.usage import Grouping, UsageGroup, gpu_seconds, run_seconds, summarize
from master.settings import Settings, SettingsError
from store.domain import JobSpec, UsageRecord
from store.states import ProgramKind

T0 = datetime(2026, 11, 24, 22, 0, tzinfo=UTC)


def spec(limit: int = 0) -> JobSpec:
    return JobSpec(
        name="j",
        num_gpus=1,
        iterations=10,
        program_kind=ProgramKind.COMMAND,
        argv=("true",),
        time_limit_s=limit,
    )


def record(
    task: int,
    lease: int,
    start_s: float,
    end_s: float | None,
    *,
    gpus: int = 1,
    user: str = "alice",
    gpu_type: str = "v100",
    job: int = 1,
) -> UsageRecord:
    return UsageRecord(
        task_id=task,
        job_id=job,
        user=user,
        node="n1",
        lease=lease,
        gpu_type=gpu_type,
        num_gpus=gpus,
        started_at=T0 + timedelta(seconds=start_s),
        ended_at=None if end_s is None else T0 + timedelta(seconds=end_s),
    )


def test_a_limit_above_the_cluster_maximum_is_refused_naming_the_maximum() -> None:
    """INVALID_ARGUMENT on spec.time_limit_s, saying the cluster's max_time_limit."""
    with pytest.raises(InvalidArgumentError) as raised:
        apply_time_limit(spec(3 * 3600), max_s=2 * 3600, default_s=0)
    assert raised.value.field == "spec.time_limit_s"
    assert "max_time_limit = 02:00:00" in str(raised.value)
    assert apply_time_limit(spec(2 * 3600), max_s=2 * 3600, default_s=0).time_limit_s == 7200


def test_a_job_without_a_limit_gets_the_cluster_default() -> None:
    """No limit asked: the default applies; a limit asked is kept, even above the default."""
    assert apply_time_limit(spec(), max_s=0, default_s=600).time_limit_s == 600
    assert apply_time_limit(spec(), max_s=0, default_s=0).time_limit_s == 0
    assert apply_time_limit(spec(1200), max_s=0, default_s=600).time_limit_s == 1200


def test_run_time_sums_attempts_and_counts_each_attempt_once() -> None:
    """Two tasks of one attempt count once (first start to last end); a second attempt
    adds its own time; the gap between attempts (queued) does not count; a running task
    counts up to now."""
    records = [
        record(1, lease=1, start_s=0, end_s=60, gpus=2),
        record(2, lease=1, start_s=5, end_s=70, gpus=2),
        record(3, lease=2, start_s=500, end_s=None, gpus=4),
    ]
    now = T0 + timedelta(seconds=530)
    assert run_seconds(records, now) == 70 + 30
    assert gpu_seconds(records, now) == 60 * 2 + 65 * 2 + 30 * 4
    assert run_seconds([], now) == 0.0


def test_timeout_reason_says_the_limit_and_the_run_time() -> None:
    assert timeout_reason(30, 31.4) == "time limit 00:00:30 reached after 00:00:31 of run time"


def test_settings_read_time_limits_as_durations_and_refuse_bad_ones() -> None:
    """max_time_limit and default_time_limit take duration forms; a bad one, or a default
    above the maximum, is refused naming the setting."""
    settings = Settings(max_time_limit="2-00:00:00", default_time_limit="4h")
    assert (settings.max_time_limit_s, settings.default_time_limit_s) == (172800, 14400)
    assert Settings().max_time_limit_s == 0
    with pytest.raises(SettingsError, match="max_time_limit: 'two days' is not a duration"):
        Settings(max_time_limit="two days")
    with pytest.raises(SettingsError, match=r"default_time_limit .* must not exceed"):
        Settings(max_time_limit="1h", default_time_limit="2h")


def test_usage_is_clipped_to_the_period_and_grouped() -> None:
    """Only the part of an attempt inside [since, until] counts; groups are by user or GPU
    type, with distinct jobs and attempts."""
    records = [
        record(1, 1, start_s=-3600, end_s=3600, gpus=2, user="alice", job=1),
        record(2, 2, start_s=0, end_s=1800, gpus=1, user="bob", gpu_type="k80", job=2),
        record(3, 3, start_s=1800, end_s=None, gpus=1, user="alice", gpu_type="k80", job=3),
    ]
    since, until = T0, T0 + timedelta(hours=1)
    by_user = summarize(records, since=since, until=until, grouping=Grouping.USER)
    assert by_user == [
        UsageGroup("alice", 2 * 3600 + 1800, jobs=2, attempts=2),
        UsageGroup("bob", 1800, jobs=1, attempts=1),
    ]
    by_type = summarize(records, since=since, until=until, grouping=Grouping.GPU_TYPE)
    assert [(g.key, g.gpu_seconds) for g in by_type] == [("k80", 3600.0), ("v100", 7200.0)]


def test_usage_by_day_cuts_attempts_at_utc_midnight() -> None:
    """An attempt from 22:00 to 02:00 UTC counts 2 hours on each day."""
    records = [record(1, 1, start_s=0, end_s=4 * 3600, gpus=1)]
    days = summarize(
        records, since=T0 - timedelta(days=1), until=T0 + timedelta(days=1), grouping=Grouping.DAY
    )
    assert [(g.key, g.gpu_seconds) for g in days] == [
        ("2026-11-24", 7200.0),
        ("2026-11-25", 7200.0),
    ]
    assert (
        summarize(
            records,
            since=T0 + timedelta(hours=5),
            until=T0 + timedelta(hours=6),
            grouping=Grouping.DAY,
        )
        == []
    )


def test_a_warned_job_is_stopped_its_warning_before_the_limit() -> None:
    """With --signal SIG@30 a 600 s limit starts the stop at 570 s of run time, so the
    worker's SIGTERM, 30 s after the warning, falls on the limit; without one, at 600 s."""
    warned = dataclasses.replace(spec(600), warn_signal=10, warn_before_s=30)
    assert not stop_due(warned, 569.9)
    assert stop_due(warned, 570.0)
    assert not stop_due(spec(600), 599.9)
    assert stop_due(spec(600), 600.0)
