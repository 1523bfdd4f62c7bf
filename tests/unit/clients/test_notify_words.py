"""hctl's --notify-on and a job file's notify_on: Slurm-like words and end states."""

from __future__ import annotations

import pytest

from clients.cli.jobfile import SpecError, build_spec, normalize, parse_notify_on
from clients.convert import spec_from_proto, spec_to_proto
from clients.types import JobState

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


@pytest.mark.parametrize("raw", ["sometimes", "running", "", ","])
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
