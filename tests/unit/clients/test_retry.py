"""Retries with backoff on UNAVAILABLE only, inside one deadline."""

from __future__ import annotations

import random

import grpc
import pytest

from clients.retry import NO_RETRY, RetryPolicy, call_with_retry
from tests.unit.clients.test_errors import FailedCall


class FakeClock:
    """A clock that advances only when slept on."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Flaky:
    """Fails with the given codes, then answers."""

    def __init__(self, *codes: grpc.StatusCode) -> None:
        self.codes = list(codes)
        self.deadlines: list[float] = []

    def __call__(self, remaining: float) -> str:
        self.deadlines.append(remaining)
        if self.codes:
            raise FailedCall(self.codes.pop(0), "flaky")
        return "answer"


def run(attempt: Flaky, *, timeout=10.0, policy=None, clock=None) -> str:
    return call_with_retry(
        attempt,
        timeout_s=timeout,
        policy=policy or RetryPolicy(),
        clock=clock or FakeClock(),
        rng=random.Random(1),
    )


def test_unavailable_is_retried_with_growing_backoff_until_success():
    """Two UNAVAILABLEs then success: one answer, two pauses, the second longer bound."""
    clock = FakeClock()
    attempt = Flaky(grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAVAILABLE)
    assert run(attempt, clock=clock) == "answer"
    assert len(clock.sleeps) == 2
    assert 0.05 <= clock.sleeps[0] <= 0.1
    assert 0.1 <= clock.sleeps[1] <= 0.2


def test_each_attempt_gets_only_what_is_left_of_the_deadline():
    """Retries never extend the call beyond its deadline."""
    clock = FakeClock()
    attempt = Flaky(grpc.StatusCode.UNAVAILABLE)
    run(attempt, timeout=5.0, clock=clock)
    assert attempt.deadlines[0] == pytest.approx(5.0)
    assert attempt.deadlines[1] == pytest.approx(5.0 - clock.sleeps[0])


def test_other_codes_fail_at_once():
    """NOT_FOUND is an answer, not an outage: no retry."""
    clock = FakeClock()
    attempt = Flaky(grpc.StatusCode.NOT_FOUND)
    with pytest.raises(grpc.RpcError):
        run(attempt, clock=clock)
    assert clock.sleeps == []
    assert len(attempt.deadlines) == 1


def test_non_idempotent_calls_are_tried_once():
    """NO_RETRY makes a single attempt even on UNAVAILABLE."""
    attempt = Flaky(grpc.StatusCode.UNAVAILABLE)
    with pytest.raises(grpc.RpcError):
        run(attempt, policy=NO_RETRY)
    assert len(attempt.deadlines) == 1


def test_gives_up_after_the_last_attempt_or_when_the_deadline_would_pass():
    """A master that stays down costs at most `attempts` tries, and never the deadline."""
    attempt = Flaky(*[grpc.StatusCode.UNAVAILABLE] * 10)
    with pytest.raises(grpc.RpcError):
        run(attempt, policy=RetryPolicy(attempts=3))
    assert len(attempt.deadlines) == 3

    clock = FakeClock()
    attempt = Flaky(*[grpc.StatusCode.UNAVAILABLE] * 10)
    with pytest.raises(grpc.RpcError):
        run(attempt, timeout=0.25, clock=clock, policy=RetryPolicy(attempts=10))
    assert clock.now - 100.0 < 0.25


def test_backoff_is_capped():
    """However many failures, a pause never exceeds max_backoff_s."""
    policy = RetryPolicy(initial_backoff_s=0.5, max_backoff_s=1.0)
    rng = random.Random(3)
    assert all(policy.backoff(n, rng) <= 1.0 for n in range(20))
