"""Wakes watchers (WatchJobs, StreamLogs) when jobs change; the events themselves are read
from the store, so a watcher never misses one and survives restarts."""

from __future__ import annotations

import threading


class ChangeSignal:
    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._generation = 0
        self._closed = False

    def notify(self) -> None:
        with self._condition:
            self._generation += 1
            self._condition.notify_all()

    @property
    def generation(self) -> int:
        with self._condition:
            return self._generation

    def wait(self, seen: int, timeout: float) -> int:
        """Block until something changed after generation `seen` (or timeout/close)."""
        with self._condition:
            self._condition.wait_for(
                lambda: self._generation != seen or self._closed, timeout=timeout
            )
            return self._generation

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed
