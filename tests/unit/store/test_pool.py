"""PostgreSQL's connections: a pooled one is pinged before use only after an idle spell,
one the server ended meanwhile is replaced without the caller seeing it, and a
transaction the server ends to break a deadlock is a conflict to retry."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from store import ConflictError, Database
from store import database as database_module
from store.testing import POSTGRES_ENV, backends, temporary_database_url

pytestmark = pytest.mark.skipif(
    "postgresql" not in backends(), reason=f"needs {POSTGRES_ENV} (a server that ends sessions)"
)


@pytest.fixture
def postgres(tmp_path: Path) -> Iterator[tuple[Database, list[Any]]]:
    """A database and the connections its pool pinged."""
    with temporary_database_url("postgresql", tmp_path) as url:
        db = Database(url)
        pinged: list[Any] = []
        ping = db.engine.dialect.do_ping

        def counted(dbapi_connection: Any) -> bool:
            pinged.append(dbapi_connection)
            return bool(ping(dbapi_connection))

        db.engine.dialect.do_ping = counted  # type: ignore[method-assign]
        try:
            yield db, pinged
        finally:
            db.dispose()


def backend_pid(db: Database) -> int:
    with db.session() as session:
        return int(session.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_a_connection_in_steady_use_is_not_pinged_and_an_idle_one_is(
    postgres: tuple[Database, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Transactions back to back reuse the connection without a ping; after the idle
    spell, the next checkout pings it once."""
    db, pinged = postgres
    first = backend_pid(db)
    assert [backend_pid(db) for _ in range(5)] == [first] * 5
    assert pinged == []
    monkeypatch.setattr(database_module, "PING_AFTER_IDLE_S", 0.0)
    assert backend_pid(db) == first
    assert len(pinged) == 1


def test_a_pooled_connection_the_server_ended_is_replaced_unseen(
    postgres: tuple[Database, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection the server ended while it sat in the pool fails its ping at the next
    checkout and a new one serves the transaction, which succeeds."""
    db, pinged = postgres
    ended = backend_pid(db)
    admin = create_engine(db.engine.url)
    try:
        with admin.connect() as connection:
            connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": ended})
            deadline = time.monotonic() + 10
            while connection.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": ended}
            ).scalar_one():
                assert time.monotonic() < deadline, "the server did not end the session"
                time.sleep(0.05)
    finally:
        admin.dispose()
    monkeypatch.setattr(database_module, "PING_AFTER_IDLE_S", 0.0)
    assert backend_pid(db) != ended
    assert len(pinged) == 1


def test_a_transaction_ended_to_break_a_deadlock_is_a_conflict_to_retry(
    postgres: tuple[Database, list[Any]],
) -> None:
    """Two transactions that each wait for a row the other holds: PostgreSQL ends one of
    them, which its caller gets as a ConflictError (retried like any other conflict), and
    the other commits."""
    db, _ = postgres
    with db.session() as session:
        session.execute(text("CREATE TABLE pair (id int PRIMARY KEY, n int)"))
        session.execute(text("INSERT INTO pair VALUES (1, 0), (2, 0)"))
    both_hold = threading.Barrier(2, timeout=10)
    outcomes: dict[int, BaseException | None] = {}

    def update(first: int, second: int) -> None:
        try:
            with db.session() as session:
                session.execute(text("UPDATE pair SET n = n + 1 WHERE id = :id"), {"id": first})
                both_hold.wait()
                session.execute(text("UPDATE pair SET n = n + 1 WHERE id = :id"), {"id": second})
            outcomes[first] = None
        except BaseException as exc:
            outcomes[first] = exc

    threads = [threading.Thread(target=update, args=pair) for pair in ((1, 2), (2, 1))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == [1, 2]
    errors = [e for e in outcomes.values() if e is not None]
    assert len(errors) == 1 and isinstance(errors[0], ConflictError), outcomes
    with db.session() as session:
        counts = session.execute(text("SELECT n FROM pair ORDER BY id")).scalars().all()
    assert counts == [1, 1]
