"""--json encoding and the documented shapes it is checked against."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from clients.cli import shapes
from clients.types import ClusterStatus, GpuTypeSummary, JobState, Program
from tests.unit.clients.test_format import make_job


def test_a_job_encodes_to_its_documented_shape():
    """Enums become lowercase strings, times RFC 3339 with Z, tuples lists, None null."""
    job = make_job(started_at=datetime(2026, 3, 14, 11, 0, 0, 250000, tzinfo=UTC))
    document = json.loads(shapes.dumps({"jobs": [job]}))
    assert shapes.check(document, shapes.OUTPUTS["queue"]) == []
    encoded = document["jobs"][0]
    assert encoded["state"] == "pending"
    assert encoded["started_at"] == "2026-03-14T11:00:00.250000Z"
    assert encoded["submitted_at"] == "2026-03-14T11:55:00Z"
    assert encoded["finished_at"] is None
    assert encoded["spec"]["program"] == {"kind": "workload", "workload": "resnet", "argv": []}


def test_cluster_status_job_counts_are_keyed_by_state_name():
    """The per-state job counts read {"running": 3}."""
    status = ClusterStatus(
        gpus=(GpuTypeSummary("v100", 4, 1, 3, 0),),
        jobs={JobState.RUNNING: 1, JobState.PENDING: 2},
        last_round=None,
        policy="fifo",
        round_seconds=60.0,
        version="0.1.0",
        nodes_ready=1,
        nodes_total=1,
        next_round_at=None,
    )
    document = json.loads(shapes.dumps({"master": "m:1", "status": status, "queue_length": 2}))
    assert shapes.check(document, shapes.OUTPUTS["status"]) == []
    assert document["status"]["jobs"] == {"running": 1, "pending": 2}


def test_the_checker_reports_missing_extra_and_mistyped_keys():
    """A departure from the documented shape is named with its path."""
    job = json.loads(shapes.dumps({"jobs": [make_job()]}))
    del job["jobs"][0]["user"]
    job["jobs"][0]["surprise"] = 1
    job["jobs"][0]["id"] = "7"
    job["jobs"][0]["state"] = "sleeping"
    job["jobs"][0]["submitted_at"] = "yesterday"
    problems = shapes.check(job, shapes.OUTPUTS["queue"])
    assert "$.jobs[0]: Job lacks user" in problems
    assert "$.jobs[0]: Job has undocumented surprise" in problems
    assert "$.jobs[0].id: expected integer, got '7'" in problems
    assert any(p.startswith("$.jobs[0].state: 'sleeping' is not one of") for p in problems)
    assert "$.jobs[0].submitted_at: expected time, got 'yesterday'" in problems


def test_nan_becomes_null():
    """JSON has no NaN; unknown numbers are null."""
    assert shapes.encode(float("nan")) is None
    assert shapes.encode(Program.command(["a"])) == {
        "kind": "command",
        "workload": "",
        "argv": ["a"],
    }


def test_every_output_shape_is_described_for_the_docs():
    """Each documented object has a one-line type per key."""
    objects = shapes.named_objects(list(shapes.OUTPUTS.values()))
    names = {o.name for o in objects}
    assert {"Job", "JobSpec", "Task", "Node", "Gpu", "ClusterStatus", "TokenInfo"} <= names
    job = next(o for o in objects if o.name == "Job")
    described = {k: shapes.describe(v) for k, v in job.fields}
    assert described["tasks"] == "[Task]"
    assert described["exit_code"] == "integer | null"
    assert described["started_at"] == "string (RFC 3339, UTC) | null"
