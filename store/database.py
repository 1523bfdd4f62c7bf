"""Engine and unit-of-work factory. No module-level state: callers own a `Database`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError, OperationalError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.exc import StaleDataError
from sqlalchemy.pool import ConnectionPoolEntry

from store.errors import ConflictError
from store.repositories import UnitOfWork
from store.session_writes import watch_writes
from store.task_changes import TaskChanges

SQLITE_BUSY_TIMEOUT_MS = 10_000
# A pooled PostgreSQL connection that sat unused this long is pinged before it is handed
# out (see _ping_if_idle).
PING_AFTER_IDLE_S = 1.0
# PostgreSQL's deadlock_detected and serialization_failure.
_RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})


def normalize_url(url: str) -> str:
    """Accept bare paths and plain `postgresql://` URLs; return a SQLAlchemy URL."""
    if "://" not in url:
        return f"sqlite:///{url}"
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def make_engine(
    url: str, *, echo: bool = False, idle_in_transaction_timeout_s: float | None = None
) -> Engine:
    """An engine with the pragmas Hadar relies on (WAL, foreign keys, busy timeout on SQLite).

    `idle_in_transaction_timeout_s` (PostgreSQL only): the server ends a session of this
    engine that has sat that long inside a transaction without sending a statement, and
    with it the transaction and its locks. Only the idle time between statements counts,
    never a statement's own run time."""
    sa_url = make_url(normalize_url(url))
    kwargs: dict[str, Any] = {"echo": echo, "future": True}
    if sa_url.get_backend_name() == "sqlite":
        kwargs["connect_args"] = {
            "check_same_thread": False,
            "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000,
        }
        engine = create_engine(sa_url, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    kwargs["pool_size"] = 10
    kwargs["max_overflow"] = 20
    engine = create_engine(sa_url, **kwargs)
    _ping_if_idle(engine)
    if idle_in_transaction_timeout_s is not None and sa_url.get_backend_name() == "postgresql":
        milliseconds = max(1, round(idle_in_transaction_timeout_s * 1000))
        # On connect rather than in the URL's `options`: those may already carry a
        # search_path, which connect arguments would replace.
        event.listen(
            engine,
            "connect",
            lambda dbapi_connection, _record: _postgres_session_setting(
                dbapi_connection, "idle_in_transaction_session_timeout", milliseconds
            ),
            # Before the dialect's own first queries, which would open a transaction.
            insert=True,
        )
    return engine


def _ping_if_idle(engine: Engine) -> None:
    """Ping a pooled connection before handing it out only when it sat unused for
    `PING_AFTER_IDLE_S` or longer, and replace it when the ping fails (a connection just
    opened is handed out without one).

    Pinging on every checkout (the pool's `pre_ping`) cost every transaction one more round
    trip to the server, about a seventh of a submission's. A connection the server ended
    (a restart, a network cut) is found out the same way after an idle spell; one ended
    within the last second fails its next statement instead, which invalidates the whole
    pool, so each of the master's threads sees at most one such error, as with a server
    that goes away in the middle of a transaction."""

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        record.info["checked_in"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
        since = record.info.get("checked_in")
        if since is None or time.monotonic() - since < PING_AFTER_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            # The pool discards the connection and hands out another (a new one).
            raise DisconnectionError(f"pooled connection failed its ping: {exc}") from exc


def _postgres_session_setting(dbapi_connection: Any, name: str, value: int) -> None:
    autocommit = dbapi_connection.autocommit
    # Outside a transaction: a SET inside one would be undone by the pool's first rollback.
    dbapi_connection.autocommit = True
    try:
        with dbapi_connection.cursor() as cursor:
            cursor.execute(f"SET {name} = {int(value)}")
    finally:
        dbapi_connection.autocommit = autocommit


def _sqlite_pragmas(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        # WAL with NORMAL is durable across process crashes; only an OS crash may lose the
        # last transactions, which the workers' re-registration reconciles.
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


class Database:
    """Owns an engine and hands out one session per unit of work."""

    def __init__(
        self,
        url: str,
        *,
        echo: bool = False,
        idle_in_transaction_timeout_s: float | None = None,
    ) -> None:
        self.url = normalize_url(url)
        self.engine = make_engine(
            self.url, echo=echo, idle_in_transaction_timeout_s=idle_in_transaction_timeout_s
        )
        self._sessions = sessionmaker(self.engine, expire_on_commit=False, autoflush=True)
        watch_writes(self._sessions)
        # Moves whenever a transaction of this database changed where tasks run.
        self.task_changes = TaskChanges()
        self.task_changes.watch(self._sessions)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def in_memory(self) -> bool:
        """Whether the database exists in this process only (SQLite in memory)."""
        url = make_url(self.url)
        return url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A raw session, committed on success and rolled back on error."""
        with self._sessions() as session:
            try:
                yield session
                session.commit()
            except StaleDataError as exc:
                session.rollback()
                raise ConflictError(f"concurrent update: {exc}") from exc
            except OperationalError as exc:
                session.rollback()
                # A SQLite writer that waited past the busy timeout: another unit of work
                # holds the database; the caller may retry like any other conflict.
                if "database is locked" in str(exc):
                    raise ConflictError("database is busy") from exc
                # PostgreSQL ended this transaction to break a deadlock with another, or
                # could not serialize it: nothing of it was stored, and it may be retried.
                if getattr(exc.orig, "sqlstate", None) in _RETRYABLE_SQLSTATES:
                    raise ConflictError(f"transaction ended by the server: {exc.orig}") from exc
                raise
            except BaseException:
                session.rollback()
                raise

    @contextmanager
    def transaction(self) -> Iterator[UnitOfWork]:
        """One unit of work: every repository shares one transaction, committed at the end."""
        with self.session() as session:
            yield UnitOfWork(session)

    def dispose(self) -> None:
        self.engine.dispose()
