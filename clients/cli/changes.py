"""Job changes as lines, for output that is not a terminal.

A live table redrawn in place suits a terminal; written to a pipe or a log file it becomes a
full table per refresh. There, a watcher prints one line per job each time its state or
placement changes instead, like a log.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from clients.cli import format as fmt
from clients.types import Job, JobState

_Key = tuple[JobState, str]


class ChangeLines:
    """Remembers each job's last state and placement and says what changed since."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[_Key, str]] = {}

    def update(self, jobs: Sequence[Job], now: datetime) -> list[str]:
        """One line per job that is new or changed since the last call, and one per job
        that is no longer among ``jobs``; oldest job first."""
        stamp = now.astimezone().strftime("%H:%M:%S")
        lines: list[str] = []
        listed: set[int] = set()
        for job in sorted(jobs, key=lambda j: j.id):
            listed.add(job.id)
            # The reason is shown but not compared: a waiting job's reason may change every
            # round (a policy's figures), which is not news.
            key = (job.state, fmt.placement(job.tasks))
            before = self._seen.get(job.id)
            if before is not None and before[0] == key:
                continue
            self._seen[job.id] = (key, job.spec.name)
            lines.append(f"{stamp} {_describe(job, before[0][0] if before else None)}")
        for job_id in sorted(set(self._seen) - listed):
            name = self._seen.pop(job_id)[1]
            lines.append(f"{stamp} job {job_id} ({name}): no longer listed")
        return lines


def _describe(job: Job, previous: JobState | None) -> str:
    state = job.state.value
    if previous is not None and previous is not job.state:
        state = f"{previous.value} -> {state}"
    where = fmt.node_or_reason(job)
    # A command's iterations (none, or the scheduler's estimate) say nothing of its progress.
    progress = fmt.job_progress(job)
    text = f"job {job.id} ({job.spec.name}): {state}"
    if where and where != "-":
        text += f" {where}"
    return f"{text}, {progress}"
