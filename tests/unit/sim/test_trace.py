"""Trace readers and cluster specs: formats, defaults and errors that name file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from master.sim.cluster_spec import build_cluster, parse_cluster_spec
from master.sim.trace import (
    TraceError,
    TraceJob,
    read_csv_trace,
    read_gavel_trace,
    read_trace,
    write_csv_trace,
)
from tests.unit.sim.gavel_data import TRACES

GAVEL_LINE = (
    "ResNet-18 (batch size 128)\tpython3 main.py\timage_classification/cifar10\t"
    "--num_steps\t1\t36030\t{sf}\t1\t-1.000000\t{arrival}\n"
)


def test_reads_gavel_traces_as_published() -> None:
    """Gavel's 96-job trace: ids in line order, scale factor = GPUs, batch from the type."""
    jobs = read_gavel_trace(TRACES / "max_min_fairness.trace")
    assert len(jobs) == 96
    first = jobs[0]
    assert first.id == 0 and first.job_type == "ResNet-18 (batch size 128)"
    assert first.num_gpus == 4 and first.iterations == 925982 and first.batch_size == 128
    assert sorted({j.num_gpus for j in jobs}) == [1, 2, 4]
    assert [j.arrival_s for j in jobs] == sorted(j.arrival_s for j in jobs)


def test_corrupt_gavel_line_names_file_and_line(tmp_path: Path) -> None:
    """A bad scale factor on line 2 is reported as trace:2 with the column's name."""
    path = tmp_path / "bad.trace"
    path.write_text(GAVEL_LINE.format(sf=1, arrival=0) + GAVEL_LINE.format(sf="x", arrival=5))
    with pytest.raises(TraceError, match=r"bad\.trace:2: scale_factor is not a whole number"):
        read_gavel_trace(path)
    path.write_text(GAVEL_LINE.format(sf=1, arrival=0).replace("\t", " ", 3))
    with pytest.raises(TraceError, match=r"bad\.trace:1: expected 10 tab-separated columns"):
        read_gavel_trace(path)


def test_csv_trace_defaults_and_duration(tmp_path: Path) -> None:
    """CSV rows take defaults for optional columns; duration_s and allowed types parse."""
    path = tmp_path / "jobs.csv"
    path.write_text(
        "job_id,arrival_s,job_type,num_gpus,iterations,duration_s,user,priority,"
        "allowed_gpu_types,preemptible,shareable\n"
        "7,0,ResNet-18 (batch size 64),1,1000,,ann,,,,\n"
        "3,12.5,Transformer (batch size 16),2,,600,bob,2,v100|p100,no,yes\n"
    )
    jobs = read_csv_trace(path)
    assert [j.id for j in jobs] == [7, 3]
    a, b = jobs
    assert a.iterations == 1000 and a.duration_s is None and a.priority == 1.0
    assert a.batch_size == 64 and a.preemptible and not a.shareable
    assert b.iterations is None and b.duration_s == 600 and b.priority == 2.0
    assert b.allowed_gpu_types == frozenset({"v100", "p100"})
    assert not b.preemptible and b.shareable and b.user == "bob"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("1,0,a,0,10,,,", "num_gpus must be >= 1"),
        ("1,0,a,1,,,,", "give exactly one of iterations and duration_s"),
        ("1,0,a,1,10,5,,", "give exactly one of iterations and duration_s"),
        ("1,-3,a,1,10,,,", "arrival_s must be >= 0"),
        ("x,0,a,1,10,,,", "job_id is not a whole number"),
        ("1,0,,1,10,,,", "empty job_type"),
        ("1,0,a,1,nan,,,", "iterations must be finite"),
        ("1,0,a,1,10,,,0", "priority must be > 0"),
    ],
)
def test_corrupt_csv_rows_name_file_and_line(tmp_path: Path, row: str, message: str) -> None:
    """Each malformed row is reported as file:line with what is wrong."""
    path = tmp_path / "t.csv"
    path.write_text(
        "job_id,arrival_s,job_type,num_gpus,iterations,duration_s,user,priority\n"
        "0,0,a,1,10,,,\n" + row + "\n"
    )
    with pytest.raises(TraceError, match=rf"t\.csv:3: .*{message}"):
        read_csv_trace(path)


def test_the_forkable_column_marks_jobs_and_a_bad_value_names_line_and_column(
    tmp_path: Path,
) -> None:
    """`forkable` is optional (false when absent or empty); true/yes/1 mark a job; anything
    else is refused as file:line naming the column and the value. Gavel traces mark none."""
    path = tmp_path / "t.csv"
    path.write_text(
        "job_id,arrival_s,job_type,num_gpus,iterations,forkable\n0,0,a,1,10,yes\n1,0,a,1,10,\n"
    )
    assert [j.forkable for j in read_csv_trace(path)] == [True, False]
    path.write_text("job_id,arrival_s,job_type,num_gpus,iterations,forkable\n0,0,a,1,10,maybe\n")
    with pytest.raises(TraceError, match=r"t\.csv:2: forkable must be true or false, got 'maybe'"):
        read_csv_trace(path)
    assert not any(j.forkable for j in read_gavel_trace(TRACES / "max_min_fairness.trace"))


def test_csv_header_and_duplicates(tmp_path: Path) -> None:
    """A header without required columns, or a repeated job id, is refused."""
    path = tmp_path / "t.csv"
    path.write_text("job_id,job_type\n1,a\n")
    with pytest.raises(TraceError, match=r"t\.csv:1: CSV header lacks column\(s\): arrival_s"):
        read_csv_trace(path)
    path.write_text("job_id,arrival_s,job_type,num_gpus,iterations\n1,0,a,1,5\n1,0,a,1,5\n")
    with pytest.raises(TraceError, match=r"t\.csv:3: duplicate job_id 1"):
        read_csv_trace(path)
    with pytest.raises(TraceError, match="not found"):
        read_trace(tmp_path / "missing.csv")


def test_csv_round_trip(tmp_path: Path) -> None:
    """write_csv_trace output reads back to the same jobs."""
    jobs = [
        TraceJob(0, 0.0, "a", 1, 100.0, user="u", allowed_gpu_types=frozenset({"k80"})),
        TraceJob(1, 5.5, "b", 4, None, duration_s=60.0, priority=3.0, shareable=True),
        TraceJob(2, 6.0, "c", 2, 50.0, forkable=True),
        TraceJob(3, 7.0, "a", 1, 80.0, submitted_iterations=200.0),
    ]
    path = tmp_path / "out.csv"
    write_csv_trace(path, jobs)
    assert read_trace(path) == jobs


def test_cluster_specs() -> None:
    """Specs parse in order, allow 0 counts, and reject malformed entries clearly."""
    assert parse_cluster_spec("v100:2,p100:0,k80:4") == {"v100": 2, "p100": 0, "k80": 4}
    cluster = build_cluster("v100:6,k80:4", gpus_per_server=4)
    assert [len(n.gpus) for n in cluster.nodes] == [4, 2, 4]
    for bad, message in [
        ("v100", "expected TYPE:COUNT"),
        ("v100:x", "bad GPU count"),
        ("v100:-1", "negative"),
        ("v100:1,v100:2", "listed twice"),
        ("v100:0", "has no GPUs"),
        ("", "empty cluster spec"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_cluster_spec(bad)


def test_submitted_iterations_column_is_read_and_checked(tmp_path: Path) -> None:
    """The users' estimate is optional; a bad one names the line."""
    path = tmp_path / "est.csv"
    path.write_text(
        "job_id,arrival_s,job_type,num_gpus,iterations,submitted_iterations\n"
        "0,0,a,1,100,400\n1,0,a,1,100,\n"
    )
    first, second = read_trace(path)
    assert first.submitted_iterations == 400.0 and second.submitted_iterations is None
    path.write_text(
        "job_id,arrival_s,job_type,num_gpus,iterations,submitted_iterations\n0,0,a,1,100,-3\n"
    )
    with pytest.raises(TraceError, match=r"est.csv:2: submitted_iterations must be > 0"):
        read_trace(path)
