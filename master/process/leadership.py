"""Exactly one active master per database: election, renewal, and the fence every write and
every order to a worker passes.

A master starts as a standby. It becomes active by taking the lease in the database (see
store.leadership), which gives it a new epoch, and stays active by renewing the lease every
``leader_renew_s``. Its own deadline is measured on its own clock from *before* each
successful renewal was sent, so it always runs out no later than the lease in the database:
a master that cannot renew (its database is gone, it was frozen) stops acting before any
standby may take over. Past that deadline :meth:`Leadership.fence` refuses, so no round, no
write and no order to a worker goes out under an expired lease.

On SQLite every master also takes an exclusive lock on a file beside the database. The lock
dies with its process, so a standby on the same host takes over the moment the active
master dies, without waiting for the lease to expire.

On PostgreSQL each write of the active master share-locks the lease row until it commits
(store.leadership.check_term), so that no takeover commits in between; a takeover waits for
those locks. A master that freezes (SIGSTOP, a stalled VM) or whose host dies inside a
write would hold them, and keep every standby out, until it woke. Its sessions therefore
carry an idle-in-transaction timeout (:func:`idle_transaction_limit_s`) after which the
server ends the transaction and frees its locks; the lease statements take lock timeouts,
so that a standby tries again instead of queueing behind such a transaction.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import os
import socket
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO

import structlog
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from master.errors import UnavailableError
from store import Database
from store.leadership import (
    LeaseLostError,
    LeaseRowBusyError,
    MasterLeases,
    MasterTerm,
    check_term,
)

log = structlog.get_logger(__name__)


class Role(enum.Enum):
    STANDBY = "standby"
    ACTIVE = "active"
    # Was active and lost the lease: acts no more, waits to be stopped.
    DEPOSED = "deposed"


class NotLeaderError(UnavailableError):
    """This master is not the active one (or no longer is); it must not act."""


def uptime_clock() -> float:
    """Seconds on a clock that keeps counting while the machine is suspended (Linux's
    CLOCK_BOOTTIME; the monotonic clock elsewhere): a master whose host slept through its
    lease wakes past its deadline, as the lease in the database has."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is None:
        return time.monotonic()
    return time.clock_gettime(boottime)


def idle_transaction_limit_s(lease_s: float) -> float:
    """How long a master's PostgreSQL session may sit idle inside a transaction before the
    server ends it (idle_in_transaction_session_timeout): one lease period.

    A master frozen inside a write then holds the lease row no longer than its lease runs
    anyway, so a standby replaces it as soon as it would replace a dead master (within
    `lease_s` + `renew_s`). Nothing a working master does comes near it: the limit counts
    only the time between two statements of one transaction, never a statement's own run
    time (a migration, a large round's writes), and a write transaction that stayed open
    for a whole lease would already have cost the master its term, since its own lease
    renewal waits for the lock that transaction holds."""
    return lease_s


def new_holder_id() -> str:
    """Names this master process in the lease row: host, process and a random part (a
    restarted process is a new holder, never mistaken for its predecessor)."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


def lock_file_path(database_url: str) -> Path | None:
    """The lock file beside a SQLite database file; None for PostgreSQL or in-memory SQLite."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    database = Path(url.database)
    return database.with_name(database.name + ".master-lock")


class LockFile:
    """An exclusive, non-blocking flock(2) on one file, released when the process dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._handle is not None

    def try_lock(self, note: str) -> bool:
        """Take the lock if free; `note` (who holds it) is written into the file."""
        if self._handle is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("a+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(note + "\n")
        handle.flush()
        self._handle = handle
        return True

    def holder_note(self) -> str:
        with contextlib.suppress(OSError):
            return self.path.read_text().strip()
        return ""

    def unlock(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None


class Leadership:
    """One master's part in the election. Thread-safe."""

    def __init__(
        self,
        database: Database,
        *,
        address: str,
        lease_s: float,
        renew_s: float,
        on_lost: Callable[[str], None],
        holder: str | None = None,
        clock: Callable[[], float] = uptime_clock,
        write_lock: AbstractContextManager[object] | None = None,
    ) -> None:
        self.holder = holder or new_holder_id()
        self.address = address
        self.lease_s = lease_s
        self.renew_s = renew_s
        self._leases = MasterLeases(database)
        path = lock_file_path(database.url)
        self._lock_file = LockFile(path) if path is not None else None
        self._on_lost = on_lost
        self._clock = clock
        # SQLite: the process's writers queue on one lock (master.process.transactions); the lease's
        # writes join that queue instead of making a unit of work fail as "database is
        # locked" halfway through.
        self._write_lock: AbstractContextManager[object] = write_lock or contextlib.nullcontext()
        self._lock = threading.Lock()
        self._role = Role.STANDBY
        self._epoch = 0
        self._deadline = 0.0
        self._said_standby = ""

    # -- state -------------------------------------------------------------------------------

    @property
    def role(self) -> Role:
        with self._lock:
            return self._role

    @property
    def epoch(self) -> int:
        """The epoch of this master's term; 0 before it first led."""
        with self._lock:
            return self._epoch

    def fence(self) -> int:
        """The epoch to act under; NotLeaderError when this master must not act (a standby,
        or an active master whose deadline has passed, which is deposed here and now)."""
        with self._lock:
            if self._role is Role.ACTIVE and self._clock() < self._deadline:
                return self._epoch
            expired = self._role is Role.ACTIVE
            role, epoch = self._role, self._epoch
        if expired:
            self._lose(f"the lease of epoch {epoch} was not renewed within {self.lease_s:g} s")
        raise NotLeaderError(
            f"this master is not the active one ({'deposed' if expired else role.value})"
        )

    def acting(self) -> bool:
        """Whether this master may act now (fence() without the error)."""
        try:
            self.fence()
        except NotLeaderError:
            return False
        return True

    def guard(self, session: Session) -> None:
        """Inside a write's transaction: refuse unless this master still holds its term."""
        epoch = self.fence()
        try:
            check_term(session, self.holder, epoch)
        except LeaseLostError as exc:
            self._lose(str(exc))
            raise NotLeaderError(str(exc)) from None

    # -- election ----------------------------------------------------------------------------

    def try_lead(self) -> MasterTerm | None:
        """One attempt to become active; the new term when it succeeded."""
        with self._lock:
            if self._role is not Role.STANDBY:
                return None
        force = False
        if self._lock_file is not None:
            note = f"{self.holder} {self.address}"
            if not self._lock_file.try_lock(note):
                self._standing_by(
                    f"{self._lock_file.path} is locked by {self._lock_file.holder_note()}"
                )
                return None
            # Only a lock holder writes the lease on SQLite: the previous one has exited.
            force = True
        sent = self._clock()
        try:
            with self._write_lock:
                # One try per interval: a row still locked is a transaction of the previous
                # master that the database has not ended yet; waiting longer in its queue
                # would only hide why this standby is not active.
                term = self._leases.acquire(
                    self.holder,
                    self.address,
                    self.lease_s,
                    force=force,
                    lock_timeout_s=self.renew_s,
                )
        except LeaseRowBusyError:
            current = self._leases.current()
            who = f"{current.address} (epoch {current.epoch})" if current else "another master"
            self._standing_by(
                f"the lease of {who} has run out, but an unfinished transaction still locks "
                f"it; the database ends that transaction once it has been idle for "
                f"{idle_transaction_limit_s(self.lease_s):g} s"
            )
            return None
        if term is None:
            current = self._leases.current()
            who = f"{current.address} (epoch {current.epoch})" if current else "another master"
            self._standing_by(f"the active master is {who}")
            return None
        with self._lock:
            self._role = Role.ACTIVE
            self._epoch = term.epoch
            self._deadline = sent + self.lease_s
        log.info("became the active master", epoch=term.epoch, holder=self.holder)
        return term

    @property
    def waiting_for(self) -> str:
        """Why this standby is not active, as of its last attempt ("" before the first)."""
        with self._lock:
            return self._said_standby

    def _standing_by(self, why: str) -> None:
        with self._lock:
            if why == self._said_standby:
                return
            self._said_standby = why
        log.info("standing by", reason=why)

    def wait_to_lead(
        self, stop: threading.Event, on_standby: Callable[[str], None] | None = None
    ) -> bool:
        """Try every renew interval until this master leads (True) or `stop` is set;
        `on_standby` is told why, once, when the first attempt does not succeed."""
        first = True
        while not stop.is_set():
            try:
                if self.try_lead() is not None:
                    return True
            except Exception as exc:
                log.warning("election attempt failed", error=str(exc))
            if first and on_standby is not None:
                on_standby(self.waiting_for or "the election failed; trying again")
            first = False
            stop.wait(self.renew_s)
        return False

    def renew(self) -> None:
        """One renewal; deposes this master when its term is over or its deadline passed."""
        with self._lock:
            if self._role is not Role.ACTIVE:
                return
            epoch = self._epoch
            sent = self._clock()
            deadline = self._deadline
            late = sent >= deadline
        if late:
            # A term past its deadline is over even if nobody has taken the lease yet (this
            # process was frozen, say): a standby may already be acting on it.
            self._lose(f"the lease of epoch {epoch} was not renewed within {self.lease_s:g} s")
            return
        try:
            with self._write_lock:
                # On SQLite the master's own writers queue on the write lock before it;
                # on PostgreSQL its writes hold the row only FOR KEY SHARE, which an update
                # of the expiry does not wait for. Either way not past the term, which a
                # later success could not save. Ending by then also keeps a master frozen
                # with its renewal queued from taking the row once the database has ended
                # that master's other transactions.
                expires = self._leases.renew(
                    self.holder, epoch, self.lease_s, lock_timeout_s=deadline - sent
                )
        except Exception as exc:
            log.warning("lease renewal failed", epoch=epoch, error=str(exc))
            with self._lock:
                late = self._clock() >= self._deadline
            if late:
                self._lose(f"the lease of epoch {epoch} could not be renewed: {exc}")
            return
        if expires is None:
            self._lose(f"another master took the lease (this master's epoch was {epoch})")
            return
        with self._lock:
            if self._role is Role.ACTIVE:
                self._deadline = max(self._deadline, sent + self.lease_s)

    def run_renewals(self, stop: threading.Event) -> None:
        """Renew every renew interval until `stop` is set or the term is lost."""
        while not stop.wait(self.renew_s):
            if self.role is not Role.ACTIVE:
                return
            self.renew()

    def release(self) -> None:
        """Give the lease up (a graceful stop): a standby takes over without waiting."""
        with self._lock:
            active = self._role is Role.ACTIVE
            epoch = self._epoch
            self._role = Role.DEPOSED if active else self._role
        if active:
            try:
                with self._write_lock:
                    self._leases.release(self.holder, epoch, lock_timeout_s=self.renew_s)
            except Exception as exc:
                log.warning("could not release the master lease", error=str(exc))
        if self._lock_file is not None:
            self._lock_file.unlock()

    def step_down(self, reason: str) -> None:
        """Stop acting now: something outside the lease row (a worker that has seen a newer
        epoch) shows that another master is active."""
        self._lose(reason)

    def _lose(self, reason: str) -> None:
        with self._lock:
            if self._role is not Role.ACTIVE:
                return
            self._role = Role.DEPOSED
            epoch = self._epoch
        log.error("lost the master lease; this master stops acting", epoch=epoch, reason=reason)
        self._on_lost(reason)
