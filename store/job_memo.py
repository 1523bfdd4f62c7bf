"""Jobs converted from their rows, remembered with the row's version between reads.

Building a job from its row (the ORM object, five JSON columns, the domain objects) is most
of what reading a large queue costs. A job row's ``version`` goes up with every change the
ORM writes, and the repositories change a job row only through the ORM, except its
``reason`` (:meth:`store.repositories.jobs.JobRepository.set_waiting_reasons` updates it
in bulk without a new version). So a job read before, at the version the row has now, is
the job the row holds, once its reason is taken from the row: a read with a memo looks at
(id, version, reason) of every unfinished job and loads in full only the rows it has not
seen at that version (:meth:`~store.repositories.jobs.JobRepository.list_unfinished`).

Every read still asks the database which jobs exist, in which version: the memo never
answers on its own, and a job changed by another process is seen like one changed here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping

from store.domain import Job

# The memo is dropped and every row read again this often: a full read costs a fraction of
# a second at thousands of jobs, and bounds what a row changed behind the ORM's back (a
# restored backup reusing ids and versions) could leave unseen.
FULL_READ_EVERY_S = 600.0


class JobMemo:
    """Jobs by id as last read, each at its row's version. Thread-safe: the rounds and the
    dependency check may read at once."""

    def __init__(
        self,
        full_read_every_s: float = FULL_READ_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._jobs: dict[int, Job] = {}
        self._lock = threading.Lock()
        self._full_read_every_s = full_read_every_s
        self._clock = clock
        self._filled_at: float | None = None
        # Rows read in full from the store by the reads through this memo so far (for
        # tests and benchmarks).
        self.rows_loaded = 0

    def known(self) -> Mapping[int, Job]:
        """The remembered jobs, as one consistent copy; empty when it is time for a full
        read."""
        with self._lock:
            filled = self._filled_at
            if filled is None or self._clock() - filled >= self._full_read_every_s:
                self._jobs = {}
                self._filled_at = None
            return dict(self._jobs)

    def keep(self, jobs: Iterable[Job]) -> None:
        """Remember `jobs`, the unfinished jobs as just read, in place of what was
        remembered: finished jobs are forgotten."""
        with self._lock:
            self._jobs = {job.id: job for job in jobs}
            if self._filled_at is None:
                self._filled_at = self._clock()

    def add(self, jobs: Iterable[Job]) -> None:
        """Remember `jobs` too, each as just read from committed rows, beside what is
        remembered (a read of some jobs by id; finished ones go with the next `keep` or
        full read)."""
        with self._lock:
            self._jobs.update((job.id, job) for job in jobs)
            if self._filled_at is None:
                self._filled_at = self._clock()

    def count_loaded(self, rows: int) -> None:
        """Count `rows` read in full from the store by a read through this memo."""
        with self._lock:
            self.rows_loaded += rows

    def clear(self) -> None:
        """Forget everything: the next read loads every row."""
        with self._lock:
            self._jobs = {}
            self._filled_at = None
