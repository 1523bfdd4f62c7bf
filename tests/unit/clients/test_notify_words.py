"""hctl's --notify-on and a job file's notify_on: Slurm-like words and end states."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from clients.cli import format as fmt
from clients.cli.jobfile import SpecError, build_spec, normalize, parse_notify_on
from clients.convert import spec_from_proto, spec_to_proto
from clients.types import Delivery, DeliveryStatus, JobState

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
C, F, T, X = JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT, JobState.CANCELLED


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("end", [C, F, T]),
        ("fail", [F, T]),
        ("all", [C, F, X, T]),
        ("cancelled,completed", [C, X]),
        (["TIMEOUT", "failed"], [F, T]),
        ("fail, end", [C, F, T]),
    ],
)
def test_words_and_states_expand_in_state_order(raw: str | list[str], expected: list[JobState]):
    assert parse_notify_on(raw) == expected


def test_none_alone_means_no_notification() -> None:
    assert parse_notify_on("none") == []
    assert parse_notify_on(["NONE"]) == []
    spec = build_spec(normalize({"workload": "resnet", "iterations": 5, "notify_on": "none"}))
    assert spec.no_notify and spec.notify_on == ()
    assert spec_from_proto(spec_to_proto(spec)) == spec


@pytest.mark.parametrize("raw", ["sometimes", "running", "", ",", "none,end"])
def test_other_words_are_refused_naming_the_key(raw: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_notify_on(raw, "--notify-on")
    assert caught.value.field == "--notify-on"


def test_a_job_files_notify_keys_reach_the_spec_and_the_wire() -> None:
    values = normalize(
        {
            "workload": "resnet",
            "iterations": 5,
            "notify": "https://x.example/h",
            "notify_on": "fail",
        }
    )
    spec = build_spec(values)
    assert spec.notify_url == "https://x.example/h" and spec.notify_on == (F, T)
    assert spec_from_proto(spec_to_proto(spec)) == spec


def _delivery(status: DeliveryStatus, attempts: int, error: str = "") -> Delivery:
    return Delivery(
        id=1,
        job_state=JobState.FAILED,
        endpoint="https://hooks.example.org",
        status=status,
        attempts=attempts,
        created_at=T0,
        last_attempt_at=T0 if attempts else None,
        next_attempt_at=T0 + timedelta(minutes=2) if status is DeliveryStatus.PENDING else None,
        delivered_at=T0 if status is DeliveryStatus.DELIVERED else None,
        last_error=error,
    )


def test_delivery_status_words_for_hctl_show() -> None:
    """Pending before the first try, retrying after a failed one (with the error and the next
    try), delivered with its time, gave up with the last error."""
    now = T0 + timedelta(minutes=1)
    assert fmt.delivery_status(_delivery(DeliveryStatus.PENDING, 0)) == "pending"
    retrying = _delivery(DeliveryStatus.PENDING, 2, "HTTP 503 Service Unavailable")
    assert fmt.delivery_status(retrying) == "retrying"
    assert fmt.delivery_detail(retrying, now).startswith("HTTP 503 Service Unavailable; next try ")
    assert fmt.delivery_status(_delivery(DeliveryStatus.DELIVERED, 1)) == "delivered"
    assert fmt.delivery_detail(_delivery(DeliveryStatus.DELIVERED, 1), now).startswith("at ")
    gave_up = _delivery(DeliveryStatus.GAVE_UP, 6, "no answer within 10s")
    assert fmt.delivery_status(gave_up) == "gave up"
    assert fmt.delivery_detail(gave_up, now) == "no answer within 10s"
