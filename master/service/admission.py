"""Which user calls the master takes on now, so that no user can starve the workers.

The gRPC server serves every call on one thread pool, and a stream (WatchJobs, StreamLogs)
holds its thread for as long as it is open. Left alone, one user's twenty watchers would take
every thread, the workers' heartbeats would wait behind them, and the master would declare
healthy nodes lost. So user calls are admitted against caps before they run:

- per user: open streams (`max_streams_per_user`) and unary calls in flight
  (`max_calls_per_user`), so one user's flood leaves room for everyone else;
- overall: open streams (`max_streams`) and unary calls in flight (`grpc_threads`), so the
  server's pool always keeps `worker_rpc_threads` threads that no user call can take.

A call past a cap is refused at once with RESOURCE_EXHAUSTED naming the cap. Of the workers'
calls, heartbeats and registrations are never refused; their reports (progress, exits,
profiles) take at most half the workers' threads, so that while reports wait for the store
(behind a round's write, say) heartbeats still find a thread and no node is taken for lost.
A report refused is kept by its agent and sent again later.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from master.errors import ResourceExhaustedError

# Health checks and reflection: answered quickly, from their own few threads.
OPEN_CALL_THREADS = 4
# The ticket holder of a worker's report (no user name can be empty).
REPORTS = ""
# How soon a refused caller may try again: a unary call frees its slot within milliseconds.
RETRY_AFTER_S = 0.1


@dataclass(frozen=True, slots=True)
class AdmissionLimits:
    streams_per_user: int
    calls_per_user: int
    streams: int
    calls: int
    worker_threads: int

    @property
    def worker_reports(self) -> int:
        """Workers' reports served at once; the other worker threads stay for heartbeats."""
        return max(1, self.worker_threads // 2)

    @property
    def pool_threads(self) -> int:
        """Threads the server needs so that workers always find `worker_threads` free."""
        return self.streams + self.calls + self.worker_threads + OPEN_CALL_THREADS


@dataclass(slots=True)
class Ticket:
    """One admitted call; give it back exactly once (later releases are ignored)."""

    user: str
    streaming: bool
    released: bool = False


class Admission:
    def __init__(self, limits: AdmissionLimits) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self._streams: dict[str, int] = {}
        self._calls: dict[str, int] = {}
        self._open_streams = 0
        self._open_calls = 0
        self._open_reports = 0

    def enter(self, user: str, *, streaming: bool) -> Ticket:
        """Admit a call of `user`, or raise ResourceExhaustedError naming the cap it hit."""
        limits = self.limits
        with self._lock:
            if streaming:
                mine = self._streams.get(user, 0)
                if mine >= limits.streams_per_user:
                    raise ResourceExhaustedError(
                        f"user {user} already has {mine} open streams (watches and log "
                        f"follows), the most one user may hold (max_streams_per_user = "
                        f"{limits.streams_per_user}); close one first",
                    )
                if self._open_streams >= limits.streams:
                    raise ResourceExhaustedError(
                        f"the master holds {self._open_streams} open streams, the most it "
                        f"serves at once (max_streams = {limits.streams}); try again later",
                        retry_after_s=1.0,
                    )
                self._streams[user] = mine + 1
                self._open_streams += 1
            else:
                mine = self._calls.get(user, 0)
                if mine >= limits.calls_per_user:
                    raise ResourceExhaustedError(
                        f"user {user} already has {mine} calls in flight, the most one user "
                        f"may have (max_calls_per_user = {limits.calls_per_user}); wait for "
                        "an answer before sending more",
                        retry_after_s=RETRY_AFTER_S,
                    )
                if self._open_calls >= limits.calls:
                    raise ResourceExhaustedError(
                        f"the master is serving {self._open_calls} user calls, the most it "
                        f"serves at once (grpc_threads = {limits.calls}); try again shortly",
                        retry_after_s=RETRY_AFTER_S,
                    )
                self._calls[user] = mine + 1
                self._open_calls += 1
        return Ticket(user, streaming)

    def enter_report(self) -> Ticket:
        """Admit a worker's report, or raise ResourceExhaustedError when as many are being
        served as may be (the worker sends it again later)."""
        with self._lock:
            if self._open_reports >= self.limits.worker_reports:
                raise ResourceExhaustedError(
                    f"the master is serving {self._open_reports} worker reports, the most it "
                    f"serves at once (half of worker_rpc_threads = "
                    f"{self.limits.worker_threads}); send it again shortly",
                    retry_after_s=RETRY_AFTER_S,
                )
            self._open_reports += 1
        return Ticket(REPORTS, streaming=False)

    def leave(self, ticket: Ticket) -> None:
        with self._lock:
            if ticket.released:
                return
            ticket.released = True
            if ticket.user == REPORTS:
                self._open_reports -= 1
                return
            counts = self._streams if ticket.streaming else self._calls
            left = counts[ticket.user] - 1
            if left:
                counts[ticket.user] = left
            else:
                del counts[ticket.user]
            if ticket.streaming:
                self._open_streams -= 1
            else:
                self._open_calls -= 1

    def in_use(self, user: str) -> tuple[int, int]:
        """(open streams, calls in flight) of `user`."""
        with self._lock:
            return self._streams.get(user, 0), self._calls.get(user, 0)
