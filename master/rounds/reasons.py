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

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from master.jobs.holds import WAITING_STATES
from store.domain import Job
from store.states import JobState


@dataclass(frozen=True)
class WaitingEntries:
    """A round's reasons: per waiting job, its version and stored reason as the round read
    them and why it waits. Three plain maps with shared strings rather than an object per
    job: a long queue's entries are made every round (and cross from the planning
    process), and objects per job would be tens of thousands of them for the collector."""

    versions: Mapping[int, int] = field(default_factory=dict)
    stored: Mapping[int, str] = field(default_factory=dict)
    reasons: Mapping[int, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.reasons)


class WaitingReasons:
    """The newest round's waiting reasons. A round replaces them whole, and a reader sees
    one round's set (one reference swapped)."""

    def __init__(self) -> None:
        self._entries = WaitingEntries()

    def replace(self, entries: WaitingEntries) -> None:
        self._entries = entries

    def of(self, job: Job) -> str:
        """Why `job` waits, or its stored reason where the last round's does not apply."""
        entries = self._entries
        reason = entries.reasons.get(job.id)
        if (
            reason is None
            or entries.versions.get(job.id) != job.version
            or entries.stored.get(job.id) != job.reason
            or job.state not in WAITING_STATES
        ):
            return job.reason
        return reason


def waiting_entries(jobs: Mapping[int, Job], waiting: Mapping[int, str]) -> WaitingEntries:
    """The entries for a round that read `jobs` and left `waiting` (job id -> why) waiting;
    a running job that holds nothing (its placement being torn down) is not waiting."""
    versions: dict[int, int] = {}
    stored: dict[int, str] = {}
    reasons: dict[int, str] = {}
    intern = sys.intern
    for job_id, reason in waiting.items():
        job = jobs.get(job_id)
        if job is not None and job.state is not JobState.RUNNING:
            versions[job_id] = job.version
            # Each row read gives a new string, and most are one of a few texts: shared,
            # each crosses from the planning process and is kept once.
            stored[job_id] = intern(job.reason)
            reasons[job_id] = reason
    return WaitingEntries(versions, stored, reasons)
