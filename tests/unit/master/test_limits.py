"""The per-user submission token bucket, on a clock the test moves."""

from __future__ import annotations

from master.jobs.limits import PRUNE_ABOVE, SubmitRateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_passes_then_the_rate_refills_one_token_at_a_time() -> None:
    """Burst 3 at 2/s: three pass at once, the fourth waits 0.5 s; after 0.5 s one more
    passes; a long pause refills no more than the burst."""
    clock = Clock()
    limiter = SubmitRateLimiter(2.0, 3, clock)
    assert [limiter.try_take("alice") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.try_take("alice") == 0.5
    clock.now += 0.25
    assert limiter.try_take("alice") == 0.25
    clock.now += 0.25
    assert limiter.try_take("alice") == 0.0
    clock.now += 3600
    assert [limiter.try_take("alice") for _ in range(4)] == [0.0, 0.0, 0.0, 0.5]


def test_users_have_their_own_buckets_and_a_token_can_be_given_back() -> None:
    clock = Clock()
    limiter = SubmitRateLimiter(1.0, 1, clock)
    assert limiter.try_take("alice") == 0.0
    assert limiter.try_take("bob") == 0.0
    assert limiter.try_take("alice") == 1.0
    limiter.give_back("alice")
    assert limiter.try_take("alice") == 0.0


def test_a_zero_rate_turns_the_limit_off() -> None:
    limiter = SubmitRateLimiter(0.0, 1, Clock())
    assert all(limiter.try_take("alice") == 0.0 for _ in range(1000))


def test_the_refusal_names_the_setting_and_rounds_the_wait_up() -> None:
    error = SubmitRateLimiter(3.0, 5, Clock()).refusal("alice", 0.31)
    assert error.retry_after_s == 0.4
    assert "submit_rate_per_user" in str(error) and "retry in 0.4 s" in str(error)


def test_full_buckets_are_forgotten_when_many_users_have_one() -> None:
    """The table of buckets stays bounded: users whose buckets refilled are dropped, users
    still short of tokens are kept."""
    clock = Clock()
    limiter = SubmitRateLimiter(1.0, 1, clock)
    for i in range(PRUNE_ABOVE):
        limiter.try_take(f"user{i}")
    clock.now += 10
    limiter.try_take("late")
    limiter.try_take("another")
    assert limiter.try_take("late") == 1.0
    assert len(limiter._buckets) == 2
