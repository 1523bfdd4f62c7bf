"""When an early round starts: after its delay, and kept from the last round by as long as
that round took (times the spacing), so rounds of a long queue cannot run back to back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from master.daemon import early_round_due
from master.settings import Settings, SettingsError

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_without_a_round_before_it_starts_after_its_delay() -> None:
    assert early_round_due(NOW, 1.0, None, 0.0, 1.0) == NOW + timedelta(seconds=1)


def test_a_long_last_round_pushes_the_next_one_back() -> None:
    """A 3 s round that ended just now: the next starts 3 s after it, not 1 s."""
    assert early_round_due(NOW, 1.0, NOW, 3.0, 1.0) == NOW + timedelta(seconds=3)
    assert early_round_due(NOW, 1.0, NOW, 3.0, 2.0) == NOW + timedelta(seconds=6)


def test_a_short_or_long_ago_round_leaves_the_delay_alone() -> None:
    assert early_round_due(NOW, 1.0, NOW, 0.2, 1.0) == NOW + timedelta(seconds=1)
    earlier = NOW - timedelta(seconds=10)
    assert early_round_due(NOW, 1.0, earlier, 3.0, 1.0) == NOW + timedelta(seconds=1)


def test_spacing_zero_turns_it_off_and_a_negative_one_is_refused() -> None:
    assert early_round_due(NOW, 1.0, NOW, 30.0, 0.0) == NOW + timedelta(seconds=1)
    with pytest.raises(SettingsError, match="early_round_spacing"):
        Settings(early_round_spacing=-1)
