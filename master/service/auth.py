"""Who is calling: API tokens for people and programs, the cluster token for workers.

With ``auth = "none"`` (local development only) nobody is checked: the user comes from the
``x-hadar-user`` header or is the master's own OS user, and every caller is an admin.
"""

from __future__ import annotations

import getpass
import hmac
import threading
import time
from collections.abc import Mapping

from master.errors import PermissionDeniedError, UnauthenticatedError
from master.jobs.manager import Caller
from master.process.transactions import Transactor
from store.repositories.tokens import hash_token

AUTHORIZATION = "authorization"
USER_HEADER = "x-hadar-user"
# Tokens are re-checked against the store this often (a revocation takes effect within it).
CACHE_SECONDS = 5.0


def bearer(metadata: Mapping[str, str]) -> str:
    value = metadata.get(AUTHORIZATION, "")
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return ""
    return token.strip()


def os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "hadar"


class Authenticator:
    def __init__(self, tx: Transactor, mode: str, cluster_token: str) -> None:
        self._tx = tx
        self._mode = mode
        self._cluster_token = cluster_token
        self._cache: dict[str, tuple[float, Caller]] = {}
        # Tokens whose stale entry one caller is reading again: the others go on with it
        # meanwhile instead of all reading (a write transaction each) at the same moment.
        self._refreshing: set[str] = set()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._mode != "none"

    def user(self, metadata: Mapping[str, str]) -> Caller:
        """The person or program behind a Hadar API call."""
        if not self.enabled:
            name = metadata.get(USER_HEADER, "").strip() or os_user()
            return Caller(user=name, admin=True)
        token = bearer(metadata)
        if not token:
            raise UnauthenticatedError("missing 'authorization: Bearer <token>' metadata")
        key = hash_token(token)
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                if now - cached[0] < CACHE_SECONDS or key in self._refreshing:
                    return cached[1]
                self._refreshing.add(key)
        try:
            info = self._tx.write(lambda uow: uow.tokens.authenticate(token), jobs=False)
        finally:
            with self._lock:
                self._refreshing.discard(key)
        if info is None:
            with self._lock:
                self._cache.pop(key, None)
            if self._cluster_token and hmac.compare_digest(
                token.encode(), self._cluster_token.encode()
            ):
                raise PermissionDeniedError("the cluster token is for workers, not for the API")
            raise UnauthenticatedError("unknown or revoked token")
        caller = Caller(user=info.user, admin=info.admin)
        with self._lock:
            self._cache[key] = (now, caller)
        return caller

    def worker(self, metadata: Mapping[str, str]) -> None:
        """Check a worker's cluster token."""
        if not self.enabled:
            return
        token = bearer(metadata)
        if not token:
            raise UnauthenticatedError("missing 'authorization: Bearer <cluster token>' metadata")
        if not hmac.compare_digest(token.encode(), self._cluster_token.encode()):
            raise UnauthenticatedError("wrong cluster token")

    def forget(self) -> None:
        """Drop cached tokens (after a revocation, so it takes effect at once here)."""
        with self._lock:
            self._cache.clear()
