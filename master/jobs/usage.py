"""GPU usage reports (sreport-like): attempts' GPU-seconds clipped to a period and grouped."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from store.domain import UsageRecord


class Grouping(StrEnum):
    USER = "user"
    GPU_TYPE = "type"
    DAY = "day"


@dataclass(frozen=True, slots=True)
class UsageGroup:
    key: str
    gpu_seconds: float
    jobs: int
    attempts: int


def run_seconds(records: Iterable[UsageRecord], now: datetime) -> float:
    """Seconds a job ran: per attempt (lease), from its first task's start to its last
    task's end (now for tasks still running), summed over attempts."""
    spans: dict[int, tuple[datetime, datetime]] = {}
    for record in records:
        end = record.ended_at or now
        first, last = spans.get(record.lease, (record.started_at, end))
        spans[record.lease] = (min(first, record.started_at), max(last, end))
    return sum(max(0.0, (end - start).total_seconds()) for start, end in spans.values())


def gpu_seconds(records: Iterable[UsageRecord], now: datetime) -> float:
    """GPU-seconds of a job's attempts: each task's run time times its GPUs."""
    return sum(record.gpu_seconds(now) for record in records)


def _pieces(
    record: UsageRecord, since: datetime, until: datetime, grouping: Grouping
) -> Iterator[tuple[str, float]]:
    """(group key, GPU-seconds) of the part of one attempt inside [since, until]; an attempt
    grouped by day is cut at each UTC midnight."""
    start = max(record.started_at, since)
    end = min(record.ended_at or until, until)
    if end <= start:
        return
    if grouping is not Grouping.DAY:
        key = record.user if grouping is Grouping.USER else record.gpu_type
        yield key, (end - start).total_seconds() * record.num_gpus
        return
    cursor = start
    while cursor < end:
        midnight = datetime.combine(
            cursor.date() + timedelta(days=1), datetime.min.time(), cursor.tzinfo
        )
        piece_end = min(end, midnight)
        yield cursor.date().isoformat(), (piece_end - cursor).total_seconds() * record.num_gpus
        cursor = piece_end


def summarize(
    records: Iterable[UsageRecord], *, since: datetime, until: datetime, grouping: Grouping
) -> list[UsageGroup]:
    """GPU-seconds per group in [since, until], ordered by key. Running attempts (no end)
    count up to `until`; attempts with no time in the period make no row."""
    seconds: dict[str, float] = {}
    jobs: dict[str, set[int]] = {}
    attempts: dict[str, set[int]] = {}
    for record in records:
        for key, value in _pieces(record, since, until, grouping):
            seconds[key] = seconds.get(key, 0.0) + value
            jobs.setdefault(key, set()).add(record.job_id)
            attempts.setdefault(key, set()).add(record.task_id)
    return [
        UsageGroup(key, seconds[key], len(jobs[key]), len(attempts[key])) for key in sorted(seconds)
    ]
