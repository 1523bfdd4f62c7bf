"""Named monotonic counters: the lease fencing token and round numbers."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from store.models import CounterRow

LEASE = "lease"
ROUND = "round"


class CounterRepository:
    def __init__(self, session: Session) -> None:
        self._session = session

    def next(self, name: str, count: int = 1) -> int:
        """Reserve `count` consecutive values and return the first. Values never repeat.

        The UPDATE takes the row's write lock, so concurrent units of work serialize here
        and each gets distinct values.
        """
        if count < 1:
            raise ValueError("count must be >= 1")
        result = self._session.execute(
            update(CounterRow)
            .where(CounterRow.name == name)
            .values(value=CounterRow.value + count)
            .returning(CounterRow.value)
        ).scalar_one_or_none()
        if result is None:
            self._session.add(CounterRow(name=name, value=count))
            self._session.flush()
            return 1
        return result - count + 1

    def current(self, name: str) -> int:
        value = self._session.execute(
            select(CounterRow.value).where(CounterRow.name == name)
        ).scalar_one_or_none()
        return value or 0
