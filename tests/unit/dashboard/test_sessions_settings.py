"""Sessions end after their lifetime or when idle, and close their client; settings come
from flags over HADAR_DASHBOARD_* variables and refuse what cannot work."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.client import HadarClient
from dashboard.sessions import LoginThrottle, SessionStore
from dashboard.settings import SettingsError, build


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def client() -> HadarClient:
    # A channel to nowhere: opening one connects nothing until a call is made.
    return HadarClient("127.0.0.1:9", token="t", timeout=0.1)


def test_a_session_ends_when_idle_or_too_old() -> None:
    """Used within its idle time a session lives; past its lifetime or idle time it is gone."""
    clock = ManualClock()
    store = SessionStore(ttl_s=100.0, idle_s=30.0, clock=clock)
    session = store.open("alice", False, client())
    assert len(session.id) >= 40
    for _ in range(3):
        clock.now += 25
        assert store.get(session.id) is session
    clock.now += 31
    assert store.get(session.id) is None
    old = store.open("bob", False, client())
    for _ in range(5):
        clock.now += 20
        found = store.get(old.id)
    assert found is None
    assert store.get("") is None and store.get("forged") is None


def test_closing_a_session_forgets_it() -> None:
    """After close (logout) the id opens nothing, and close_all empties the store."""
    store = SessionStore(ttl_s=100.0, idle_s=100.0)
    first = store.open("alice", False, client())
    store.open("bob", True, client())
    store.close(first.id)
    assert store.get(first.id) is None
    assert len(store) == 1
    store.close_all()
    assert len(store) == 0


def test_flags_outrank_the_environment() -> None:
    """--listen beats HADAR_DASHBOARD_LISTEN; numbers are parsed; unknown variables ignored."""
    env = {
        "HADAR_DASHBOARD_LISTEN": "0.0.0.0:9000",
        "HADAR_DASHBOARD_MASTER": "10.0.0.1:50051",
        "HADAR_DASHBOARD_PAGE_SIZE": "50",
        "HADAR_DASHBOARD_SOMETHING": "x",
    }
    settings = build({"listen": "127.0.0.1:8081", "master": None}, env)
    assert settings.listen == "127.0.0.1:8081"
    assert (settings.host, settings.port) == ("127.0.0.1", 8081)
    assert settings.master == "10.0.0.1:50051"
    assert settings.page_size == 50
    assert not settings.tls


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"listen": "8080"}, "listen: expected HOST:PORT"),
        ({"tls_cert": "/etc/hosts"}, "tls_cert and tls_key go together"),
        ({"tls_cert": "/no/cert.pem", "tls_key": "/no/key.pem"}, "tls_cert: no such file"),
        ({"master_cert_file": "/etc/hosts", "master_key_file": "/etc/hosts"}, "needs master_ca"),
        ({"refresh_s": "0"}, "refresh_s: must be more than 0"),
        ({"refresh_s": "soon"}, "refresh_s: not a number"),
        ({"page_size": "5000"}, "page_size: must be 1 to 1000"),
    ],
)
def test_unusable_settings_are_refused_by_name(raw: dict[str, str], message: str) -> None:
    """Each unusable setting is a SettingsError that names it."""
    with pytest.raises(SettingsError, match=message):
        build(raw, {})


def test_tls_settings_take_existing_files(tmp_path: Path) -> None:
    """A certificate and key that exist turn TLS on."""
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("x")
    key.write_text("x")
    assert build({"tls_cert": str(cert), "tls_key": str(key)}, {}).tls


def test_failed_logins_from_one_address_are_throttled() -> None:
    """After 3 failures in 60 s an address waits until the oldest is 60 s old; another
    address is not held back."""
    clock = ManualClock()
    throttle = LoginThrottle(limit=3, window_s=60.0, clock=clock)
    for _ in range(3):
        assert throttle.wait_s("10.0.0.1") == 0
        throttle.failed("10.0.0.1")
        clock.now += 10
    assert throttle.wait_s("10.0.0.1") == 30.0
    assert throttle.wait_s("10.0.0.2") == 0
    clock.now += 30
    assert throttle.wait_s("10.0.0.1") == 0
