"""Why each waiting job waits, as the last round found: kept in the active master's memory
and shown in place of the stored reason, not written to the store.

Every round gives every waiting job a reason, and at a long queue nearly all of them change
every round: each job behind the head of a FIFO queue names the head, which moves as jobs
start. Writing them took most of a round's store phase (5,000 reasons: 0.1-0.3 s, in
transactions that every submission and progress report waits behind on SQLite), for text
that the next round computes again and that only people read. The store keeps the reasons
that state changes and holds write; a master that starts or takes over shows those until
its first round.

A round's reason for a job applies while the job is as the round read it: in a waiting
state, at the same version (every state change writes a new one) and with the same stored
reason (a hold writes its reason without a new version). Otherwise the stored reason is
the newer one and is shown.
"""

from __future__ import annotations

from collections.abc import Mapping

from store.domain import Job
from store.states import JobState

#: (the job's version, its stored reason, why it waits), as a round read and decided it.
WaitingEntry = tuple[int, str, str]

_WAITING = frozenset({JobState.PENDING, JobState.PREEMPTED})


class WaitingReasons:
    """The newest round's waiting reasons. A round replaces them whole, and a reader sees
    one round's set (one reference swapped)."""

    def __init__(self) -> None:
        self._entries: Mapping[int, WaitingEntry] = {}

    def replace(self, entries: Mapping[int, WaitingEntry]) -> None:
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    def of(self, job: Job) -> str:
        """Why `job` waits, or its stored reason where the last round's does not apply."""
        entry = self._entries.get(job.id)
        if (
            entry is None
            or entry[0] != job.version
            or entry[1] != job.reason
            or job.state not in _WAITING
        ):
            return job.reason
        return entry[2]


def waiting_entries(jobs: Mapping[int, Job], waiting: Mapping[int, str]) -> dict[int, WaitingEntry]:
    """The entries for a round that read `jobs` and left `waiting` (job id -> why) waiting;
    a running job that holds nothing (its placement being torn down) is not waiting."""
    entries: dict[int, WaitingEntry] = {}
    for job_id, reason in waiting.items():
        job = jobs.get(job_id)
        if job is not None and job.state is not JobState.RUNNING:
            entries[job_id] = (job.version, job.reason, reason)
    return entries
