"""Waiting for the database at start: a bounded retry, then one line that names the cause.

A master started by systemd while PostgreSQL is still coming up (a reboot, a failover of
the database server) should wait a little rather than crash with a driver's traceback.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError

from store.database import Database


class DatabaseUnreachableError(RuntimeError):
    """The database could not be reached within the allowed time; the message says why."""


def describe_url(url: str) -> str:
    """The URL with its password hidden, fit for logs."""
    return make_url(url).render_as_string(hide_password=True)


def cause_of(exc: Exception) -> str:
    """The driver's first line, without SQLAlchemy's wrapping and documentation link."""
    original = getattr(exc, "orig", None) or exc
    lines = [line.strip() for line in str(original).splitlines() if line.strip()]
    return lines[0] if lines else type(original).__name__


def wait_for_database(
    database: Database,
    wait_s: float,
    *,
    on_retry: Callable[[str, float], None] = lambda _cause, _delay: None,
    sleep: Callable[[float], object] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Connect once, retrying with exponential backoff (0.5 s doubling, at most 10 s) for up
    to ``wait_s`` seconds. A SQLite file that cannot be opened is not retried: waiting
    would not create its directory. Raises DatabaseUnreachableError naming the URL (password
    hidden) and the driver's reason. ``sleep`` returning True (an ``Event.wait`` that was
    set: a stop signal) ends the wait at once with the same error."""
    deadline = clock() + max(0.0, wait_s)
    delay = 0.5
    while True:
        try:
            with database.engine.connect():
                return
        except (OperationalError, DBAPIError) as exc:
            cause = cause_of(exc)
            remaining = deadline - clock()
            if database.dialect == "sqlite" or remaining <= 0:
                waited = "" if database.dialect == "sqlite" else f" (tried for {wait_s:g} s)"
                raise DatabaseUnreachableError(
                    f"cannot reach the database {describe_url(str(database.url))}{waited}: {cause}"
                ) from None
            pause = min(delay, remaining)
            on_retry(cause, pause)
            if sleep(pause) is True:
                raise DatabaseUnreachableError(
                    f"stopped while waiting for the database {describe_url(str(database.url))}: "
                    f"{cause}"
                ) from None
            delay = min(delay * 2, 10.0)
