"""The master's default policy under faults: ten jobs on a real local cluster while the
master and then a worker agent are killed with SIGKILL and started again, on SQLite and,
when HADAR_TEST_POSTGRES_URL is set, on PostgreSQL.

Each run prints its figures (wall time, and per job its placements and migrations) and
writes them as JSON to ``$HADAR_E2E_FIGURES`` when that names a file; docs/benchmarks.md
("Faults under the default policy") records a run.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.localcluster import LocalCluster, parse_worker_groups
from clients.types import Job, JobState
from master.settings import Settings
from store.testing import backends, temporary_database_url
from tests.e2e.conftest import ROUND_S, Cluster, TwiceWatcher, wait_for

pytestmark = pytest.mark.e2e

DONE = {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED}
DEADLINE_S = 600.0

#: (workload, iterations, forkable): small jobs, a few of them allowed to run as copies.
JOBS = [
    ("recommendation", 400, False),
    ("lstm", 120, True),
    ("resnet", 50, False),
    ("transformer", 80, False),
    ("recommendation", 300, True),
    ("lstm", 100, False),
    ("resnet", 40, True),
    ("transformer", 60, False),
    ("recommendation", 250, False),
    ("lstm", 80, False),
]


@pytest.fixture(params=backends())
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A local cluster (v100:2, p100:2, k80:2 on three workers) under the default policy,
    its master on a fresh database of the backend."""
    with temporary_database_url(request.param, tmp_path) as url:
        local = LocalCluster(tmp_path / "cluster", database_url=url)
        local.up(
            parse_worker_groups("v100:2;p100:2;k80:2"),
            policy=Settings().policy,
            round_seconds=ROUND_S,
            timeout=120,
        )
        started = Cluster(local)
        try:
            yield started
        finally:
            started.reconnect()
            local.down(timeout=10)


def _figures(cluster: Cluster, jobs: list[Job], wall_s: float, policy: str) -> dict[str, object]:
    """Per job its migrations, resizes (moves: each a checkpoint and a restart) and
    preemptions, with why each preemption happened."""
    per_job: dict[str, dict[str, object]] = {}
    for job in jobs:
        events = cluster.client.describe_job(job.id).events
        per_job[str(job.id)] = {
            "workload": job.spec.name,
            "migrations": job.migrations,
            "resizes": sum(e.kind == "resized" for e in events),
            "preemptions": job.preemptions,
            "preempted": [e.reason for e in events if e.to_state == JobState.PREEMPTED],
        }
    moves = sum(int(f["migrations"]) + int(f["resizes"]) for f in per_job.values())  # type: ignore[call-overload]
    return {
        "policy": policy,
        "jobs": len(jobs),
        "wall_s": round(wall_s, 1),
        "migrations": sum(job.migrations for job in jobs),
        "moves_per_job": round(moves / len(jobs), 2),
        "preemptions": sum(job.preemptions for job in jobs),
        "per_job": per_job,
    }


def test_the_default_policy_completes_every_job_once_through_master_and_worker_kills(
    cluster: Cluster,
) -> None:
    """Ten jobs under the default policy (some forkable, so copies run too). Once jobs run,
    the master is killed with SIGKILL and started again on the same database; once it has
    placed work on the first worker, that worker's agent is killed with SIGKILL and started
    again (it adopts the job processes it left). Every job completes exactly once with
    exactly its iterations within 10 minutes, no job ever runs under two leases at once,
    and the migrations per job stay low."""
    policy = Settings().policy
    begun = time.monotonic()
    with TwiceWatcher(cluster.local) as watcher:
        ids = [
            cluster.submit(workload, iterations=n, forkable=forkable)
            for workload, n, forkable in JOBS
        ]
        wait_for(
            lambda: sum(cluster.job(i).state == JobState.RUNNING for i in ids) >= 3,
            180,
            "three jobs to run",
        )
        cluster.local.kill("master", signal.SIGKILL)
        wait_for(
            lambda: not any(alive for p, alive in cluster.local.processes() if p.name == "master"),
            10,
            "the master to die",
        )
        cluster.local.restart_master()
        cluster.reconnect()

        victim = "local-1"

        def runs_on_victim() -> bool:
            return any(
                task.node == victim
                for i in ids
                for task in cluster.job(i).tasks
                if cluster.job(i).state == JobState.RUNNING
            )

        wait_for(runs_on_victim, 120, f"a job to run on {victim}")
        cluster.local.kill(victim, signal.SIGKILL)
        wait_for(
            lambda: not any(alive for p, alive in cluster.local.processes() if p.name == victim),
            10,
            f"{victim} to die",
        )
        cluster.local.restart_worker(victim)

        remaining = DEADLINE_S - (time.monotonic() - begun)
        jobs = [cluster.wait_state(i, DONE, timeout=max(1.0, remaining)) for i in ids]
    wall_s = time.monotonic() - begun
    figures = _figures(cluster, jobs, wall_s, policy)
    print(json.dumps(figures, indent=2))
    target = os.environ.get("HADAR_E2E_FIGURES")
    if target:
        Path(target).write_text(json.dumps(figures, indent=2) + "\n")

    assert wall_s <= DEADLINE_S
    for job in jobs:
        assert job.state == JobState.COMPLETED, (job.id, job.state, job.reason)
        assert job.iterations_done == job.spec.iterations, job.id
        completions = [
            e
            for e in cluster.client.describe_job(job.id).events
            if e.to_state == JobState.COMPLETED
        ]
        assert len(completions) == 1, (job.id, completions)
    assert len(cluster.client.list_jobs()) == len(JOBS)
    assert watcher.samples > 10
    assert watcher.violations == []
    # A move costs a checkpoint and a restart: the default policy makes few.
    assert figures["moves_per_job"] <= 2, figures  # type: ignore[operator]
