"""Where a task's output lives on the worker, and the files a job asks to have it copied to.

Each task (a job's presence on this node for one lease, i.e. one attempt) has a directory
``<state_dir>/tasks/job-<id>.task-<index>.lease-<lease>`` holding one file per rank and
stream: ``rank-<r>.out`` (standard output) and ``rank-<r>.err`` (standard error). Directories
of earlier agents hold ``rank-<r>.log``, both streams together; they read as standard output.

What the scheduler does to a task (stops it for a preemption, a migration, its time limit, a
cancel; starts it again after a failed attempt) is written into its first rank's standard
error as one ``hadar:`` line, as Slurm writes its own notices into a job's output, so that
`hctl logs` tells the whole story without `hctl show`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from protos.hadar.v1 import common_pb2

TASK_DIR_RE = re.compile(r"job-(\d+)\.task-(\d+)\.lease-(\d+)")
_RANK_LOG_RE = re.compile(r"rank-(\d+)\.(out|err|log)")
_STREAMS = {
    "out": common_pb2.LOG_STREAM_STDOUT,
    "err": common_pb2.LOG_STREAM_STDERR,
    "log": common_pb2.LOG_STREAM_STDOUT,
}
SCHEDULER_PREFIX = "hadar: "
# sbatch's filename patterns that mean something for a Hadar job.
_PATTERN_RE = re.compile(r"%(.)")


def stdout_log(task_dir: Path, rank: int) -> Path:
    return task_dir / f"rank-{rank}.out"


def stderr_log(task_dir: Path, rank: int) -> Path:
    return task_dir / f"rank-{rank}.err"


@dataclass(frozen=True, slots=True)
class RankLog:
    rank: int
    stream: common_pb2.LogStream
    path: Path


def rank_logs(task_dir: Path, only_rank: int | None = None) -> list[RankLog]:
    """The task's log files, by rank then stream (standard output first)."""
    found: list[RankLog] = []
    for path in task_dir.glob("rank-*.*"):
        match = _RANK_LOG_RE.fullmatch(path.name)
        if match is None:
            continue
        rank = int(match.group(1))
        if only_rank is None or rank == only_rank:
            found.append(RankLog(rank, _STREAMS[match.group(2)], path))
    return sorted(found, key=lambda log: (log.rank, log.stream, log.path.name))


def job_of(task_dir: Path) -> int | None:
    match = TASK_DIR_RE.fullmatch(task_dir.name)
    return int(match.group(1)) if match else None


def output_file(pattern: str, *, job_id: int, user: str, name: str, workdir: Path) -> Path:
    """The file a job's ``output``/``error`` pattern names: ``%j`` the job id, ``%u`` the
    user, ``%x`` the job name, ``%%`` a percent sign; relative to the workdir. The master
    refuses any other ``%`` sequence at submission."""
    values = {"j": str(job_id), "u": user, "x": name, "%": "%"}
    expanded = _PATTERN_RE.sub(lambda m: values.get(m.group(1), m.group(0)), pattern)
    return workdir / expanded


def scheduler_line(text: str) -> bytes:
    """One ``hadar:`` line: control characters (a newline in a reason) never split it."""
    clean = "".join(c if c.isprintable() else " " for c in text)
    return f"{SCHEDULER_PREFIX}{clean}\n".encode()


def append_scheduler_line(task_dir: Path, rank: int, text: str) -> None:
    """Appends a ``hadar:`` line to the rank's standard error log (created owner-only when
    the rank never wrote one). Appending never cuts a line the process writes at the same
    time: both write with O_APPEND. Raises OSError."""
    fd = os.open(
        stderr_log(task_dir, rank), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600
    )
    try:
        os.write(fd, scheduler_line(text))
    finally:
        os.close(fd)
