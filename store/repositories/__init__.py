"""Repositories: a small API per aggregate over one shared session (a unit of work)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session

from store.repositories.counters import LEASE, CounterRepository
from store.repositories.jobs import JobRepository
from store.repositories.memory import PolicyMemoryRepository
from store.repositories.nodes import NodeRepository
from store.repositories.notifications import NotificationRepository
from store.repositories.rounds import RoundRepository
from store.repositories.tasks import TaskRepository
from store.repositories.throughput import ThroughputRepository
from store.repositories.tokens import TokenRepository
from store.repositories.usage import UsageRepository

__all__ = [
    "CounterRepository",
    "JobRepository",
    "NodeRepository",
    "NotificationRepository",
    "PolicyMemoryRepository",
    "RoundRepository",
    "TaskRepository",
    "ThroughputRepository",
    "TokenRepository",
    "UnitOfWork",
    "UsageRepository",
]


class UnitOfWork:
    """Every repository, sharing one session and therefore one transaction."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.jobs = JobRepository(session)
        self.nodes = NodeRepository(session)
        self.tasks = TaskRepository(session)
        self.rounds = RoundRepository(session)
        self.throughput = ThroughputRepository(session)
        self.tokens = TokenRepository(session)
        self.counters = CounterRepository(session)
        self.usage = UsageRepository(session)
        self.memory = PolicyMemoryRepository(session)
        self.notifications = NotificationRepository(session)

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Changes made inside are flushed on leaving it; if that or anything inside raises,
        they alone are undone and the transaction goes on without them."""
        connection = self.session.connection()
        if connection.dialect.name == "sqlite":
            driver = connection.connection.dbapi_connection
            # Python's sqlite3 begins a transaction only before its first write: a
            # savepoint taken before that would be the outermost transaction, and
            # releasing it would commit.
            if driver is not None and not driver.in_transaction:
                connection.exec_driver_sql("BEGIN")
        with self.session.begin_nested():
            yield

    def next_lease(self, count: int = 1) -> int:
        """A new fencing token (the first of `count` consecutive ones); strictly greater than
        every token handed out before."""
        return self.counters.next(LEASE, count)
