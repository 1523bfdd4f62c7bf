"""Logged-in sessions, kept in this process's memory.

The browser holds only a random session id (an HttpOnly, SameSite=Strict cookie); the API
token it logged in with stays here, with a client of the master that carries that token, so
every page sees exactly what ``hctl`` shows that user. A restart of the dashboard logs
everyone out, which is the safe way round.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from clients.client import HadarClient

COOKIE_NAME = "hadar_session"


@dataclass(slots=True)
class Session:
    id: str
    user: str
    admin: bool
    client: HadarClient
    created_at: float
    last_used_at: float
    # Sent back with each form that changes something (log out), checked against this.
    form_key: str = field(default_factory=lambda: secrets.token_urlsafe(24))


class SessionStore:
    """Sessions by id; a session ends `ttl_s` after its login or `idle_s` after its last use."""

    def __init__(
        self, ttl_s: float, idle_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl_s = ttl_s
        self._idle_s = idle_s
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}

    def open(self, user: str, admin: bool, client: HadarClient) -> Session:
        now = self._clock()
        session = Session(secrets.token_urlsafe(32), user, admin, client, now, now)
        with self._lock:
            self._sessions[session.id] = session
        self._sweep()
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session with this id, marked used; None when there is none or it ended."""
        if not session_id:
            return None
        now = self._clock()
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return None
            if self._expired(session, now):
                del self._sessions[session_id]
            else:
                session.last_used_at = now
                return session
        session.client.close()
        return None

    def close(self, session_id: str) -> None:
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is not None:
            session.client.close()

    def close_all(self) -> None:
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for session in sessions:
            session.client.close()

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def _expired(self, session: Session, now: float) -> bool:
        return now - session.created_at >= self._ttl_s or now - session.last_used_at >= self._idle_s

    def _sweep(self) -> None:
        now = self._clock()
        with self._lock:
            ended = [s for s in self._sessions.values() if self._expired(s, now)]
            for session in ended:
                del self._sessions[session.id]
        for session in ended:
            session.client.close()


class LoginThrottle:
    """Failed logins per client address: after `limit` failures within `window_s` seconds,
    that address may not try again until the oldest of them is `window_s` old. Tokens are
    long and random; this keeps anyone from trying many of them through the dashboard."""

    def __init__(
        self, limit: int = 10, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._limit = limit
        self._window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: dict[str, list[float]] = {}

    def wait_s(self, address: str) -> float:
        """Seconds before `address` may try again; 0 when it may now."""
        now = self._clock()
        with self._lock:
            recent = [t for t in self._failures.get(address, ()) if now - t < self._window_s]
            if recent:
                self._failures[address] = recent
            else:
                self._failures.pop(address, None)
            if len(recent) < self._limit:
                return 0.0
            return recent[0] + self._window_s - now

    def failed(self, address: str) -> None:
        with self._lock:
            self._failures.setdefault(address, []).append(self._clock())
            # Bounded memory: addresses with no failure in the window are dropped.
            if len(self._failures) > 10_000:
                now = self._clock()
                self._failures = {
                    a: ts for a, ts in self._failures.items() if now - ts[-1] < self._window_s
                }
