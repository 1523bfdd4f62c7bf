"""The API token cache: a token is looked up in the store at most once per cache period,
and while one caller looks a stale token up again the others go on with what was cached
instead of all looking it up at once."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, cast

import pytest

from master.process.transactions import Transactor
from master.service import auth
from master.service.auth import Authenticator


@dataclass(frozen=True)
class _Info:
    user: str
    admin: bool


class _Store:
    """Answers every lookup as alice; `gate`, when set, holds a lookup until it opens."""

    def __init__(self) -> None:
        self.lookups = 0
        self.gate: threading.Event | None = None
        self.entered = threading.Event()

    def write(self, fn: Any, *, jobs: bool = True) -> Any:
        self.lookups += 1
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(10), "the lookup was never let through"
        return _Info(user="alice", admin=False)


def _metadata() -> dict[str, str]:
    return {"authorization": "Bearer tok-alice"}


def test_a_stale_token_is_looked_up_once_while_other_callers_use_the_cached_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fresh entry answers without the store; once stale, the first caller looks the
    token up again and five callers meanwhile get the cached caller; after that lookup a
    stale entry is looked up again."""
    store = _Store()
    authenticator = Authenticator(cast(Transactor, store), "token", "cluster-token")
    assert authenticator.user(_metadata()).user == "alice"
    assert authenticator.user(_metadata()).user == "alice"
    assert store.lookups == 1  # cached

    monkeypatch.setattr(auth, "CACHE_SECONDS", 0.0)  # every entry is stale from now on
    store.gate = threading.Event()
    store.entered.clear()
    refresher = threading.Thread(target=authenticator.user, args=(_metadata(),))
    refresher.start()
    assert store.entered.wait(10)
    # The refresh is under way: these are answered from the stale entry, not the store.
    for _ in range(5):
        assert authenticator.user(_metadata()).user == "alice"
    assert store.lookups == 2
    store.gate.set()
    refresher.join(10)
    assert authenticator.user(_metadata()).user == "alice"
    assert store.lookups == 3  # no refresh in flight any more: stale means look it up
