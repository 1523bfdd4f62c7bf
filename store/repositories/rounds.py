"""Scheduling rounds."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.domain import Round
from store.errors import NotFoundError
from store.models import RoundRow
from store.repositories import convert
from store.repositories.counters import ROUND, CounterRepository


class RoundRepository:
    def __init__(self, session: Session) -> None:
        self._session = session

    def add(
        self,
        *,
        policy: str,
        started_at: datetime,
        plan: Mapping[str, Any],
        actions: int,
        duration_s: float = 0.0,
    ) -> Round:
        """Store a new round under the next round number."""
        number = CounterRepository(self._session).next(ROUND)
        row = RoundRow(
            number=number,
            policy=policy,
            started_at=started_at,
            duration_s=duration_s,
            plan=dict(plan),
            actions=actions,
            dispatch_failures=0,
        )
        self._session.add(row)
        self._session.flush()
        return convert.round_(row)

    def finish(self, number: int, *, duration_s: float, dispatch_failures: int) -> Round:
        row = self._session.get(RoundRow, number)
        if row is None:
            raise NotFoundError("round", number)
        row.duration_s = duration_s
        row.dispatch_failures = dispatch_failures
        self._session.flush()
        return convert.round_(row)

    def set_dispatch_failures(self, number: int, count: int) -> None:
        """How many workers the round's pushes did not reach (known once they are over,
        after the round itself finished)."""
        row = self._session.get(RoundRow, number)
        if row is None:
            raise NotFoundError("round", number)
        row.dispatch_failures = count
        self._session.flush()

    def get(self, number: int) -> Round:
        row = self._session.get(RoundRow, number)
        if row is None:
            raise NotFoundError("round", number)
        return convert.round_(row)

    def started_since(self, at: datetime) -> list[Round]:
        """The rounds started at `at` or later, oldest first."""
        query = select(RoundRow).where(RoundRow.started_at >= at).order_by(RoundRow.number)
        return [convert.round_(row) for row in self._session.scalars(query)]

    def last(self) -> Round | None:
        row = self._session.scalars(
            select(RoundRow).order_by(RoundRow.number.desc()).limit(1)
        ).one_or_none()
        return convert.round_(row) if row is not None else None
