"""Which master is active: one lease row in the database, with a fencing epoch.

A master is active while it holds an unexpired lease in ``master_lease``. Taking the lease
is a compare-and-set on the epoch it read, so of two masters that find the lease expired
only one wins, and the winner's epoch is one more than any before it. The new epoch is
committed before :meth:`MasterLeases.acquire` returns: nothing a new master does can carry
an epoch the database does not already hold.

Times are the database's own clock on PostgreSQL (masters on different machines compare
against one clock); on SQLite every master runs on the database's host, whose clock it is.

On PostgreSQL every write of the active master share-locks the lease row (see
:func:`check_term`), and a takeover's update must wait for those locks. The lease
statements therefore take a lock timeout: a master frozen inside a transaction holds its
locks until the server ends that transaction, and a standby must not sit in a queue behind
it meanwhile, but try again (and say why it waits) on its next attempt.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select, text, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from store.database import Database
from store.errors import ConflictError, StoreError
from store.models import MasterLeaseRow

LEASE_ROW = 1
# PostgreSQL's SQLSTATE for "lock_not_available": a lock timeout or NOWAIT.
_LOCK_NOT_AVAILABLE = "55P03"


class LeaseLostError(StoreError):
    """This master no longer holds the lease it acts under: another master took it, or it
    expired. Whatever the caller was about to commit must not be."""


class LeaseRowBusyError(StoreError):
    """Another transaction held the lease row locked for longer than the lock timeout: a
    master's write still in progress (or left open by a master that froze inside it), or
    another standby's takeover. Nothing was changed; try again later."""


@dataclass(frozen=True, slots=True)
class MasterTerm:
    """One master's hold on the lease: who, reachable where, under which epoch, until when."""

    holder: str
    address: str
    epoch: int
    acquired_at: datetime
    expires_at: datetime


def _term(row: MasterLeaseRow) -> MasterTerm:
    return MasterTerm(
        holder=row.holder,
        address=row.address,
        epoch=row.epoch,
        acquired_at=row.acquired_at,
        expires_at=row.expires_at,
    )


def _limit_lock_wait(session: Session, seconds: float | None) -> None:
    """Bound how long the rest of this transaction waits for any one lock (PostgreSQL; a
    SQLite writer already waits at most its busy timeout)."""
    if seconds is None or session.get_bind().dialect.name != "postgresql":
        return
    # 0 would mean "wait for ever".
    milliseconds = max(1, round(seconds * 1000))
    session.execute(text(f"SET LOCAL lock_timeout = {milliseconds}"))


@contextmanager
def _busy_as_error(lock_timeout_s: float | None) -> Iterator[None]:
    """A lock timeout inside becomes LeaseRowBusyError."""
    try:
        yield
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) == _LOCK_NOT_AVAILABLE:
            raise LeaseRowBusyError(
                f"the lease row stayed locked by another transaction for {lock_timeout_s:g} s"
            ) from exc
        raise


def database_now(session: Session) -> datetime:
    """The time by which leases are judged (see the module's docstring)."""
    if session.get_bind().dialect.name == "postgresql":
        value = session.execute(text("SELECT clock_timestamp()")).scalar_one()
        assert isinstance(value, datetime)
        return value.astimezone(UTC)
    return datetime.now(UTC)


class MasterLeases:
    """Reads, takes, renews and releases the master lease; each call is its own transaction."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def current(self) -> MasterTerm | None:
        """The lease as stored now; None when it has never been held."""
        with self._database.session() as session:
            row = session.get(MasterLeaseRow, LEASE_ROW)
            if row is None or not row.holder:
                return None
            return _term(row)

    def expired(self, term: MasterTerm) -> bool:
        with self._database.session() as session:
            return term.expires_at <= database_now(session)

    def acquire(
        self,
        holder: str,
        address: str,
        lease_s: float,
        *,
        force: bool = False,
        lock_timeout_s: float | None = None,
    ) -> MasterTerm | None:
        """Take the lease if it has expired (or unconditionally with `force`, for a caller
        that knows the previous holder is gone); returns the new term, whose epoch is
        committed, or None when another master holds the lease or won the race for it.
        Raises LeaseRowBusyError when the row stayed locked for `lock_timeout_s`."""
        try:
            with _busy_as_error(lock_timeout_s), self._database.session() as session:
                _limit_lock_wait(session, lock_timeout_s)
                # FOR UPDATE waits for the active master's writes under way, which hold the
                # row FOR KEY SHARE (check_term): none of them commits after a takeover.
                row = session.get(MasterLeaseRow, LEASE_ROW, with_for_update=True)
                if row is None:
                    raise StoreError("the master_lease row is missing; run hadar-master db upgrade")
                now = database_now(session)
                if not force and row.holder and row.expires_at > now:
                    return None
                seen = row.epoch
                term = MasterTerm(
                    holder=holder,
                    address=address,
                    epoch=seen + 1,
                    acquired_at=now,
                    expires_at=now + timedelta(seconds=lease_s),
                )
                result = session.execute(
                    update(MasterLeaseRow)
                    .where(MasterLeaseRow.id == LEASE_ROW, MasterLeaseRow.epoch == seen)
                    .values(
                        holder=holder,
                        address=address,
                        epoch=term.epoch,
                        acquired_at=term.acquired_at,
                        expires_at=term.expires_at,
                    )
                    .execution_options(synchronize_session=False)
                )
                assert isinstance(result, CursorResult)
                if result.rowcount != 1:
                    session.rollback()
                    return None
        except ConflictError:
            # SQLite: another writer committed between our read and our write.
            return None
        return term

    def renew(
        self, holder: str, epoch: int, lease_s: float, *, lock_timeout_s: float | None = None
    ) -> datetime | None:
        """Extend the lease of `holder`'s term `epoch`; returns the new expiry, or None when
        that term is over (another master holds a later one). Raises LeaseRowBusyError
        when the row stayed locked for `lock_timeout_s`."""
        with _busy_as_error(lock_timeout_s), self._database.session() as session:
            _limit_lock_wait(session, lock_timeout_s)
            expires = database_now(session) + timedelta(seconds=lease_s)
            result = session.execute(
                update(MasterLeaseRow)
                .where(
                    MasterLeaseRow.id == LEASE_ROW,
                    MasterLeaseRow.holder == holder,
                    MasterLeaseRow.epoch == epoch,
                )
                .values(expires_at=expires)
                .execution_options(synchronize_session=False)
            )
            assert isinstance(result, CursorResult)
            return expires if result.rowcount == 1 else None

    def release(self, holder: str, epoch: int, *, lock_timeout_s: float | None = None) -> bool:
        """End the term now (a graceful stop), so a standby need not wait for it to expire.
        The epoch stays: the next holder's is still one more. Raises LeaseRowBusyError when
        the row stayed locked for `lock_timeout_s`."""
        with _busy_as_error(lock_timeout_s), self._database.session() as session:
            _limit_lock_wait(session, lock_timeout_s)
            result = session.execute(
                update(MasterLeaseRow)
                .where(
                    MasterLeaseRow.id == LEASE_ROW,
                    MasterLeaseRow.holder == holder,
                    MasterLeaseRow.epoch == epoch,
                )
                .values(expires_at=database_now(session))
                .execution_options(synchronize_session=False)
            )
            assert isinstance(result, CursorResult)
            return result.rowcount == 1


# Built once: every write transaction runs one (see check_term).
_TERM = select(MasterLeaseRow.holder, MasterLeaseRow.epoch).where(MasterLeaseRow.id == LEASE_ROW)
_TERM_LOCKED = _TERM.with_for_update(read=True, key_share=True)


def check_term(session: Session, holder: str, epoch: int) -> None:
    """Inside another unit of work: raise LeaseLostError unless `holder` still holds term
    `epoch`. On PostgreSQL the row is locked FOR KEY SHARE until that unit of work ends, so
    no takeover (which takes the row FOR UPDATE) can commit between this check and its
    commit. The weakest such lock: the holder's renewals (a plain UPDATE of the expiry)
    need not wait for its own writes, so a steady stream of them can never starve the
    renewal and cost the master its term."""
    postgresql = session.get_bind().dialect.name == "postgresql"
    # Through the session's connection: the ORM's execution path costs several times this
    # one-row read, which every write transaction makes.
    found = session.connection().execute(_TERM_LOCKED if postgresql else _TERM).one_or_none()
    if found is None or (found.holder, found.epoch) != (holder, epoch):
        current = f"epoch {found.epoch} held by {found.holder}" if found else "no lease"
        raise LeaseLostError(f"this master's term (epoch {epoch}) is over; now {current}")
