"""Group commit: requests that arrive while a commit is under way are stored together, in
the next single transaction, instead of one transaction each.

Leader and followers, with no thread of its own: a caller that finds no commit under way
becomes the leader and commits every request queued by then (its own included); callers
that arrive meanwhile queue and wait. When a commit ends, its callers get their outcomes
and one of the callers still queued leads the next group. A transaction's fixed costs (its
begin and commit, the master's term check, one statement per table instead of one per
row) are then paid once per group, and the more callers wait, the larger the groups grow.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")


@dataclass(slots=True)
class _Waiting(Generic[ItemT, ResultT]):
    item: ItemT
    done: bool = False
    result: ResultT | None = None
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class GroupStats:
    groups: int
    items: int
    largest: int


class GroupCommitter(Generic[ItemT, ResultT]):
    """Runs `commit` on groups of items, in arrival order, one group at a time.

    `commit` gets the queued items and returns, for each in order, its result or the
    exception to raise to its caller alone (one bad item does not fail the others). An
    exception raised by `commit` itself is raised to every caller of that group.

    `linger_s`: how long a leader waits for more items before it commits a group of one;
    0 commits at once (groups then form only while a commit is under way).
    """

    def __init__(
        self,
        commit: Callable[[Sequence[ItemT]], Sequence[ResultT | BaseException]],
        *,
        linger_s: float = 0.0,
        max_group: int = 512,
    ) -> None:
        self._commit = commit
        self._linger_s = linger_s
        self._max_group = max_group
        self._changed = threading.Condition(threading.Lock())
        self._queue: list[_Waiting[ItemT, ResultT]] = []
        self._committing = False
        self._groups = 0
        self._items = 0
        self._largest = 0

    @property
    def stats(self) -> GroupStats:
        with self._changed:
            return GroupStats(self._groups, self._items, self._largest)

    def run(self, item: ItemT) -> ResultT:
        """Queue `item`, wait for the commit that holds it, and return its result (or raise
        its exception)."""
        waiting: _Waiting[ItemT, ResultT] = _Waiting(item)
        with self._changed:
            self._queue.append(waiting)
        while True:
            with self._changed:
                self._changed.wait_for(lambda: waiting.done or not self._committing)
                if waiting.done:
                    break
                self._committing = True
            # A leader whose own item did not fit in its group leads again.
            self._lead()
        if waiting.error is not None:
            raise waiting.error
        return waiting.result  # type: ignore[return-value]

    def _lead(self) -> None:
        if self._linger_s > 0:
            with self._changed:
                lonely = len(self._queue) == 1
            if lonely:
                time.sleep(self._linger_s)
        with self._changed:
            group = self._queue[: self._max_group]
            del self._queue[: self._max_group]
        outcomes: Sequence[ResultT | BaseException] | BaseException
        try:
            answered = self._commit([w.item for w in group])
            outcomes = answered
            if len(answered) != len(group):
                outcomes = AssertionError(
                    f"a group commit answered {len(answered)} outcomes for {len(group)} items"
                )
        except BaseException as exc:  # handed to every caller of the group
            outcomes = exc
        with self._changed:
            for index, waiting in enumerate(group):
                outcome = outcomes if isinstance(outcomes, BaseException) else outcomes[index]
                if isinstance(outcome, BaseException):
                    waiting.error = outcome
                else:
                    waiting.result = outcome
                waiting.done = True
            self._committing = False
            self._groups += 1
            self._items += len(group)
            self._largest = max(self._largest, len(group))
            # The group's callers return; one still queued, if any, leads the next group.
            self._changed.notify_all()
