"""Turning values into short text for people: durations, ages, progress, ETAs, placements.

Every function takes ``now`` explicitly so the output is testable and consistent within one
screen.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from clients.types import Delivery, DeliveryStatus, Job, JobState, Task
from protos.durations import parse_duration

_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def format_duration(seconds: float | None) -> str:
    """Two most significant units: ``45s``, ``3m07s``, ``2h05m``, ``3d04h``; ``-`` for None."""
    if seconds is None or math.isnan(seconds):
        return "-"
    seconds = max(seconds, 0)
    if seconds < 1:
        return "0s" if seconds == 0 else "<1s"
    total = round(seconds)
    parts: list[tuple[str, int]] = []
    for unit, size in _UNITS:
        amount, total = divmod(total, size)
        if amount or parts:
            parts.append((unit, amount))
        if len(parts) == 2:
            break
    first_unit, first = parts[0]
    if len(parts) == 1 or first_unit == "s":
        return f"{first}{first_unit}"
    second_unit, second = parts[1]
    return f"{first}{first_unit}{second:02d}{second_unit}"


def format_age(at: datetime | None, now: datetime) -> str:
    """How long ago: ``12s ago``; ``-`` for None; ``in 5s`` for a time in the future."""
    if at is None:
        return "-"
    delta = (now - at).total_seconds()
    if delta < 0:
        return f"in {format_duration(-delta)}"
    return f"{format_duration(delta)} ago"


def format_time(at: datetime | None, now: datetime) -> str:
    """A local wall-clock time, as short as is unambiguous next to ``now``."""
    if at is None:
        return "-"
    local = at.astimezone(now.tzinfo if now.tzinfo is not None else None)
    local_now = now.astimezone(local.tzinfo)
    if local.date() == local_now.date():
        return local.strftime("%H:%M:%S")
    if local.year == local_now.year:
        return local.strftime("%b %d %H:%M")
    return local.strftime("%Y-%m-%d")


def format_timestamp(at: datetime | None) -> str:
    """RFC 3339 in UTC with a ``Z`` (the form used in ``--json`` output); ``-`` for None."""
    if at is None:
        return "-"
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_progress(done: int, total: int) -> str:
    """``37% 370/1000``; percentages are floored so 100% means done."""
    if total <= 0:
        return f"{done} it"
    percent = min(100, math.floor(100 * done / total))
    return f"{percent}% {format_count(done)}/{format_count(total)}"


def job_progress(job: Job) -> str:
    """The queue's PROGRESS cell: iterations where the program reports them, else (opaque
    commands, plain scripts) ``exit N`` once it has ended with a code, ``-`` before."""
    if job.progress_measured:
        return format_progress(job.iterations_done, job.spec.iterations)
    if job.state.terminal and job.exit_code is not None:
        return f"exit {job.exit_code}"
    return "-"


def progress_line(job: Job, now: datetime) -> str:
    """``hctl show``'s progress for a job whose program reports none: how it ended (its
    exit code) and how long it ran, or that it runs until it exits."""
    ran = format_duration(time_run(job, now))
    if job.state.terminal:
        code = "" if job.exit_code is None else f" (exit {job.exit_code})"
        return f"{job.state.value.lower()}{code} after {ran}"
    if job.state is JobState.RUNNING:
        return f"not reported by the program; running for {ran}, until it exits"
    if job.spec.preemptible:
        return (
            "not reported by the program; it runs until it exits, again from the start "
            "if it is preempted"
        )
    return "not reported by the program; it runs until it exits where it is placed"


# More variables than this (an exported shell environment) are counted, not listed.
ENV_SHOWN_MAX = 8


def env_line(env: Mapping[str, str], job_id: int) -> str:
    """``hctl show``'s environment: its variables when few, else how many and where to
    read them all."""
    if len(env) <= ENV_SHOWN_MAX:
        return " ".join(f"{k}={v}" for k, v in env.items())
    return f"{len(env)} variables (`hctl show {job_id} --json` lists them)"


def format_count(value: int) -> str:
    """Compact counts: ``950``, ``12.5k``, ``3.2M``."""
    if value < 10_000:
        return str(value)
    if value < 1_000_000:
        return f"{value / 1000:.1f}k".replace(".0k", "k")
    return f"{value / 1_000_000:.1f}M".replace(".0M", "M")


def format_rate(iterations_per_s: float) -> str:
    if iterations_per_s <= 0:
        return "-"
    if iterations_per_s >= 100:
        return f"{iterations_per_s:.0f} it/s"
    if iterations_per_s >= 1:
        return f"{iterations_per_s:.2f} it/s"
    return f"{iterations_per_s * 60:.2f} it/min"


def format_bytes(value: int) -> str:
    """Binary units: ``16GiB``, ``512MiB``."""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            text = f"{size:.1f}".removesuffix(".0")
            return f"{text}{unit}"
        size /= 1024
    raise AssertionError("unreachable")


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``16GiB``, ``16G``, ``512MiB`` or a number of bytes; K/M/G/T are binary multiples."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a size (e.g. 16GiB, 512MiB)")
    number, unit, _ = match.groups()
    power = " KMGT".index(unit.upper()) if unit else 0
    return int(float(number) * 1024**power)


def placement(tasks: tuple[Task, ...]) -> str:
    """``gpu-01[0,1]`` per task of the job's newest placement, comma separated; a shared
    GPU is marked with the other job.

    While a job moves, the tasks of its previous placement are still stopping beside the
    new ones (on the same GPUs, when it keeps some): listing both would name a GPU twice.
    """
    newest = max((task.lease for task in tasks), default=0)
    parts = []
    for task in tasks:
        if task.lease != newest:
            continue
        gpus = ",".join(str(i) for i in task.gpu_indices)
        shared = f"+{task.shared_with_job_id}" if task.shared_with_job_id else ""
        parts.append(f"{task.node}[{gpus}]{shared}")
    return ",".join(parts)


def node_or_reason(job: Job) -> str:
    """Slurm's NODELIST(REASON) column: where it runs, else why not, in parentheses."""
    if job.state is JobState.RUNNING and job.tasks:
        return placement(job.tasks)
    if job.state is JobState.COMPLETED:
        return "-"
    if job.reason:
        return f"({job.reason})"
    if job.state is JobState.PENDING:
        return "(waiting for the next round)"
    return ""


def run_time(job: Job, now: datetime) -> float | None:
    """Seconds from the first start to the end (or to now while the job has not ended)."""
    if job.started_at is None:
        return None
    end = job.finished_at or now
    return max(0.0, (end - job.started_at).total_seconds())


def time_run(job: Job, now: datetime) -> float | None:
    """How long the job has run, summed over its attempts, as its time limit counts it
    (GetJob and ListJobs fill it); the span since its first start where that is not known. One
    screen must not give one job two run times."""
    if job.run_seconds > 0:
        return job.run_seconds
    return run_time(job, now)


@dataclass(frozen=True, slots=True)
class Eta:
    seconds: float
    # What the estimate assumes, for people: "on its current GPUs", ...
    basis: str


def estimate_eta(job: Job, now: datetime) -> Eta | None:
    """Time to finish the remaining iterations.

    A running job is as fast as the slowest GPU type it runs on (synchronous data parallel),
    at the model's throughput for this job; without a model figure, its average rate since it
    started. A waiting job gets the fastest allowed type it has a figure for, counted from when
    it starts. None when the job has ended or nothing is known about its speed.
    """
    if job.state.terminal or not job.progress_measured:
        return None
    remaining = job.remaining_iterations
    if remaining == 0:
        return Eta(0.0, "all iterations done")
    rates = {t.gpu_type: t.iterations_per_s for t in job.throughputs if t.iterations_per_s > 0}
    if job.state is JobState.RUNNING and job.tasks:
        placed = [rates[t.gpu_type] for t in job.tasks if t.gpu_type in rates]
        if placed and len(placed) == len(job.tasks):
            return Eta(remaining / min(placed), "on its current GPUs")
        elapsed = run_time(job, now)
        if elapsed and job.iterations_done > 0:
            return Eta(remaining * elapsed / job.iterations_done, "at its average rate so far")
        return None
    allowed = set(job.spec.allowed_gpu_types)
    candidates = [rate for gpu_type, rate in rates.items() if not allowed or gpu_type in allowed]
    if not candidates:
        return None
    return Eta(remaining / max(candidates), "once running, on the fastest allowed GPU type")


def format_gpu_hours(gpu_seconds: float) -> str:
    """GPU time for people, in GPU-hours as sreport and sacct report it: ``0.25 GPU-h``;
    below a hundredth of an hour, in GPU-seconds (``42 GPU-s``) so short jobs do not read 0."""
    if gpu_seconds < 36:
        return f"{gpu_seconds:.0f} GPU-s"
    return f"{gpu_seconds / 3600:.2f} GPU-h"


def time_limit_line(job: Job) -> str:
    """The job's time limit and how much of it its run time has used."""
    limit = job.spec.time_limit_s
    used = format_duration(job.run_seconds)
    if not limit:
        return f"none (ran {used} in all attempts)"
    counted = job.limit_run_seconds if job.requeues else job.run_seconds
    share = min(1.0, counted / limit)
    since = "since its last requeue" if job.requeues else "in all attempts"
    used = format_duration(counted)
    return f"{format_duration(limit)} of run time; used {used} ({share:.0%}) {since}" + (
        "; stopped at it" if job.state is JobState.TIMEOUT else ""
    )


def parse_since(text: str, now: datetime) -> datetime:
    """A start time given as an age (``30d``, ``12h``, ``90m``: that long before ``now``), a
    date (``2026-11-01``, midnight UTC) or an ISO time (``2026-11-01T08:00``, UTC unless
    it says otherwise). Raises ValueError naming the accepted forms."""
    value = text.strip()
    try:
        age = parse_duration(value)
    except ValueError:
        pass
    else:
        try:
            return now - timedelta(seconds=age)
        except OverflowError:
            raise ValueError(
                f"{text!r} is out of range: an age reaches back to year 1 at most"
            ) from None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither an age (30d, 12h, 90m) nor a date (2026-11-01) "
            "or time (2026-11-01T08:00)"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def delivery_status(item: Delivery) -> str:
    """delivered, retrying (failed, tried again later), pending (not tried yet) or gave up."""
    if item.status is DeliveryStatus.DELIVERED:
        return "delivered"
    if item.status is DeliveryStatus.GAVE_UP:
        return "gave up"
    return "retrying" if item.attempts else "pending"


def delivery_detail(item: Delivery, now: datetime) -> str:
    if item.status is DeliveryStatus.DELIVERED:
        return f"at {format_time(item.delivered_at, now)}"
    detail = item.last_error
    if item.status is DeliveryStatus.PENDING and item.next_attempt_at is not None and item.attempts:
        detail += f"; next try {format_time(item.next_attempt_at, now)}"
    return detail
