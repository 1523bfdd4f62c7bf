"""Group commit: requests that arrive while a commit is under way are stored together, in
the next single transaction, instead of one transaction each.

Leader and followers, with no thread of its own: a caller that finds no commit under way
becomes the leader and commits every request queued by then (its own included); callers
that arrive meanwhile queue and wait. When a commit ends, its callers get their outcomes
and one of the callers still queued leads the next group. A transaction's fixed costs (its
begin and commit, the master's term check, one statement per table instead of one per
row) are then paid once per group, and the more callers wait, the larger the groups grow.
No committer thread: handing each request to one and its answer back costs two thread
switches per request, and measured slower than letting a waiting caller lead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")


@dataclass(slots=True)
class _Waiting(Generic[ItemT, ResultT]):
    item: ItemT
    # Set once the caller may go on: its outcome is in, or it is to lead the next group.
    woken: threading.Event = field(default_factory=threading.Event)
    done: bool = False
    leads: bool = False
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

    A leader commits at once, without waiting for company: groups form by themselves while
    a commit is under way, so they grow with the load and cost no latency when it is light.
    """

    def __init__(
        self,
        commit: Callable[[Sequence[ItemT]], Sequence[ResultT | BaseException]],
        *,
        max_group: int = 512,
    ) -> None:
        self._commit = commit
        self._max_group = max_group
        self._lock = threading.Lock()
        self._queue: list[_Waiting[ItemT, ResultT]] = []
        self._committing = False
        self._groups = 0
        self._items = 0
        self._largest = 0

    @property
    def stats(self) -> GroupStats:
        with self._lock:
            return GroupStats(self._groups, self._items, self._largest)

    @property
    def queued(self) -> int:
        """Items waiting for a commit to take them (not those being committed)."""
        with self._lock:
            return len(self._queue)

    def run(self, item: ItemT) -> ResultT:
        """Queue `item`, wait for the commit that holds it, and return its result (or raise
        its exception)."""
        waiting: _Waiting[ItemT, ResultT] = _Waiting(item)
        with self._lock:
            self._queue.append(waiting)
            if not self._committing:
                self._committing = waiting.leads = True
        while not waiting.done:
            if waiting.leads:
                waiting.leads = False
                self._lead()
            else:
                # Each caller is woken once for its outcome, or once to lead: never for
                # other callers' commits.
                waiting.woken.wait()
                waiting.woken.clear()
        if waiting.error is not None:
            raise waiting.error
        return waiting.result  # type: ignore[return-value]

    def _lead(self) -> None:
        with self._lock:
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
        with self._lock:
            for index, waiting in enumerate(group):
                outcome = outcomes if isinstance(outcomes, BaseException) else outcomes[index]
                if isinstance(outcome, BaseException):
                    waiting.error = outcome
                else:
                    waiting.result = outcome
                waiting.done = True
                waiting.woken.set()
            self._groups += 1
            self._items += len(group)
            self._largest = max(self._largest, len(group))
            # The first caller still queued, if any, leads the next group.
            if self._queue:
                self._queue[0].leads = True
                self._queue[0].woken.set()
            else:
                self._committing = False
