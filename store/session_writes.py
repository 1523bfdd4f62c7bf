"""Whether a session has written anything in its transaction so far.

A session that has flushed a change (or run an UPDATE or DELETE statement) reads its own
uncommitted rows; what it reads then must not be remembered beyond the transaction
(store.job_memo), since the transaction may still roll back. The flag is set by the
listeners :func:`watch_writes` registers on a session factory and lasts until the
transaction ends.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import ORMExecuteState, Session, sessionmaker

_WROTE = "hadar.wrote"


def has_written(session: Session) -> bool:
    """Whether `session` flushed a change or ran an UPDATE or DELETE in its current
    transaction."""
    return bool(session.info.get(_WROTE)) or bool(session.new or session.dirty or session.deleted)


def mark_written(session: Session) -> None:
    """Record a write made through the session's connection (a Core statement), which
    neither the flush nor the ORM's execution events see."""
    session.info[_WROTE] = True


def flush_pending(session: Session) -> None:
    """Flush what `session` holds unflushed, if anything, before a statement run through
    its connection, so that the statement reads it as the ORM's own query would."""
    if session.new or session.dirty:
        session.flush()


def watch_writes(factory: sessionmaker[Session]) -> None:
    """Track writes of every session `factory` makes (see :func:`has_written`)."""
    event.listen(factory, "after_flush", _flushed)
    event.listen(factory, "do_orm_execute", _executed)
    event.listen(factory, "after_transaction_end", _ended)


def _flushed(session: Session, _context: Any) -> None:
    session.info[_WROTE] = True


def _executed(state: ORMExecuteState) -> None:
    if state.is_update or state.is_delete or state.is_insert:
        state.session.info[_WROTE] = True


def _ended(session: Session, transaction: Any) -> None:
    # Only the outermost transaction's end makes what was written committed or gone; a
    # savepoint's end does not.
    if transaction.parent is None:
        session.info.pop(_WROTE, None)
