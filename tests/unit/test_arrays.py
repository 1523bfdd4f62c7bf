"""Job arrays and dependencies as people write them: sbatch's --array and --dependency
forms, element ids, and refusals."""

from __future__ import annotations

import pytest

from protos.arrays import (
    ArraySpec,
    JobRef,
    dependency_text,
    fold_indices,
    parse_array,
    parse_dependency,
    parse_job_ids,
    parse_job_ref,
)


@pytest.mark.parametrize(
    ("text", "indices", "cap"),
    [
        ("0-31%4", tuple(range(32)), 4),
        ("1,3,5", (1, 3, 5), 0),
        ("0-15:4", (0, 4, 8, 12), 0),
        ("7", (7,), 0),
        ("0-3,2-5%2", (0, 1, 2, 3, 4, 5), 2),  # overlaps count once
        (" 1-2 , 9 ", (1, 2, 9), 0),
        ("0-10:3%1", (0, 3, 6, 9), 1),
    ],
)
def test_accepted_forms(text: str, indices: tuple[int, ...], cap: int) -> None:
    """Ranges, lists, steps and %N give the indices and cap Slurm means."""
    assert parse_array(text) == ArraySpec(indices, cap)


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("", "empty"),
        ("5-1", "ends before it starts"),
        ("1-x", "is not an index or range"),
        ("0-4%0", "limit after %"),
        ("0-4%", "limit after %"),
        ("0-4%-2", "limit after %"),
        ("0-8:0", "step"),
        ("-3", "is not an index or range"),
        ("1,,2", "is not an index or range"),
        ("0-99999999", "at most"),
    ],
)
def test_malformed_specs_are_refused_saying_why(text: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_array(text)


def test_the_cluster_maximum_counts_elements_before_building_them() -> None:
    """max_size refuses a larger array (with the setting's name) without enumerating it."""
    assert len(parse_array("0-999", max_size=1000).indices) == 1000
    with pytest.raises(ValueError, match="max_array_size"):
        parse_array("0-1000", max_size=1000)
    with pytest.raises(ValueError, match="max_array_size"):
        parse_array("0-3999999", max_size=1000)


def test_folding_writes_runs_as_ranges_and_round_trips() -> None:
    assert fold_indices([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    assert fold_indices([]) == ""
    spec = parse_array("0-15:4,20-22%3")
    assert str(spec) == "0,4,8,12,20-22%3"
    assert parse_array(str(spec)) == spec


def test_job_references() -> None:
    """`12` is a job (or a whole array), `12_3` an element; anything else is refused."""
    assert parse_job_ref("12") == JobRef(12)
    assert parse_job_ref("12_3") == JobRef(12, 3)
    assert str(JobRef(12, 3)) == "12_3"
    for bad in ("0", "x", "12_", "_3", "12_3_4", "-1", "0_1"):
        with pytest.raises(ValueError, match="not a job id"):
            parse_job_ref(bad)


def test_dependencies_as_sbatch_writes_them() -> None:
    pairs = parse_dependency("afterok:1:2,afterany:3,afternotok:4")
    assert pairs == [("afterok", 1), ("afterok", 2), ("afterany", 3), ("afterfail", 4)]
    assert dependency_text(pairs) == "afterok:1:2,afterany:3,afterfail:4"
    for bad in ("after:1", "afterok", "afterok:x", "singleton", "afterok:0"):
        with pytest.raises(ValueError):
            parse_dependency(bad)
    assert parse_job_ids("4, 5,6") == [4, 5, 6]
    with pytest.raises(ValueError, match="not a job id"):
        parse_job_ids("4,,5")
