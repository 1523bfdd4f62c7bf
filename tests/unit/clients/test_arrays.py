"""hctl's arrays and dependencies: job-file and flag keys, element ids, and squeue's
folding of an array's pending elements."""

from __future__ import annotations

from dataclasses import replace

import pytest

from clients.cli.arrays import display_id, queue_rows
from clients.cli.jobfile import SpecError, build_spec, normalize
from clients.cli.main import build_parser
from clients.types import Dependency, Job, JobState
from tests.unit.clients.test_format import make_job


def element(job_id: int, array: int, index: int, state: JobState, spec: str = "0-5%2") -> Job:
    job = make_job(id=job_id, state=state)
    return replace(job, spec=replace(job.spec, array=spec, array_job_id=array, array_index=index))


def test_job_file_keys_for_arrays_and_dependencies() -> None:
    """`array`, `after_ok`/`after_any`/`after_fail` (lists or comma lists) and sbatch's
    `dependency` all land in the spec, each dependency once."""
    values = normalize(
        {
            "iterations": 1,
            "command": "true",
            "array": "0-15:4%2",
            "after_ok": [3, 4],
            "after_any": "5",
            "after_fail": 6,
            "dependency": "afterok:3,afternotok:7",
        }
    )
    spec = build_spec(values)
    assert spec.array == "0,4,8,12%2"
    assert spec.dependencies == (
        Dependency("afterok", 3),
        Dependency("afterok", 4),
        Dependency("afterany", 5),
        Dependency("afterfail", 6),
        Dependency("afterfail", 7),
    )


@pytest.mark.parametrize(
    ("key", "value", "complaint"),
    [
        ("array", "5-1", "ends before it starts"),
        ("after_ok", "3,x", "not a job id"),
        ("dependency", "after:3", "not a dependency"),
    ],
)
def test_bad_array_and_dependency_values_name_the_key(key: str, value: str, complaint: str) -> None:
    with pytest.raises(SpecError, match=complaint) as caught:
        normalize({key: value})
    assert caught.value.field == key


def test_submit_flags_reach_the_spec() -> None:
    """--array, the --after-* flags (repeatable) and -d go through the same checks."""
    from clients.cli.jobs import spec_values_from_flags

    args = build_parser().parse_args(
        [
            "submit",
            "--iterations",
            "1",
            "--array",
            "0-31%4",
            "--after-ok",
            "3,4",
            "--after-ok",
            "5",
            "-d",
            "afterany:6",
            "--",
            "true",
        ]
    )
    spec = build_spec(spec_values_from_flags(args))
    assert spec.array == "0-31%4"
    assert [(d.kind, d.job_id) for d in spec.dependencies] == [
        ("afterok", 3),
        ("afterok", 4),
        ("afterok", 5),
        ("afterany", 6),
    ]


def test_element_ids_and_queue_folding() -> None:
    """Pending elements fold into `12_[2-5%2]` where the first of them stands; running and
    ended elements keep a line each; --expand lists every element; a lone pending element
    is shown as itself."""
    jobs = [
        element(12, 12, 0, JobState.COMPLETED),
        element(13, 12, 1, JobState.RUNNING),
        element(14, 12, 2, JobState.PENDING),
        element(15, 12, 3, JobState.PENDING),
        make_job(id=16),
        element(17, 12, 4, JobState.PENDING),
        element(18, 12, 5, JobState.PENDING),
        element(19, 19, 0, JobState.PENDING, "0"),
    ]
    assert display_id(jobs[1]) == "12_1" and display_id(jobs[4]) == "16"
    folded = queue_rows(jobs, expand=False)
    assert [r.shown_id for r in folded] == ["12_0", "12_1", "12_[2-5%2]", "16", "19_0"]
    assert folded[2].count == 4
    expanded = queue_rows(jobs, expand=True)
    assert [r.shown_id for r in expanded] == [
        "12_0",
        "12_1",
        "12_2",
        "12_3",
        "16",
        "12_4",
        "12_5",
        "19_0",
    ]
