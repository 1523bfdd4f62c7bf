"""The job-side end of a lease: stop once the lease in the agent's lease file is over.

The agent stops a task whose lease ran out without renewal. When the agent itself is frozen
or gone it cannot; the job then reads the lease end the agent last wrote and stops by
itself, so the master can place the job elsewhere once the lease is over without it ever
running twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

#: Seconds between reads of the lease file.
CHECK_INTERVAL_S = 1.0


class LeaseWatch:
    """Answers whether the lease in ``path`` is over, reading the file at most once per
    :data:`CHECK_INTERVAL_S`. No file, or one that cannot be read, means "not over": the
    agent, when present, stops the task itself."""

    def __init__(
        self,
        path: Path | None,
        *,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._path = path
        self._wall = wall
        self._monotonic = monotonic
        self._checked_at: float | None = None
        self._ends: float | None = None

    def over(self) -> bool:
        ends = self.ends()
        return ends is not None and self._wall() >= ends

    def ends(self) -> float | None:
        """The Unix time the lease ends as last written by the agent (None: no file, or
        unreadable); the file is read again at most once per :data:`CHECK_INTERVAL_S`."""
        if self._path is None:
            return None
        now = self._monotonic()
        if self._checked_at is None or now - self._checked_at >= CHECK_INTERVAL_S:
            self._checked_at = now
            self._ends = _read(self._path)
        return self._ends

    def reached(self, moment: float) -> bool:
        """Whether the wall clock has reached ``moment`` (a Unix time)."""
        return self._wall() >= moment


def _read(path: Path) -> float | None:
    try:
        value = float(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value > 0 else None
