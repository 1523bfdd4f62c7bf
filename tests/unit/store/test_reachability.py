"""Waiting for the database at start: bounded backoff, then one line naming the cause."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from store import Database
from store.reachability import DatabaseUnreachableError, describe_url, wait_for_database

# Nothing listens on port 1: connections are refused at once.
UNREACHABLE = "postgresql+psycopg://hadar:s3cret@127.0.0.1:1/hadar"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_an_unreachable_server_is_retried_with_backoff_then_named():
    """Retries double from 0.5 s up to 10 s within the allowed time; the final error names
    the URL without its password and the driver's reason, in one line."""
    clock = FakeClock()
    retries: list[str] = []
    database = Database(UNREACHABLE)
    try:
        with pytest.raises(DatabaseUnreachableError) as raised:
            wait_for_database(
                database,
                30.0,
                sleep=clock.sleep,
                clock=lambda: clock.now,
                on_retry=lambda cause, _delay: retries.append(cause),
            )
    finally:
        database.dispose()
    assert clock.sleeps == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 4.5]
    assert len(retries) == len(clock.sleeps)
    message = str(raised.value)
    assert "\n" not in message
    assert "s3cret" not in message
    assert message.startswith(
        "cannot reach the database postgresql+psycopg://hadar:***@127.0.0.1:1/hadar "
        "(tried for 30 s): "
    )
    assert "refused" in message.lower()


def test_a_sqlite_file_that_cannot_be_opened_fails_at_once(tmp_path: Path):
    """Waiting would not create a missing directory: no retry, the path and reason named."""
    clock = FakeClock()
    database = Database(str(tmp_path / "missing" / "hadar.db"))
    try:
        with pytest.raises(DatabaseUnreachableError, match="unable to open database file"):
            wait_for_database(database, 60.0, sleep=clock.sleep, clock=lambda: clock.now)
    finally:
        database.dispose()
    assert clock.sleeps == []


def test_a_stop_signal_ends_the_wait():
    """A sleep that reports a stop (an Event that was set) ends the wait with the cause."""
    stop = threading.Event()
    stop.set()
    database = Database(UNREACHABLE)
    try:
        with pytest.raises(DatabaseUnreachableError, match=r"^stopped while waiting"):
            wait_for_database(database, 60.0, sleep=stop.wait)
    finally:
        database.dispose()


def test_a_reachable_database_returns_at_once(tmp_path: Path):
    """A database that answers is used without any wait."""
    clock = FakeClock()
    database = Database(str(tmp_path / "hadar.db"))
    try:
        wait_for_database(database, 60.0, sleep=clock.sleep, clock=lambda: clock.now)
    finally:
        database.dispose()
    assert clock.sleeps == []
    assert describe_url(UNREACHABLE) == "postgresql+psycopg://hadar:***@127.0.0.1:1/hadar"
