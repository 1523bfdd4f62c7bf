"""Hadar's persistent store: SQLAlchemy models, repositories returning domain objects, migrations.

Usage::

    db = Database("sqlite:///hadar.db")
    upgrade(db.url, engine=db.engine)
    with db.transaction() as uow:
        job, created = uow.jobs.add(NewJob(user="alice", spec=spec))
"""

from __future__ import annotations

from store.database import Database, make_engine, normalize_url
from store.errors import (
    AlreadyExistsError,
    ConflictError,
    InvalidTransitionError,
    NotFoundError,
    StoreError,
)
from store.repositories import UnitOfWork

__all__ = [
    "AlreadyExistsError",
    "ConflictError",
    "Database",
    "InvalidTransitionError",
    "NotFoundError",
    "StoreError",
    "UnitOfWork",
    "make_engine",
    "normalize_url",
]
