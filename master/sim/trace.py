"""Job traces: Gavel's ``.trace`` format and a documented CSV format.

Gavel ``.trace``: one job per line, 10 tab-separated columns: job_type, command,
working_directory, num_steps_arg, needs_data_dir, total_steps, scale_factor (= number of
GPUs), priority_weight, SLO, arrival_time (seconds).

CSV (header required; column order free; extra columns ignored)::

    job_id,arrival_s,job_type,num_gpus,iterations,duration_s,user,priority,batch_size,
    allowed_gpu_types,preemptible,shareable,forkable,time_limit_s,submitted_iterations

``job_id``, ``arrival_s``, ``job_type`` and ``num_gpus`` are required, and one of
``iterations`` or ``duration_s`` per row (``duration_s`` is the run time alone on the
fastest GPU type of the simulated cluster, converted to iterations with the throughput
model). ``user`` defaults to empty, ``priority`` to 1, ``batch_size`` to the number in
"(batch size N)" in the job type or 1, ``allowed_gpu_types`` (types separated by ``|``)
to any type, ``preemptible`` to true, ``shareable`` and ``forkable`` (may run as several
averaged copies) to false (booleans: true/false, yes/no, 1/0). A Gavel trace marks no job
forkable. ``time_limit_s`` is the time limit the user asked for (``sbatch --time``); empty
or absent, the simulator draws one (see :mod:`master.sim.limits`). A Gavel trace has none.
``submitted_iterations`` is the user's estimate of the job's iterations when it differs
from what the job runs; policies see it as ``JobView.predicted_iterations`` (``a-srpt``
learns from it); empty or absent, the estimate is exact.

A malformed line raises :class:`TraceError` naming ``file:line`` and the problem.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_BATCH = re.compile(r"\(batch size (\d+)\)")


class TraceError(ValueError):
    """A trace file that cannot be read; the message names file:line."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace. Exactly one of ``iterations`` / ``duration_s`` is set."""

    id: int
    arrival_s: float
    job_type: str
    num_gpus: int
    iterations: float | None
    duration_s: float | None = None
    user: str = ""
    priority: float = 1.0
    batch_size: int = 1
    allowed_gpu_types: frozenset[str] = frozenset()
    preemptible: bool = True
    shareable: bool = False
    # May run as several averaged copies (HadarE); a Gavel trace marks no job so.
    forkable: bool = False
    # The user's time limit in seconds; None: the trace gives none (the simulator draws one).
    time_limit_s: float | None = None
    # The user's estimate of the iterations; None: exact (the job's own count).
    submitted_iterations: float | None = None

    def __post_init__(self) -> None:
        if (self.iterations is None) == (self.duration_s is None):
            raise ValueError(f"job {self.id}: give exactly one of iterations and duration_s")
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise ValueError(f"job {self.id}: time_limit_s must be > 0, got {self.time_limit_s}")
        submitted = self.submitted_iterations
        if submitted is not None and not (math.isfinite(submitted) and submitted > 0):
            raise ValueError(
                f"job {self.id}: submitted_iterations must be a finite number > 0, got {submitted}"
            )


def batch_size_of(job_type: str) -> int:
    """The batch size written in a Gavel job type, e.g. "ResNet-18 (batch size 128)"."""
    match = _BATCH.search(job_type)
    return int(match.group(1)) if match else 1


def _finite(value: str, what: str, *, positive: bool = False, minimum: float = 0.0) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{what} is not a number: {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{what} must be finite, got {value!r}")
    if positive and number <= 0:
        raise ValueError(f"{what} must be > 0, got {value!r}")
    if number < minimum:
        raise ValueError(f"{what} must be >= {minimum:g}, got {value!r}")
    return number


def _count(value: str, what: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{what} is not a whole number: {value!r}") from None
    if number < 1:
        raise ValueError(f"{what} must be >= 1, got {number}")
    return number


def read_gavel_trace(path: str | Path) -> list[TraceJob]:
    """Read a Gavel ``.trace`` file; job ids are line order from 0, as Gavel numbers them."""
    path = Path(path)
    jobs: list[TraceJob] = []
    for lineno, line in _lines(path):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.rstrip("\n").split("\t")
        try:
            if len(fields) != 10:
                raise ValueError(f"expected 10 tab-separated columns, found {len(fields)}")
            job_type = fields[0].strip()
            if not job_type:
                raise ValueError("empty job_type")
            jobs.append(
                TraceJob(
                    id=len(jobs),
                    arrival_s=_finite(fields[9], "arrival_time"),
                    job_type=job_type,
                    num_gpus=_count(fields[6], "scale_factor"),
                    iterations=_finite(fields[5], "total_steps", positive=True),
                    priority=_finite(fields[7], "priority_weight", positive=True),
                    batch_size=batch_size_of(job_type),
                )
            )
        except ValueError as exc:
            raise TraceError(f"{path}:{lineno}: {exc}") from None
    return _sorted(jobs)


_CSV_REQUIRED = ("job_id", "arrival_s", "job_type", "num_gpus")


def read_csv_trace(path: str | Path) -> list[TraceJob]:
    """Read the CSV trace format described in the module docstring."""
    path = Path(path)
    try:
        handle = path.open(newline="")
    except FileNotFoundError:
        raise TraceError(f"{path}: trace file not found") from None
    with handle:
        reader = csv.DictReader(handle)
        header = [h.strip() for h in reader.fieldnames or []]
        missing = [c for c in _CSV_REQUIRED if c not in header]
        if missing:
            raise TraceError(f"{path}:1: CSV header lacks column(s): {', '.join(missing)}")
        if "iterations" not in header and "duration_s" not in header:
            raise TraceError(f"{path}:1: CSV header needs an iterations or duration_s column")
        reader.fieldnames = header
        jobs: list[TraceJob] = []
        seen: set[int] = set()
        for row in reader:
            lineno = reader.line_num
            try:
                jobs.append(_csv_job(row, seen))
            except ValueError as exc:
                raise TraceError(f"{path}:{lineno}: {exc}") from None
    return _sorted(jobs)


def _csv_job(row: dict[str, str | None], seen: set[int]) -> TraceJob:
    def cell(name: str) -> str:
        value = row.get(name)
        return "" if value is None else value.strip()

    if None in row:
        raise ValueError("more cells than header columns")
    try:
        job_id = int(cell("job_id"))
    except ValueError:
        raise ValueError(f"job_id is not a whole number: {cell('job_id')!r}") from None
    if job_id in seen:
        raise ValueError(f"duplicate job_id {job_id}")
    seen.add(job_id)
    job_type = cell("job_type")
    if not job_type:
        raise ValueError("empty job_type")
    iterations = cell("iterations")
    duration = cell("duration_s")
    if bool(iterations) == bool(duration):
        raise ValueError("give exactly one of iterations and duration_s")
    allowed = frozenset(t.strip() for t in cell("allowed_gpu_types").split("|") if t.strip())
    preemptible = _flag(cell("preemptible"), "preemptible", default=True)
    shareable = _flag(cell("shareable"), "shareable", default=False)
    forkable = _flag(cell("forkable"), "forkable", default=False)
    batch = cell("batch_size")
    limit = cell("time_limit_s")
    submitted = cell("submitted_iterations")
    return TraceJob(
        id=job_id,
        arrival_s=_finite(cell("arrival_s"), "arrival_s"),
        job_type=job_type,
        num_gpus=_count(cell("num_gpus"), "num_gpus"),
        iterations=_finite(iterations, "iterations", positive=True) if iterations else None,
        duration_s=_finite(duration, "duration_s", positive=True) if duration else None,
        user=cell("user"),
        priority=_finite(cell("priority"), "priority", positive=True) if cell("priority") else 1.0,
        batch_size=_count(batch, "batch_size") if batch else batch_size_of(job_type),
        allowed_gpu_types=allowed,
        preemptible=preemptible,
        shareable=shareable,
        forkable=forkable,
        time_limit_s=_finite(limit, "time_limit_s", positive=True) if limit else None,
        submitted_iterations=(
            _finite(submitted, "submitted_iterations", positive=True) if submitted else None
        ),
    )


def _flag(value: str, what: str, *, default: bool) -> bool:
    if not value:
        return default
    lowered = value.lower()
    if lowered in ("true", "yes", "1"):
        return True
    if lowered in ("false", "no", "0"):
        return False
    raise ValueError(f"{what} must be true or false, got {value!r}")


def read_trace(path: str | Path) -> list[TraceJob]:
    """Read a trace by its suffix: ``.csv`` is CSV, anything else Gavel's format."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        return read_csv_trace(path)
    return read_gavel_trace(path)


def write_csv_trace(path: str | Path, jobs: Iterable[TraceJob]) -> None:
    """Write jobs in the CSV trace format (round-trips through :func:`read_csv_trace`)."""
    columns = [
        "job_id",
        "arrival_s",
        "job_type",
        "num_gpus",
        "iterations",
        "duration_s",
        "user",
        "priority",
        "batch_size",
        "allowed_gpu_types",
        "preemptible",
        "shareable",
        "forkable",
        "time_limit_s",
        "submitted_iterations",
    ]
    with Path(path).open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for job in jobs:
            writer.writerow(
                [
                    job.id,
                    repr(job.arrival_s),
                    job.job_type,
                    job.num_gpus,
                    "" if job.iterations is None else repr(job.iterations),
                    "" if job.duration_s is None else repr(job.duration_s),
                    job.user,
                    repr(job.priority),
                    job.batch_size,
                    "|".join(sorted(job.allowed_gpu_types)),
                    str(job.preemptible).lower(),
                    str(job.shareable).lower(),
                    str(job.forkable).lower(),
                    "" if job.time_limit_s is None else repr(job.time_limit_s),
                    "" if job.submitted_iterations is None else repr(job.submitted_iterations),
                ]
            )


def _lines(path: Path) -> Iterable[tuple[int, str]]:
    try:
        with path.open() as handle:
            yield from enumerate(handle, start=1)
    except FileNotFoundError:
        raise TraceError(f"{path}: trace file not found") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not a text file ({exc.reason})") from None


def _sorted(jobs: list[TraceJob]) -> list[TraceJob]:
    # Stable: equal arrival times keep file order.
    return sorted(jobs, key=lambda j: j.arrival_s)
