"""Per-user submission limits: how many of a user's jobs may wait, and how fast new ones may
arrive (a token bucket per user). Both refuse with ResourceExhaustedError."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from master.errors import ResourceExhaustedError

# Full buckets carry no information; they are dropped once this many users have one, so a
# stream of made-up user names (possible with auth = "none") cannot grow the table forever.
PRUNE_ABOVE = 1024


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class SubmitRateLimiter:
    """Each user may submit `rate` jobs a second on average, `burst` of them at once.

    A rate of 0 turns the limiter off. Tokens taken for submissions that end up storing
    nothing (refused by another limit, or an idempotent resubmit) are given back.
    """

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def _bucket(self, user: str, now: float) -> _Bucket:
        bucket = self._buckets.get(user)
        if bucket is None:
            if len(self._buckets) >= PRUNE_ABOVE:
                self._prune(now)
            bucket = self._buckets[user] = _Bucket(float(self.burst), now)
        else:
            bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * self.rate)
            bucket.at = now
        return bucket

    def _prune(self, now: float) -> None:
        for name, bucket in list(self._buckets.items()):
            if bucket.tokens + (now - bucket.at) * self.rate >= self.burst:
                del self._buckets[name]

    def try_take(self, user: str) -> float:
        """Take one token: 0.0 when taken, else the seconds until one is available."""
        if not self.enabled:
            return 0.0
        with self._lock:
            bucket = self._bucket(user, self._clock())
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return 0.0
            return (1.0 - bucket.tokens) / self.rate

    def give_back(self, user: str) -> None:
        if not self.enabled:
            return
        with self._lock:
            bucket = self._bucket(user, self._clock())
            bucket.tokens = min(float(self.burst), bucket.tokens + 1.0)

    def refusal(self, user: str, wait_s: float) -> ResourceExhaustedError:
        # Rounded up so that a client retrying after the hint finds a token.
        retry_after = math.ceil(wait_s * 10) / 10
        return ResourceExhaustedError(
            f"{user} submits faster than submit_rate_per_user allows ({self.rate:g} jobs/s, "
            f"bursts of {self.burst}); retry in {retry_after:g} s",
            retry_after_s=retry_after,
        )


def pending_limit_error(user: str, waiting: int, limit: int) -> ResourceExhaustedError:
    return ResourceExhaustedError(
        f"{user} already has {waiting} job{'' if waiting == 1 else 's'} waiting to run "
        "(pending or preempted); "
        f"max_pending_jobs_per_user is {limit}. Submit again when some have started, or "
        "cancel some: see `hctl queue --me`, then `hctl cancel JOB`"
    )
