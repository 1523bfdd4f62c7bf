"""Admission of user calls: per-user and overall caps on streams and calls in flight."""

from __future__ import annotations

import pytest

from master.errors import ResourceExhaustedError
from master.service.admission import OPEN_CALL_THREADS, Admission, AdmissionLimits

LIMITS = AdmissionLimits(streams_per_user=2, calls_per_user=3, streams=3, calls=4, worker_threads=5)


def test_a_users_streams_past_the_cap_are_refused_naming_it() -> None:
    """A third stream of one user is refused naming max_streams_per_user; another user's
    stream is still admitted; closing one lets the next in."""
    admission = Admission(LIMITS)
    first = admission.enter("alice", streaming=True)
    admission.enter("alice", streaming=True)
    with pytest.raises(ResourceExhaustedError, match=r"max_streams_per_user = 2") as refused:
        admission.enter("alice", streaming=True)
    assert "alice already has 2 open streams" in str(refused.value)
    admission.enter("bob", streaming=True)
    admission.leave(first)
    admission.enter("alice", streaming=True)
    assert admission.in_use("alice") == (2, 0)


def test_the_overall_stream_cap_holds_across_users() -> None:
    admission = Admission(LIMITS)
    admission.enter("alice", streaming=True)
    admission.enter("bob", streaming=True)
    admission.enter("carol", streaming=True)
    with pytest.raises(ResourceExhaustedError, match=r"max_streams = 3") as refused:
        admission.enter("dave", streaming=True)
    assert refused.value.retry_after_s is not None


def test_calls_in_flight_are_capped_per_user_and_overall_apart_from_streams() -> None:
    """Unary calls count apart from streams: a user at the stream cap can still call, and
    the overall cap on calls names grpc_threads."""
    admission = Admission(LIMITS)
    admission.enter("alice", streaming=True)
    admission.enter("alice", streaming=True)
    tickets = [admission.enter("alice", streaming=False) for _ in range(3)]
    with pytest.raises(ResourceExhaustedError, match=r"max_calls_per_user = 3") as refused:
        admission.enter("alice", streaming=False)
    assert refused.value.retry_after_s is not None
    admission.enter("bob", streaming=False)
    with pytest.raises(ResourceExhaustedError, match=r"grpc_threads = 4"):
        admission.enter("carol", streaming=False)
    admission.leave(tickets[0])
    admission.enter("carol", streaming=False)


def test_a_ticket_given_back_twice_counts_once() -> None:
    """The interceptor gives a stream's ticket back both when gRPC ends the call and when
    the generator closes; only the first counts."""
    admission = Admission(LIMITS)
    ticket = admission.enter("alice", streaming=True)
    other = admission.enter("alice", streaming=True)
    admission.leave(ticket)
    admission.leave(ticket)
    assert admission.in_use("alice") == (1, 0)
    admission.leave(other)
    assert admission.in_use("alice") == (0, 0)


def test_the_pool_keeps_the_workers_threads_free_of_every_admitted_user_call() -> None:
    assert LIMITS.pool_threads == 3 + 4 + 5 + OPEN_CALL_THREADS


def test_workers_reports_take_at_most_half_the_workers_threads() -> None:
    """With five worker threads two reports are served at once; a third is refused naming
    worker_rpc_threads, apart from any user's calls, and one given back lets the next in."""
    admission = Admission(LIMITS)
    first = admission.enter_report()
    admission.enter_report()
    with pytest.raises(ResourceExhaustedError, match=r"worker_rpc_threads = 5") as refused:
        admission.enter_report()
    assert refused.value.retry_after_s is not None
    admission.enter("alice", streaming=False)  # users' calls count apart
    admission.leave(first)
    admission.leave(first)  # a second give-back counts for nothing
    admission.enter_report()
    with pytest.raises(ResourceExhaustedError):
        admission.enter_report()
