"""Where each active task runs, kept in memory so that heartbeats read no database.

The copy is the store's own (one query) as of a task-change generation
(store.task_changes): it is read again on the first use after the generation moved, so it
is never older than the last committed change. The generation is noted before the query,
so a change committed while the query runs leaves the copy tagged as older than it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from master.process.transactions import Transactor

TaskKey = tuple[int, int, int]  # (job id, task index, lease): one placement of a task


class Reported(Protocol):
    @property
    def job_id(self) -> int: ...
    @property
    def task_index(self) -> int: ...
    @property
    def lease(self) -> int: ...


R = TypeVar("R", bound=Reported)


@dataclass(frozen=True, slots=True)
class _Copy:
    generation: int
    where: Mapping[TaskKey, str]


class ActiveTaskIndex:
    """(job id, task index, lease) -> node of every active (not EXITED, not LOST) task."""

    def __init__(self, tx: Transactor) -> None:
        self._tx = tx
        self._changes = tx.database.task_changes
        # Replaced whole, never changed in place: readers take it without a lock.
        self._copy = _Copy(-1, {})
        # One reader reads the store at a time; the others wait for its copy.
        self._reading = threading.Lock()

    def current(self) -> Mapping[TaskKey, str]:
        copy = self._copy
        if copy.generation == self._changes.generation:
            return copy.where
        with self._reading:
            generation = self._changes.generation
            copy = self._copy
            if copy.generation == generation:
                return copy.where  # another reader read it meanwhile
            where = self._tx.read(lambda uow: uow.tasks.placements())
            self._copy = _Copy(generation, where)
            return where

    def not_on(self, node: str, reported: Iterable[R]) -> list[R]:
        """Those of the reported tasks that are not active on `node` (in the order given)."""
        where = self.current()
        return [t for t in reported if where.get((t.job_id, t.task_index, t.lease)) != node]
