"""Fake-GPU pacing: stretch each iteration to compute_time / speed by sleeping."""

from __future__ import annotations

import time
from collections.abc import Callable


class Pacer:
    def __init__(
        self,
        speed: float,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not 0.0 < speed <= 1.0:
            raise ValueError(f"speed must be in (0, 1], got {speed}")
        self._stretch = 1.0 / speed - 1.0
        self._sleep = sleep

    @property
    def active(self) -> bool:
        return self._stretch > 0.0

    def delay_for(self, compute_s: float) -> float:
        return max(0.0, compute_s) * self._stretch

    def pace(self, compute_s: float) -> float:
        delay = self.delay_for(compute_s)
        if delay > 0.0:
            self._sleep(delay)
        return delay
