"""What each page shows, computed from the client's plain values: no web framework, no
network, so every figure here is tested on its own."""

from __future__ import annotations

import itertools
import math
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from clients.cli.arrays import QueueRow, queue_rows
from clients.types import (
    ACTIVE_JOB_STATES,
    Job,
    JobEvent,
    JobRecord,
    JobState,
    Node,
    NodeState,
)

# -- the queue -------------------------------------------------------------------------------


class FilterError(ValueError):
    """A query parameter of the queue page is unusable; the message names it."""


@dataclass(frozen=True, slots=True)
class QueueFilter:
    user: str = ""
    states: tuple[JobState, ...] = ACTIVE_JOB_STATES
    page: int = 1

    @classmethod
    def parse(cls, user: str | None, state: str | None, page: str | None) -> QueueFilter:
        states = ACTIVE_JOB_STATES
        if state:
            try:
                states = (JobState(state.strip().lower()),)
            except ValueError:
                known = ", ".join(s.value for s in JobState if s.value != "unspecified")
                raise FilterError(f"state: {state!r} is no job state (one of {known})") from None
        number = 1
        if page:
            if not page.isdigit() or int(page) < 1:
                raise FilterError(f"page: {page!r} is not a page number (1, 2, ...)")
            number = int(page)
        return cls((user or "").strip(), states, number)


@dataclass(frozen=True, slots=True)
class QueuePage:
    rows: tuple[QueueRow, ...]
    page: int
    pages: int
    total_rows: int
    total_jobs: int


def queue_page(jobs: Sequence[Job], page: int, page_size: int) -> QueuePage:
    """The jobs as `hctl queue` lines (an array's pending elements folded into one), cut to
    one page; a page past the last shows the last."""
    rows = queue_rows(jobs, expand=False)
    pages = max(1, math.ceil(len(rows) / page_size))
    page = min(page, pages)
    start = (page - 1) * page_size
    return QueuePage(tuple(rows[start : start + page_size]), page, pages, len(rows), len(jobs))


def poll_interval(base_s: float, asked_s: float, took_s: float) -> float:
    """Seconds until an open page asks again: its own pace (never faster than the
    dashboard's), slowed where its calls took long (a huge queue, a loaded master) so that
    no open page keeps the master busy more than a fifth of the time; at most 30 s."""
    return round(min(max(base_s, asked_s, 5 * took_s), 30.0), 1)


# -- the cluster -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuRow:
    node: str
    node_state: NodeState
    index: int
    type: str
    healthy: bool
    utilization: float
    job_ids: tuple[int, ...]
    users: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GpuTypeGroup:
    type: str
    gpus: tuple[GpuRow, ...]

    @property
    def busy(self) -> int:
        return sum(1 for g in self.gpus if g.job_ids)


def gpus_by_type(nodes: Sequence[Node], owners: dict[int, str]) -> list[GpuTypeGroup]:
    """Every GPU of every node, grouped by type (types by name), with its jobs' users."""
    by_type: dict[str, list[GpuRow]] = {}
    for node in sorted(nodes, key=lambda n: n.name):
        for gpu in sorted(node.gpus, key=lambda g: g.index):
            row = GpuRow(
                node=node.name,
                node_state=node.state,
                index=gpu.index,
                type=gpu.type,
                healthy=gpu.health.value != "unhealthy",
                utilization=gpu.utilization,
                job_ids=gpu.job_ids,
                users=tuple(dict.fromkeys(owners.get(j, "?") for j in gpu.job_ids)),
            )
            by_type.setdefault(gpu.type, []).append(row)
    return [GpuTypeGroup(t, tuple(rows)) for t, rows in sorted(by_type.items())]


def troubled_nodes(nodes: Sequence[Node]) -> list[Node]:
    """Nodes that take no new work: draining, drained or lost."""
    return [n for n in nodes if n.state is not NodeState.READY]


# Events that place a job: each starts an attempt or moves a running one.
PLACING_EVENTS = frozenset({"scheduled", "migrated", "resized"})


@dataclass(frozen=True, slots=True)
class Placement:
    attempt: int
    event: JobEvent


def placements(events: Sequence[JobEvent]) -> list[Placement]:
    """The job's placements from its timeline, numbered by attempt: a `scheduled` event
    starts the next attempt, a migration or resize moves the current one."""
    out: list[Placement] = []
    attempt = 0
    for event in events:
        if event.kind not in PLACING_EVENTS:
            continue
        if event.kind == "scheduled" or attempt == 0:
            attempt += 1
        out.append(Placement(attempt, event))
    return out


# -- a job's measured progress -----------------------------------------------------------------


class ProgressLog:
    """(time, iterations done) of each job as the dashboard saw it, most recent `keep`
    samples per job, for at most `jobs` jobs: the job page plots progress and throughput
    over the time the dashboard watched it."""

    def __init__(self, keep: int = 600, jobs: int = 500) -> None:
        self._keep = keep
        self._jobs = jobs
        self._lock = threading.Lock()
        self._samples: dict[int, deque[tuple[float, int]]] = {}

    def record(self, job: Job, at: float) -> None:
        with self._lock:
            samples = self._samples.pop(job.id, None) or deque(maxlen=self._keep)
            if not samples or samples[-1][1] != job.iterations_done or at - samples[-1][0] > 5:
                samples.append((at, job.iterations_done))
            # Re-inserted last: the oldest-watched job is the first to go.
            self._samples[job.id] = samples
            while len(self._samples) > self._jobs:
                del self._samples[next(iter(self._samples))]

    def series(self, job_id: int) -> tuple[list[float], list[int], list[float | None]]:
        """Times, iterations done, and iterations per second between samples (None first)."""
        with self._lock:
            samples = list(self._samples.get(job_id, ()))
        times = [t for t, _ in samples]
        done = [n for _, n in samples]
        rates: list[float | None] = [None]
        for (t0, n0), (t1, n1) in itertools.pairwise(samples):
            rates.append((n1 - n0) / (t1 - t0) if t1 > t0 else None)
        return times, done, rates[: len(samples)]


# -- history -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Series:
    """x values (Unix seconds, or bin starts) and one y list per named series."""

    x: list[float]
    ys: dict[str, list[float | None]]


def utilization_over_time(
    records: Iterable[JobRecord],
    running: Iterable[Job],
    total_gpus: int,
    now: datetime,
    span: timedelta = timedelta(days=1),
    bins: int = 48,
) -> Series:
    """Busy GPUs as a percentage of the cluster's, per time bin over the last `span`. An
    ended job counts its GPU-seconds spread evenly between its start and its end (its
    preemptions are not known here); a running job counts its GPUs from its start to now."""
    start = now - span
    width = span.total_seconds() / bins
    busy = [0.0] * bins
    base = start.timestamp()

    def add(begin: float, end: float, gpus: float) -> None:
        first = max(0, int((begin - base) // width))
        last = min(bins - 1, int((end - base) // width))
        for b in range(first, last + 1):
            lo = max(begin, base + b * width)
            hi = min(end, base + (b + 1) * width)
            if hi > lo:
                busy[b] += gpus * (hi - lo)

    for record in records:
        job = record.job
        if job.started_at is None or job.finished_at is None:
            continue
        begin, end = job.started_at.timestamp(), job.finished_at.timestamp()
        if end > begin and record.gpu_seconds > 0:
            add(begin, end, record.gpu_seconds / (end - begin))
    for job in running:
        if job.state is JobState.RUNNING and job.started_at is not None:
            add(job.started_at.timestamp(), now.timestamp(), float(job.spec.num_gpus))
    capacity = max(total_gpus, 1) * width
    return Series(
        x=[base + b * width for b in range(bins)],
        ys={"busy": [round(min(100.0, 100.0 * v / capacity), 1) for v in busy]},
    )


@dataclass(frozen=True, slots=True)
class Histogram:
    edges: list[float]
    counts: list[int]


def jct_histogram(records: Iterable[JobRecord], bins: int = 12) -> Histogram:
    """Job completion times (submission to end, minutes) of ended jobs, in log-spaced bins
    from the shortest to the longest: JCTs span seconds to days."""
    minutes = [
        (r.job.finished_at - r.job.submitted_at).total_seconds() / 60.0
        for r in records
        if r.job.finished_at is not None and r.job.submitted_at is not None
    ]
    minutes = [max(m, 1 / 60) for m in minutes]
    if not minutes:
        return Histogram([], [])
    low, high = math.log10(min(minutes)), math.log10(max(minutes))
    if high - low < 1e-9:
        high = low + 1
    step = (high - low) / bins
    edges = [10 ** (low + i * step) for i in range(bins + 1)]
    counts = [0] * bins
    for m in minutes:
        counts[min(bins - 1, int((math.log10(m) - low) / step))] += 1
    return Histogram([round(e, 4) for e in edges], counts)


def day_matrix(per_user: dict[str, dict[str, float]]) -> Series:
    """GPU-hours per user (series) per UTC day (x, as midnight Unix seconds), days with no
    use by anyone left out, a user without use on a day at 0."""
    days = sorted({day for rows in per_user.values() for day in rows})
    x = [datetime.strptime(d, "%Y-%m-%d").replace(tzinfo=UTC).timestamp() for d in days]
    ys: dict[str, list[float | None]] = {
        user: [round(rows.get(day, 0.0), 3) for day in days]
        for user, rows in sorted(per_user.items())
    }
    return Series(x, ys)


def history_span(records: Iterable[JobRecord], running: Iterable[Job], now: datetime) -> timedelta:
    """How far back the utilization chart looks: to the earliest start among the jobs, at
    least an hour and at most a day (a young cluster's chart is not a flat day)."""
    starts = [r.job.started_at for r in records if r.job.started_at is not None]
    starts += [j.started_at for j in running if j.started_at is not None]
    if not starts:
        return timedelta(hours=1)
    return min(timedelta(days=1), max(timedelta(hours=1), now - min(starts)))
