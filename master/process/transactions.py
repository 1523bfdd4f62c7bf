"""Units of work for the master: one transaction each, serialized for job changes, retried
on optimistic-locking conflicts."""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import structlog
from sqlalchemy.orm import Session

from store import ConflictError, Database, UnitOfWork

T = TypeVar("T")
log = structlog.get_logger(__name__)


class Transactor:
    """Runs functions of a UnitOfWork in a transaction.

    Changes to jobs and tasks take one process-wide lock: within one master they never race,
    so conflicts come only from outside (another process editing the database), and those
    are retried with a short random backoff.
    """

    def __init__(self, database: Database, attempts: int = 5) -> None:
        self.database = database
        self.attempts = attempts
        # Run first inside every write; raises when this master may not write (a standby,
        # or an active master whose term is over). None: no election (tools, tests).
        self.guard: Callable[[Session], None] | None = None
        self.job_lock = threading.RLock()
        # SQLite has one writer at a time, and a writer that finds the database locked
        # sleeps in growing steps (up to 100 ms) before it tries again. Queueing writers on
        # a lock here hands the database over the moment the previous writer commits.
        self._write_lock: threading.Lock | contextlib.nullcontext[None] = (
            threading.Lock() if database.dialect == "sqlite" else contextlib.nullcontext()
        )

    @property
    def write_lock(self) -> threading.Lock | contextlib.nullcontext[None]:
        """Held by every writer of this process on SQLite (see __init__); writers outside
        the units of work here (the master lease) take it too."""
        return self._write_lock

    def read(self, fn: Callable[[UnitOfWork], T]) -> T:
        """A read-only unit of work (still a transaction, for a consistent view)."""
        with self.database.transaction() as uow:
            return fn(uow)

    def write(self, fn: Callable[[UnitOfWork], T], *, jobs: bool = True) -> T:
        """A unit of work that changes state; `jobs=False` for changes that touch no job or
        task (nodes' heartbeats, tokens, throughputs) and need not take the job lock."""
        for attempt in range(1, self.attempts + 1):
            try:
                if jobs:
                    with self.job_lock, self._write_lock, self.database.transaction() as uow:
                        return self._guarded(fn, uow)
                with self._write_lock, self.database.transaction() as uow:
                    return self._guarded(fn, uow)
            except ConflictError as exc:
                if attempt == self.attempts:
                    raise
                log.info("retrying after a conflict", attempt=attempt, error=str(exc))
                time.sleep(random.uniform(0.005, 0.05) * attempt)
        raise AssertionError("unreachable")

    def _guarded(self, fn: Callable[[UnitOfWork], T], uow: UnitOfWork) -> T:
        if self.guard is not None:
            self.guard(uow.session)
        return fn(uow)
