"""Fake-GPU pacing stretches an iteration to compute_time / speed."""

from __future__ import annotations

import pytest

from worker.runtime.pacing import Pacer


def test_slow_gpu_sleeps_the_difference() -> None:
    slept: list[float] = []
    pacer = Pacer(0.25, sleep=slept.append)
    pacer.pace(0.1)
    assert slept == [pytest.approx(0.3)]  # 0.1 / 0.25 = 0.4 in all


def test_full_speed_never_sleeps() -> None:
    slept: list[float] = []
    pacer = Pacer(1.0, sleep=slept.append)
    assert not pacer.active
    pacer.pace(0.1)
    assert slept == []


@pytest.mark.parametrize("speed", [0.0, -1.0, 1.5])
def test_speed_out_of_range_is_refused(speed: float) -> None:
    with pytest.raises(ValueError, match="speed"):
        Pacer(speed)
