"""Calls run at set times on one thread of their own: a round's lease extensions spread
over part of the round instead of all at once.

Every running task's lease is extended every round. At a few hundred workers those pushes
went out together, and for the tenth of a second they took, the master's interpreter
served little else: heartbeats and submissions due then waited behind them. Handed to
their lanes a little apart, they cost the same but never at once.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)


class Pacer:
    """Runs each callable handed to `at` once its time (time.monotonic) has come, one at a
    time, in time order. Closing runs whatever still waits at once, so nobody waiting on
    its outcome is left waiting."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._condition = threading.Condition()
        # (due, order handed, callable): the order keeps equal times first come first run.
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def at(self, due: float, fn: Callable[[], None]) -> None:
        with self._condition:
            closed = self._closed
            if not closed:
                heapq.heappush(self._heap, (due, next(self._order), fn))
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                    self._thread.start()
                self._condition.notify()
        if closed:
            fn()

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._condition.notify()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._closed:
                    if self._heap:
                        wait = self._heap[0][0] - time.monotonic()
                        if wait <= 0:
                            break
                        self._condition.wait(wait)
                    else:
                        self._condition.wait()
                last = self._closed
                if last:
                    batch = [fn for _, _, fn in sorted(self._heap)]
                    self._heap.clear()
                else:
                    batch = [heapq.heappop(self._heap)[2]]
            for fn in batch:
                try:
                    fn()
                except Exception:
                    log.exception("a paced call failed", pacer=self._name)
            if last:
                return
