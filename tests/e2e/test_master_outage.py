"""Jobs that end while the master is down, with real processes, on SQLite and, when
HADAR_TEST_POSTGRES_URL is set, on PostgreSQL: the master is killed with SIGKILL while the
jobs run, the jobs end, and only then does the master start again."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clients.types import JobSpec, JobState, Program
from store.testing import backends, temporary_database_url
from tests.e2e.conftest import Cluster, wait_for

pytestmark = pytest.mark.e2e

DONE = {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED}
NODES = ("local-1", "local-2")


@pytest.fixture(params=backends())
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | None]:
    """None for the local cluster's own SQLite file, else a fresh PostgreSQL schema
    (dropped after the cluster is down: this fixture is set up first)."""
    if request.param == "sqlite":
        yield None
        return
    with temporary_database_url(request.param, tmp_path) as url:
        yield url


def unreported_exits(cluster: Cluster) -> set[int]:
    """Jobs whose exit reports wait in a worker's outbox."""
    jobs: set[int] = set()
    for node in NODES:
        path = cluster.local.state_dir / node / "agent" / "exits.json"
        try:
            jobs |= {int(report["jobId"]) for report in json.loads(path.read_text())}
        except (FileNotFoundError, json.JSONDecodeError):
            continue
    return jobs


def test_jobs_that_complete_while_the_master_is_down_are_completed_not_preempted(
    database: str | None, start_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    """Four commands run, each on its own GPU, until a file appears. The master is killed,
    the file is made, and the commands end while no master answers; their exit reports
    wait on the workers. The master then starts again: the workers register (before they
    send those reports) and every job ends COMPLETED, once, with no preemption and no
    "lost" event in its history."""
    cluster = start_cluster("v100:2;k80:2", database=database)
    gate = tmp_path / "go"
    wait = f"while [ ! -e {gate} ]; do sleep 0.1; done"
    ids = [
        cluster.submit_spec(
            JobSpec(
                name=f"gated-{n}",
                program=Program.command(["sh", "-c", wait]),
                iterations=1,
            )
        )
        for n in range(4)
    ]
    wait_for(
        lambda: set(ids) <= set(cluster.local.job_processes()),
        120,
        "every job's process to run",
    )
    cluster.local.kill("master", signal.SIGKILL)
    wait_for(
        lambda: not any(alive for p, alive in cluster.local.processes() if p.name == "master"),
        10,
        "the master to die",
    )
    gate.touch()
    wait_for(lambda: unreported_exits(cluster) >= set(ids), 30, "the exits to wait on the workers")
    assert not set(ids) & set(cluster.local.job_processes())

    cluster.local.restart_master()
    cluster.reconnect()
    for job_id in ids:
        job = cluster.wait_state(job_id, DONE, timeout=60)
        events = cluster.client.describe_job(job_id).events
        assert job.state == JobState.COMPLETED, (job_id, job.reason)
        assert job.preemptions == 0, (job_id, [(e.kind, e.reason) for e in events])
        assert [e.kind for e in events if e.kind == "lost"] == []
        assert not [e for e in events if e.to_state == JobState.PREEMPTED]
        assert [e.kind for e in events if e.to_state == JobState.COMPLETED] == ["completed"]
    wait_for(lambda: not unreported_exits(cluster), 30, "the workers' outboxes to empty")
