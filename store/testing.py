"""Throwaway databases for tests: a SQLite file, or a fresh PostgreSQL schema.

Tests of the store, the master and end-to-end runs use the same helper so that every
suite runs on both databases and leaves nothing behind.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from store.database import normalize_url

POSTGRES_ENV = "HADAR_TEST_POSTGRES_URL"


def backends() -> list[str]:
    """Backends to run store tests on: always sqlite, plus postgresql when configured."""
    return ["sqlite", "postgresql"] if os.environ.get(POSTGRES_ENV) else ["sqlite"]


@contextmanager
def temporary_database_url(backend: str, directory: Path) -> Iterator[str]:
    """A URL to an empty database, dropped afterwards.

    For PostgreSQL this creates a schema with a random name and points the connection's
    search_path at it, so concurrent and repeated runs never see each other's tables.
    """
    if backend == "sqlite":
        yield f"sqlite:///{directory / f'hadar-{secrets.token_hex(4)}.db'}"
        return
    if backend != "postgresql":
        raise ValueError(f"unknown backend {backend!r}")
    base = os.environ.get(POSTGRES_ENV)
    if not base:
        raise RuntimeError(f"{POSTGRES_ENV} is not set")
    with fresh_postgres_schema(base) as url:
        yield url


@contextmanager
def fresh_postgres_schema(base_url: str) -> Iterator[str]:
    """A URL whose connections use a new, empty schema of `base_url`'s database; the schema
    is dropped afterwards."""
    base = normalize_url(base_url)
    schema = f"hadar_test_{secrets.token_hex(6)}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE SCHEMA "{schema}"'))
        url = make_url(base)
        options = quote(f"-csearch_path={schema}")
        separator = "&" if url.query else "?"
        yield f"{base}{separator}options={options}&application_name={schema}"
    finally:
        with admin.connect() as connection:
            # A connection still open in a thread that outlived its test would hold locks
            # the DROP waits for; end those sessions first.
            connection.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = :name AND pid <> pg_backend_pid()"
                ),
                {"name": schema},
            )
            connection.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()
