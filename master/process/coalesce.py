"""Work asked for by many events, run once for all of those that came before it started."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor


class CoalescedRun:
    """Runs `work` on `executor` when asked. A request made while a run waits to start is
    served by that run, which reads whatever it reads after the request; a request made
    once a run has started queues another. So a burst of requests costs one run, and no
    request goes without a run that starts after it."""

    def __init__(self, work: Callable[[], None], executor: Executor) -> None:
        self._work = work
        self._executor = executor
        self._lock = threading.Lock()
        self._queued = False

    def request(self) -> None:
        with self._lock:
            if self._queued:
                return
            self._queued = True
        self._executor.submit(self._run)

    def _run(self) -> None:
        with self._lock:
            self._queued = False
        self._work()
