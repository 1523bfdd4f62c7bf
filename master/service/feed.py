"""Job events as WatchJobs streams them, read from the store once for every watcher.

Each open watch used to read the store on every change: twenty watchers and a hundred
submissions a second made two thousand reads a second of the same rows. The feed reads each
new event, and the job it concerns, once; watchers take what follows their cursor from the
feed's window of recent events and only a watcher left further behind than the window reads
the store itself. The store stays the record: the feed is rebuilt from it as it goes, so a
restart loses nothing a watcher could miss.

Reads are spaced at least `spacing` apart (50 ms by default): under a steady stream of
changes (a hundred submissions a second) every watcher's wake-up would otherwise read the
store again for the one or two events since the last read. A change that arrives within
the spacing waits out the rest of it and is read with whatever else came meanwhile, so an
event reaches its watchers at most that much later and the feed reads at most twenty times
a second however many watchers there are. For the same reason a watcher wakes at most once
per spacing (WatchJobs): more often it would find nothing new, and twenty watchers woken by
every one of a hundred submissions a second cost the master a few percent of a core.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from master.process.events import ChangeSignal
from master.process.transactions import Transactor
from master.service.codec import event_to_pb, job_to_pb
from protos.hadar.v1 import common_pb2
from store import UnitOfWork
from store.states import JobState

# Events kept for watchers that fall behind; older ones are read from the store.
WINDOW = 20_000
READ_BATCH = 1000
SPACING_S = 0.05


@dataclass(frozen=True, slots=True)
class FeedEntry:
    event_id: int
    user: str
    # The whole job, as its readers see it, when the event was read.
    job: common_pb2.Job
    event: common_pb2.JobEvent


class EventFeed:
    def __init__(
        self,
        tx: Transactor,
        changes: ChangeSignal,
        *,
        window: int = WINDOW,
        spacing: float = SPACING_S,
    ) -> None:
        self._tx = tx
        self._changes = changes
        self._window = window
        # Seconds between two reads of the store, at least (watchers wake no more often).
        self.spacing = spacing
        # When the store was last read for new events (monotonic seconds).
        self._read_at = float("-inf")
        self._lock = threading.Lock()
        self._ids: list[int] = []
        self._entries: list[FeedEntry] = []
        # The feed holds every event after `_start` up to `_last` (None: not started).
        self._start: int | None = None
        self._last = 0
        self._generation: int | None = None

    def cursor(self) -> int:
        """The newest event id: a watch that starts now sees what comes after it."""
        with self._lock:
            self._refresh()
            return self._last

    def after(self, cursor: int) -> list[FeedEntry] | None:
        """The events after `cursor`, oldest first; None when `cursor` is older than the
        window (the caller reads the store itself)."""
        with self._lock:
            self._refresh()
            assert self._start is not None
            if cursor < self._start:
                return None
            return self._entries[bisect.bisect_right(self._ids, cursor) :]

    def _refresh(self) -> None:
        # Read before the store: a change committed after this is seen on the next call.
        generation = self._changes.generation
        if generation == self._generation:
            return
        if self._start is None:
            last = self._tx.read(lambda uow: uow.jobs.last_event_id())
            self._start = self._last = last
        else:
            # The lock is held meanwhile: the other watchers wait for this read rather
            # than make their own.
            pause = self._read_at + self.spacing - time.monotonic()
            if pause > 0:
                time.sleep(pause)
                generation = self._changes.generation
            while True:
                read = self._tx.read(_read_after(self._last))
                self._append(read)
                if len(read) < READ_BATCH:
                    break
            self._read_at = time.monotonic()
        self._generation = generation

    def _append(self, entries: list[FeedEntry]) -> None:
        if not entries:
            return
        self._entries.extend(entries)
        self._ids.extend(e.event_id for e in entries)
        self._last = entries[-1].event_id
        excess = len(self._entries) - self._window
        if excess > 0:
            self._start = self._ids[excess - 1]
            del self._entries[:excess]
            del self._ids[:excess]


def _read_after(after: int) -> Callable[[UnitOfWork], list[FeedEntry]]:
    def read(uow: UnitOfWork) -> list[FeedEntry]:
        events = uow.jobs.events_after(after, limit=READ_BATCH)
        jobs = uow.jobs.read_many({e.job_id for e in events})
        running = uow.tasks.active_for_jobs(
            [job_id for job_id, job in jobs.items() if job.state is JobState.RUNNING]
        )
        shown = {job_id: job_to_pb(job, running.get(job_id, [])) for job_id, job in jobs.items()}
        return [
            FeedEntry(e.id, jobs[e.job_id].user, shown[e.job_id], event_to_pb(e))
            for e in events
            if e.job_id in jobs
        ]

    return read
