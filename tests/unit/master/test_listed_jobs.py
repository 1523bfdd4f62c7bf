"""Listings remember each job's encoding per privacy view: the same message for the same
job object and reason, another for an equal job read anew or a new waiting reason, private
parts hidden only in the hidden view, and at most `size` jobs remembered."""

from __future__ import annotations

from datetime import UTC, datetime

from master.service.codec import ListedJobs, hide_private, job_to_pb
from store.domain import Job, JobSpec
from store.states import JobState, ProgramKind


def job(job_id: int, reason: str = "waiting") -> Job:
    spec = JobSpec(
        name=f"j{job_id}",
        num_gpus=1,
        iterations=10,
        program_kind=ProgramKind.COMMAND,
        argv=("python", "train.py", "--key=secret"),
        env=(("TOKEN", "secret"),),
        workdir="/home/alice",
    )
    return Job(
        id=job_id,
        user="alice",
        spec=spec,
        state=JobState.PENDING,
        reason=reason,
        iterations_done=0,
        checkpoint_iterations=0,
        attained_service=0.0,
        retries=0,
        exit_code=None,
        preemptions=0,
        migrations=0,
        submitted_at=datetime(2026, 1, 1, tzinfo=UTC),
        started_at=None,
        finished_at=None,
        version=1,
    )


def test_each_view_is_encoded_once_and_hides_only_when_asked() -> None:
    listed = ListedJobs()
    one = job(1)
    whole, concealed = (
        listed.pb(one, hidden=False, reason=one.reason),
        listed.pb(one, hidden=True, reason=one.reason),
    )
    assert whole == job_to_pb(one)
    assert concealed == hide_private(job_to_pb(one))
    assert "secret" in str(whole) and "secret" not in str(concealed)
    assert listed.pb(one, hidden=False, reason=one.reason) is whole
    assert listed.pb(one, hidden=True, reason=one.reason) is concealed


def test_a_changed_job_is_encoded_anew_and_old_entries_make_room() -> None:
    listed = ListedJobs(size=2)
    first = job(1)
    before = listed.pb(first, hidden=False, reason=first.reason)
    changed = job(1, reason="placed on n1")
    assert listed.pb(changed, hidden=False, reason=changed.reason).reason == "placed on n1"
    listed.pb(job(2), hidden=False, reason="waiting")
    # Three jobs in a memo of two: the first one's entry went, its encoding is made again.
    again = listed.pb(first, hidden=False, reason=first.reason)
    assert again == before and again is not before


def test_an_expected_start_goes_on_a_copy_made_once_per_forecast() -> None:
    """The shared message never carries the start; the copy that does is reused while the
    start stays the same and made again when a new forecast moves it."""
    listed = ListedJobs()
    one = job(1)
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    base = listed.pb(one, hidden=True, reason=one.reason)
    started = listed.pb_expected(one, hidden=True, expected_start=at, reason=one.reason)
    assert started.expected_start.ToDatetime(UTC) == at
    assert started.private_hidden and "secret" not in str(started)
    assert not base.HasField("expected_start")
    assert listed.pb_expected(one, hidden=True, expected_start=at, reason=one.reason) is started
    later = listed.pb_expected(
        one, hidden=True, expected_start=at.replace(hour=9), reason=one.reason
    )
    assert later.expected_start.ToDatetime(UTC).hour == 9
    assert listed.pb_expected(one, hidden=True, expected_start=None, reason=one.reason) is base


def test_a_new_waiting_reason_for_the_same_job_is_encoded_once() -> None:
    """A round's reason replaces the stored one in the message; the message is made again
    when the reason changes, and reused while it stays, with or without a start."""
    listed = ListedJobs()
    one = job(1)
    stored = listed.pb(one, hidden=True, reason=one.reason)
    behind = listed.pb(one, hidden=True, reason="waiting: queued behind job 7 (fifo)")
    assert behind.reason == "waiting: queued behind job 7 (fifo)" and behind.private_hidden
    assert stored.reason == "waiting"
    assert listed.pb(one, hidden=True, reason="waiting: queued behind job 7 (fifo)") is behind
    at = datetime(2026, 1, 2, tzinfo=UTC)
    started = listed.pb_expected(one, hidden=True, expected_start=at, reason=behind.reason)
    assert started.reason == behind.reason
    moved = listed.pb_expected(one, hidden=True, expected_start=at, reason="waiting: 9")
    assert moved.reason == "waiting: 9" and moved.expected_start == started.expected_start
