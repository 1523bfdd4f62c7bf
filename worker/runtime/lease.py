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
        if self._path is None:
            return False
        now = self._monotonic()
        if self._checked_at is None or now - self._checked_at >= CHECK_INTERVAL_S:
            self._checked_at = now
            self._ends = _read(self._path)
        return self._ends is not None and self._wall() >= self._ends


def _read(path: Path) -> float | None:
    try:
        value = float(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value > 0 else None
