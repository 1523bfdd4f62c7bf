"""The local cluster's record (cluster.json) keeps its dashboard, and reads records written
before there was one."""

from __future__ import annotations

import json

from clients.localcluster import ClusterRecord, ProcessRecord


def test_a_record_with_a_dashboard_round_trips() -> None:
    """The dashboard's process and URL survive writing and reading cluster.json."""
    record = ClusterRecord(
        state_dir="/tmp/c",
        master=ProcessRecord("master", 10, "/tmp/c/master.log", "127.0.0.1:5000"),
        dashboard=ProcessRecord("dashboard", 12, "/tmp/c/dashboard.log", "127.0.0.1:8080"),
    )
    again = ClusterRecord.from_json(record.to_json())
    assert again == record
    assert again.dashboard_url == "http://127.0.0.1:8080"


def test_a_record_from_before_the_dashboard_reads_as_none() -> None:
    """An older cluster.json without the key has no dashboard and an empty URL."""
    raw = json.loads(
        ClusterRecord("/tmp/c", ProcessRecord("master", 10, "log", "127.0.0.1:1")).to_json()
    )
    del raw["dashboard"]
    record = ClusterRecord.from_json(json.dumps(raw))
    assert record.dashboard is None
    assert record.dashboard_url == ""
