"""Leases that could end before their renewal arrives are refused at start, naming the
settings that clash and the figures that do not add up; a local cluster's timers always
pass, whatever its round length."""

from __future__ import annotations

import pytest

from clients import localcluster
from master.settings import Settings, SettingsError, load


def test_a_lease_shorter_than_a_round_and_a_retried_push_is_refused() -> None:
    # 2 s rounds and 10 s leases with the default pushes (5 s x 3 attempts): a renewal
    # retried on a slow worker arrives 17.3 s after the round before it.
    with pytest.raises(SettingsError) as refused:
        Settings(round_seconds=2, heartbeat_timeout_s=6)
    message = str(refused.value)
    for words in (
        "lease_rounds x round_seconds (5 x 2 s = 10 s)",
        "round_seconds + dispatch_timeout_s x dispatch_attempts",
        "(2 + 5 x 3 + 0.3 = 17.3 s)",
    ):
        assert words in message, message
    assert Settings(round_seconds=2, heartbeat_timeout_s=6, dispatch_timeout_s=2.0)


def test_a_lease_shorter_than_a_silence_the_master_tolerates_is_refused() -> None:
    with pytest.raises(SettingsError) as refused:
        load(
            environ={
                "HADAR_ROUND_SECONDS": "2",
                "HADAR_HEARTBEAT_TIMEOUT_S": "8",
                "HADAR_DISPATCH_TIMEOUT_S": "1",
            }
        )
    message = str(refused.value)
    assert "heartbeat_timeout_s + 2 x round_seconds (8 + 2 x 2 = 12 s)" in message, message
    assert "(5 x 2 s = 10 s)" in message, message
    assert load(
        environ={
            "HADAR_ROUND_SECONDS": "2",
            "HADAR_HEARTBEAT_TIMEOUT_S": "8",
            "HADAR_DISPATCH_TIMEOUT_S": "1",
            "HADAR_LEASE_ROUNDS": "6",
        }
    )


def test_the_defaults_pass() -> None:
    settings = Settings()
    assert settings.lease_s > settings.round_seconds + settings.push_budget_s
    assert settings.lease_s >= settings.heartbeat_timeout_s + 2 * settings.round_seconds


@pytest.mark.parametrize("round_seconds", [0.5, 1.0, 2.0, 3.0, 10.0, 60.0])
def test_a_local_clusters_timers_pass_for_any_round_length(round_seconds: float) -> None:
    Settings(
        round_seconds=round_seconds,
        lease_rounds=localcluster.lease_rounds(round_seconds),
        heartbeat_interval_s=localcluster.HEARTBEAT_INTERVAL_S,
        heartbeat_timeout_s=localcluster.HEARTBEAT_TIMEOUT_S,
        dispatch_timeout_s=localcluster.DISPATCH_TIMEOUT_S,
        dispatch_attempts=localcluster.DISPATCH_ATTEMPTS,
    )


def test_extensions_spread_over_half_a_round_only_where_the_lease_has_room() -> None:
    """A 60 s round with 5-round leases spreads its extensions over 30 s; a lease with no
    room for a spread beyond a round, a retried push and a round of margin gets none."""
    assert Settings().extension_spread_s == 30.0
    tight = Settings(
        round_seconds=10, lease_rounds=3, dispatch_timeout_s=2.0, heartbeat_timeout_s=10
    )
    # 30 s lease - 2 x 10 s - a 4.1 s push budget leaves 5.9 s.
    assert tight.extension_spread_s == pytest.approx(30 - 20 - tight.push_budget_s)
    # 30 s - 2 x 10 s - the default pushes' 15.3 s leaves nothing.
    none = Settings(round_seconds=10, lease_rounds=3, heartbeat_timeout_s=10)
    assert none.extension_spread_s == 0.0
    for settings in (Settings(), tight, none):
        last_renewal = settings.extension_spread_s + settings.push_budget_s
        # The last lease extended still outlasts the next round's last renewal.
        assert settings.lease_s >= settings.round_seconds + last_renewal


def test_a_round_leaves_recent_leases_alone_only_where_the_lease_has_room() -> None:
    """Default settings leave a lease acknowledged within half a round (30 s) alone. Where
    the lease has no room beyond the spread, the retried push and a round of margin, or
    beyond a silence just short of the heartbeat timeout and the next round, every round
    renews every lease."""
    assert Settings().lease_renewal_age_s == 30.0
    # 50 s leases, 5 s spread: 50 - 30 s timeout - 10 s round - 5 s spread leaves 5 s.
    bench = Settings(round_seconds=10, heartbeat_interval_s=1)
    assert bench.lease_renewal_age_s == 5.0
    tight = Settings(
        round_seconds=10, lease_rounds=3, dispatch_timeout_s=2.0, heartbeat_timeout_s=10
    )
    assert tight.lease_renewal_age_s == 0.0
    for settings in (Settings(), bench, tight):
        skipped = settings.lease_renewal_age_s + settings.extension_spread_s
        # A renewal skipped at the age limit, then handed last in the next round's spread
        # and pushed with every retry, arrives a round before the lease ends.
        assert (
            settings.lease_s
            >= skipped + settings.round_seconds + settings.push_budget_s + settings.round_seconds
        )
        # ... and after a silence just short of the heartbeat timeout and the next round.
        assert settings.lease_s >= skipped + settings.heartbeat_timeout_s + settings.round_seconds
