"""Webhook rules: accepted URLs, the payload and its summary text, the signature and the
backoff schedule."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta

import pytest

from master.errors import InvalidArgumentError
from master.jobs.notifications import (
    backoff_s,
    check_url,
    endpoint,
    host_allowed,
    payload,
    refusal,
    schedule,
    signature,
    summary,
)
from master.settings import Settings
from store.domain import Job, JobSpec, Notification
from store.states import JobState, NotificationStatus, ProgramKind

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def make_job(state: JobState = JobState.COMPLETED, exit_code: int | None = 0) -> Job:
    return Job(
        id=42,
        user="alice",
        spec=JobSpec(
            name="sweep-lr0.1",
            num_gpus=2,
            iterations=100,
            program_kind=ProgramKind.WORKLOAD,
            workload="resnet",
        ),
        state=state,
        reason="completed (exit 0)" if state is JobState.COMPLETED else "exit code 3 on n1",
        iterations_done=100,
        checkpoint_iterations=100,
        attained_service=0.0,
        retries=0,
        exit_code=exit_code,
        preemptions=0,
        migrations=0,
        submitted_at=T0,
        started_at=T0 + timedelta(minutes=1),
        finished_at=T0 + timedelta(hours=1, minutes=1),
        version=3,
    )


def owed(state: JobState = JobState.COMPLETED) -> Notification:
    return Notification(
        id=7,
        job_id=42,
        user="alice",
        url="https://hooks.example.org/T/B/secret",
        job_state=state,
        status=NotificationStatus.PENDING,
        attempts=0,
        created_at=T0,
        next_attempt_at=T0,
        delivered_at=None,
        last_error="",
    )


def test_payload_has_the_jobs_end_and_usage() -> None:
    """The body names the job, its owner, end state, reason, exit code, times, run time and
    GPU-hours, with a delivery id for receivers that deduplicate; it is JSON-serializable."""
    body = payload(owed(), make_job(), run_s=3600.0, gpu_s=7200.0)
    assert body == {
        "event": "job.ended",
        "delivery_id": 7,
        "job_id": 42,
        "name": "sweep-lr0.1",
        "user": "alice",
        "state": "COMPLETED",
        "reason": "completed (exit 0)",
        "exit_code": 0,
        "submitted_at": "2026-11-24T12:00:00+00:00",
        "started_at": "2026-11-24T12:01:00+00:00",
        "finished_at": "2026-11-24T13:01:00+00:00",
        "run_seconds": 3600.0,
        "gpu_hours": 2.0,
        "num_gpus": 2,
        "text": "Hadar job 42 (sweep-lr0.1) of alice ended COMPLETED after 01:00:00 of run "
        "time, 2.00 GPU-hours; exit code 0: completed (exit 0)",
    }
    assert json.loads(json.dumps(body)) == body


def test_summary_of_a_job_that_never_ran_and_has_no_exit_code() -> None:
    """No run time and no exit code: the text leaves them out rather than printing zeros."""
    job = make_job(JobState.CANCELLED, exit_code=None)
    text = summary(job, JobState.CANCELLED, 0.0, 0.0)
    assert text == "Hadar job 42 (sweep-lr0.1) of alice ended CANCELLED: exit code 3 on n1"
    assert "http" not in text


def test_backoff_doubles_from_the_base_up_to_the_cap() -> None:
    """After 1, 2, 3... failures: base, 2x, 4x..., never above the cap; a schedule of N
    attempts has N-1 waits."""
    assert [backoff_s(n, base_s=30, max_s=3600) for n in range(1, 9)] == [
        30, 60, 120, 240, 480, 960, 1920, 3600,
    ]  # fmt: skip
    assert backoff_s(0, base_s=30, max_s=3600) == 0.0
    assert backoff_s(10_000, base_s=30, max_s=3600) == 3600
    assert schedule(6, base_s=30, max_s=3600) == [30, 60, 120, 240, 480]
    assert schedule(1, base_s=30, max_s=3600) == []


def test_signature_is_hmac_sha256_of_the_body() -> None:
    body = b'{"job_id": 42}'
    expected = hmac.new(b"k", body, hashlib.sha256).hexdigest()
    assert signature(body, "k") == f"sha256={expected}"
    assert signature(body + b" ", "k") != signature(body, "k")


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.slack.com/services/T000/B000/XXXX",
        "http://ntfy.lab.example.org:8080/alice",
        "  https://mattermost.example.org/hooks/abc  ",
        "http://[::1]:9000/x",
    ],
)
def test_http_and_https_urls_are_accepted(url: str) -> None:
    assert check_url(url, "f", Settings()) == url.strip()


@pytest.mark.parametrize(
    ("url", "changes", "message"),
    [
        ("mailto:alice@example.org", {}, "must be an http or https URL"),
        ("file:///etc/passwd", {}, "must be an http or https URL"),
        ("https://", {}, "has no host"),
        ("https://a:b@example.org/", {}, "must not carry a user name"),
        ("https://example.org:99999/", {}, "not a valid URL"),
        ("https://example.org/a\tb", {}, "must not contain spaces"),
        ("https://example.org/" + "x" * 2048, {}, "at most 2048 bytes"),
        ("http://example.org/", {"webhook_schemes": "https"}, "must be an https URL"),
        ("https://example.org/", {"webhook_allow_hosts": "hooks.slack.com"}, "is not one"),
        ("https://hooks.slack.com/", {"webhooks_enabled": False}, "turned off"),
    ],
)
def test_bad_urls_are_refused_naming_the_field(
    url: str, changes: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        check_url(url, "spec.notify_url", Settings(**changes))  # type: ignore[arg-type]
    assert caught.value.field == "spec.notify_url"
    assert message in str(caught.value)
    assert message in refusal(url, Settings(**changes))  # type: ignore[arg-type]


def test_host_patterns() -> None:
    """Exact names, and `*.` for subdomains only; no patterns allow any host."""
    patterns = ("hooks.slack.com", "*.lab.example.org")
    assert host_allowed("hooks.slack.com", patterns)
    assert host_allowed("HOOKS.SLACK.COM.", patterns)
    assert host_allowed("ntfy.lab.example.org", patterns)
    assert not host_allowed("lab.example.org", patterns)
    assert not host_allowed("evil-lab.example.org", patterns)
    assert not host_allowed("hooks.slack.com.evil.org", patterns)
    assert host_allowed("anything.example", ())
    assert (
        refusal("https://hooks.slack.com/x", Settings(webhook_allow_hosts="hooks.slack.com")) == ""
    )


def test_endpoint_hides_the_path_and_query() -> None:
    assert endpoint("https://hooks.slack.com/services/T/B/secret?x=1") == "https://hooks.slack.com"
    assert endpoint("http://127.0.0.1:8080/a") == "http://127.0.0.1:8080"
    assert endpoint("http://[::1]:9/a") == "http://[::1]:9"
