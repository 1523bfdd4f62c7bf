"""Job arrays and dependencies on a real local cluster: master and worker processes, real
command jobs, hctl as a user runs it; what ran when is read from the master's records."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from clients.types import TERMINAL_JOB_STATES, JobState
from store import Database
from store.domain import JobEvent, Task
from store.states import JobState as StoredState
from tests.e2e.conftest import Cluster, wait_for

pytestmark = pytest.mark.e2e

DONE = TERMINAL_JOB_STATES


def records(cluster: Cluster, job_ids: list[int]) -> dict[int, tuple[list[Task], list[JobEvent]]]:
    """Every task and event the master stored for these jobs."""
    database = Database(cluster.local.database_url)
    try:
        with database.transaction() as uow:
            return {j: (uow.tasks.for_job(j), uow.jobs.events(j)) for j in job_ids}
    finally:
        database.dispose()


def most_at_once(spans: list[tuple[datetime, datetime]]) -> int:
    """The largest number of spans that overlap at one instant (an end before a start at
    the same instant: a freed GPU is reused)."""
    points = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    best = current = 0
    for _, step in points:
        current += step
        best = max(best, current)
    return best


def test_an_array_capped_at_4_never_runs_more_than_4_and_a_dependent_starts_after_its_dependency(
    start_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    """`hctl submit --array 0-15%4` on 8 GPUs: all 16 elements complete, each wrote its own
    HADAR_ARRAY_INDEX to its own %A_%a output file, and the master's task records show at
    most 4 elements holding GPUs at any instant (and 4 at some instant: the cap, not the
    cluster, was the limit). `hctl queue` folds the waiting elements into one line and
    `hctl wait` on the array's id waits for all of them. A job submitted with
    --after-ok on a running job is first placed only after that job's COMPLETED event."""
    cluster = start_cluster("v100:8")
    out = tmp_path / "out"
    out.mkdir()
    array = cluster.submit_argv(
        "--array",
        "0-15%4",
        "--name",
        "sweep",
        "--iterations",
        "1",
        "--workdir",
        str(out),
        "--output",
        "sweep-%A_%a.out",
        "--",
        "sh",
        "-c",
        'echo "index=$HADAR_ARRAY_INDEX array=$HADAR_ARRAY_JOB_ID"; sleep 2',
    )
    first = cluster.submit_argv("--iterations", "1", "--name", "prep", "--", "sh", "-c", "sleep 4")
    dependent = cluster.submit_argv(
        "--iterations",
        "1",
        "--name",
        "train",
        "--after-ok",
        str(first),
        "--",
        "sh",
        "-c",
        "true",
    )
    queue = cluster.hctl("queue")
    assert queue.returncode == 0, queue.stderr
    assert re.search(rf"^{array}_\[\d+(-\d+)?(,\d+(-\d+)?)*%4\]\s+sweep", queue.stdout, re.M), (
        queue.stdout
    )
    listed = json.loads(cluster.hctl("queue", "--all", "--json").stdout)["jobs"]
    assert len([j for j in listed if j["spec"]["array_job_id"] == array]) == 16

    waited = cluster.hctl("wait", str(array), "--timeout", "240")
    assert waited.returncode == 0, (waited.returncode, waited.stdout, waited.stderr)
    assert "16 elements ended: 16 completed" in waited.stdout, waited.stdout
    ended = cluster.wait_state(dependent, DONE, timeout=120)
    assert ended.state == JobState.COMPLETED, ended.reason

    elements = sorted(cluster.client.array_elements(array), key=lambda j: j.spec.array_index or 0)
    assert [e.spec.array_index for e in elements] == list(range(16))
    assert all(e.state is JobState.COMPLETED for e in elements)
    for element in elements:
        written = (out / f"sweep-{array}_{element.spec.array_index}.out").read_text()
        assert f"index={element.spec.array_index} array={array}" in written

    stored = records(cluster, [e.id for e in elements] + [first, dependent])

    def finished() -> bool:
        again = records(cluster, [e.id for e in elements])
        return all(t.finished_at is not None for tasks, _ in again.values() for t in tasks)

    wait_for(finished, 60, "every element's task to end")
    stored.update(records(cluster, [e.id for e in elements]))
    spans: list[tuple[datetime, datetime]] = []
    for element in elements:
        tasks, _ = stored[element.id]
        assert tasks, element.id
        for task in tasks:
            assert task.finished_at is not None
            spans.append((task.created_at, task.finished_at))
    assert most_at_once(spans) == 4, spans

    # The dependent's first placement comes after its dependency's completion.
    first_tasks, first_events = stored[first]
    dependent_tasks, dependent_events = stored[dependent]
    completed_at = next(e.at for e in first_events if e.to_state is StoredState.COMPLETED)
    assert dependent_tasks
    assert min(t.created_at for t in dependent_tasks) >= completed_at
    started_at = next(e.at for e in dependent_events if e.to_state is StoredState.RUNNING)
    assert started_at >= completed_at
    assert first_tasks and min(t.created_at for t in first_tasks) < completed_at
