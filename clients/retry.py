"""Retrying calls that failed because the master was briefly unreachable.

Only calls that are safe to repeat are retried (reads, watches, and submits that carry an
idempotency key); the caller decides which. The whole call, retries included, stays inside one
deadline.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

import grpc

T = TypeVar("T")


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter: attempt n waits up to initial * multiplier**n."""

    attempts: int = 5
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 2.0
    multiplier: float = 2.0

    def backoff(self, attempt: int, rng: random.Random) -> float:
        ceiling = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier**attempt)
        # Full jitter spreads clients that lost the master at the same moment.
        return rng.uniform(ceiling / 2, ceiling)


NO_RETRY = RetryPolicy(attempts=1)


def is_retryable(error: grpc.RpcError) -> bool:
    code_of = getattr(error, "code", None)
    return callable(code_of) and code_of() == grpc.StatusCode.UNAVAILABLE


def call_with_retry(
    attempt: Callable[[float], T],
    *,
    timeout_s: float,
    policy: RetryPolicy,
    clock: Clock,
    rng: random.Random,
) -> T:
    """Runs ``attempt(remaining_seconds)`` until it succeeds, fails for good, or time runs out.

    Raises the last ``grpc.RpcError`` unchanged; mapping it is the caller's job.
    """
    deadline = clock.monotonic() + timeout_s
    for number in range(policy.attempts):
        remaining = deadline - clock.monotonic()
        try:
            return attempt(max(remaining, 0.001))
        except grpc.RpcError as error:
            last = number == policy.attempts - 1
            if last or not is_retryable(error):
                raise
            pause = policy.backoff(number, rng)
            if clock.monotonic() + pause >= deadline:
                raise
            clock.sleep(pause)
    raise AssertionError("unreachable: the loop returns or raises")
