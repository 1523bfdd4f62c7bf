"""Job events as WatchJobs streams them, read from the store once for every watcher.

Each open watch used to read the store on every change: twenty watchers and a hundred
submissions a second made two thousand reads a second of the same rows. The feed reads each
new event, and the job it concerns, once; watchers take what follows their cursor from the
feed's window of recent events, and a watcher left further behind than the window starts
again from a fresh look at its jobs, as a client does after a reconnect. The store stays
the record: the feed is rebuilt from it as it goes, so a restart loses nothing a watcher
could miss.

Events are numbered by the store as they are written, not as their transactions commit. On
PostgreSQL, where writers run side by side, a transaction that wrote an event can commit
after another that wrote a later one: a read in between sees the later event and not the
earlier one, and reading on from the highest id seen would never see it. So the feed keeps
its own order, the order it read events in (a watcher's cursor is a position in it, not an
event id), and remembers the ids it has not seen below the highest one: each read asks for
them again along with the new ones, and one that turns up is handed on then. An id that
never turns up belonged to a transaction that rolled back; it is let go after
:data:`GAP_HOLD_S`, longer than any of the master's transactions can stay open (the server
ends one idle for about the leader's lease). The events of one job still come in their
order: two transactions that change a job wait for each other on its row.

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

# Events kept for watchers that fall behind; one further behind starts again from its jobs.
WINDOW = 20_000
READ_BATCH = 1000
SPACING_S = 0.05
# How long an event id not seen below the highest one is asked for again (see above).
GAP_HOLD_S = 120.0
# The most ids not seen that one read remembers below a new highest one (more than any
# open transaction holds: a large array's submission).
GAP_SPAN = 10_000
# Ids below the highest one at the feed's start that it asks for, should they turn up: the
# transactions open then hold the latest ids; holes further down are long rolled back.
START_SPAN = 1_000


@dataclass(frozen=True, slots=True)
class FeedEntry:
    # The entry's place in the feed's order (a watcher's cursor): 1, 2, 3...
    position: int
    event_id: int
    user: str
    # The whole job, as its readers see it, when the event was read.
    job: common_pb2.Job
    event: common_pb2.JobEvent


# An event as read, before the feed gives it a position: (event id, user, job, event);
# None for an event whose job the read did not find, which no watcher is shown.
_Read = tuple[int, tuple[str, common_pb2.Job, common_pb2.JobEvent] | None]


class EventFeed:
    def __init__(
        self,
        tx: Transactor,
        changes: ChangeSignal,
        *,
        window: int | None = None,
        spacing: float = SPACING_S,
        gap_hold_s: float = GAP_HOLD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._tx = tx
        self._changes = changes
        self._window = WINDOW if window is None else window
        # Seconds between two reads of the store, at least (watchers wake no more often).
        self.spacing = spacing
        self._gap_hold_s = gap_hold_s
        self._clock = clock
        # When the store was last read for new events (monotonic seconds).
        self._read_at = float("-inf")
        self._lock = threading.Lock()
        self._entries: list[FeedEntry] = []
        # The position of the first entry kept, and the next one to give.
        self._first = 1
        self._next = 1
        self._started = False
        # The highest event id read, and the ids below it not seen yet, with when each was
        # first missed (in that order: the oldest come first).
        self._last_id = 0
        self._gaps: dict[int, float] = {}
        self._generation: int | None = None

    def cursor(self) -> int:
        """The newest position: a watch that starts now sees what comes after it."""
        with self._lock:
            self._refresh()
            return self._next - 1

    def after(self, cursor: int) -> list[FeedEntry] | None:
        """The entries after position `cursor`, in the feed's order; None when some of
        them have left the window (the caller starts again from its jobs)."""
        with self._lock:
            self._refresh()
            if cursor < self._first - 1:
                return None
            return self._entries[cursor - self._first + 1 :]

    @property
    def missing(self) -> int:
        """Event ids below the highest read that have not been seen (yet)."""
        with self._lock:
            return len(self._gaps)

    def _refresh(self) -> None:
        # Read before the store: a change committed after this is seen on the next call.
        generation = self._changes.generation
        if generation == self._generation:
            return
        if not self._started:
            self._start()
        else:
            # The lock is held meanwhile: the other watchers wait for this read rather
            # than make their own.
            pause = self._read_at + self.spacing - self._clock()
            if pause > 0:
                time.sleep(pause)
                generation = self._changes.generation
            while True:
                read = self._tx.read(_read_after(self._last_id, tuple(self._gaps)))
                self._take(read)
                if len(read) < READ_BATCH:
                    break
            self._read_at = self._clock()
            self._forget_old_gaps()
        self._generation = generation

    def _start(self) -> None:
        """The highest event id now, and the ids below it (within `START_SPAN`) not visible
        yet: events from before the start go to no watcher, unless they turn up later."""

        def read(uow: UnitOfWork) -> tuple[int, list[int]]:
            last = uow.jobs.last_event_id()
            return last, uow.jobs.event_ids_after(max(0, last - START_SPAN))

        last, ids = self._tx.read(read)
        now = self._clock()
        expected = max(0, last - START_SPAN) + 1
        for event_id in ids:
            for missing in range(expected, event_id):
                self._gaps[missing] = now
            expected = event_id + 1
        self._last_id = max(last, expected - 1)
        self._started = True

    def _take(self, read: list[_Read]) -> None:
        if not read:
            return
        now = self._clock()
        gaps, last = self._gaps, self._last_id
        position = self._next
        entries = self._entries
        for event_id, shown in read:
            if event_id > last:
                # A jump past ids not seen: each may still commit (or never will).
                for missing in range(max(last + 1, event_id - GAP_SPAN), event_id):
                    gaps[missing] = now
                last = event_id
            else:
                gaps.pop(event_id, None)
            if shown is not None:
                entries.append(FeedEntry(position, event_id, *shown))
                position += 1
        self._last_id, self._next = last, position
        excess = len(entries) - self._window
        if excess > 0:
            del entries[:excess]
            self._first += excess

    def _forget_old_gaps(self) -> None:
        cutoff = self._clock() - self._gap_hold_s
        old = []
        for event_id, since in self._gaps.items():
            if since > cutoff:
                break
            old.append(event_id)
        for event_id in old:
            del self._gaps[event_id]


def _read_after(after: int, also: tuple[int, ...]) -> Callable[[UnitOfWork], list[_Read]]:
    def read(uow: UnitOfWork) -> list[_Read]:
        events = uow.jobs.events_after(after, also=also, limit=READ_BATCH)
        jobs = uow.jobs.read_many({e.job_id for e in events})
        running = uow.tasks.active_for_jobs(
            [job_id for job_id, job in jobs.items() if job.state is JobState.RUNNING]
        )
        shown = {job_id: job_to_pb(job, running.get(job_id, [])) for job_id, job in jobs.items()}
        return [
            (
                e.id,
                (jobs[e.job_id].user, shown[e.job_id], event_to_pb(e))
                if e.job_id in jobs
                else None,
            )
            for e in events
        ]

    return read
