"""Which running jobs rounds may stop, move, resize or fork, and which stay where they are."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from master.rounds import keep_non_preemptible
from master.scheduling.plan import Allocation, GpuSlot, Plan
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView, Snapshot
from master.snapshot import RoundInput, preemptible
from store.domain import Job, JobSpec
from store.states import JobState, ProgramKind

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
CLUSTER = ClusterView.from_counts({"k80": 1, "v100": 1}, gpus_per_server=1)
K80 = GpuSlot("k80-000", 0)
V100 = GpuSlot("v100-000", 0)


def make_job(
    job_id: int,
    kind: ProgramKind,
    *,
    reports_progress: bool = False,
    spec_preemptible: bool | None = None,
) -> Job:
    spec = JobSpec(
        name=f"job-{job_id}",
        num_gpus=1,
        iterations=1000,
        program_kind=kind,
        workload="resnet" if kind is ProgramKind.WORKLOAD else "",
        argv=() if kind is ProgramKind.WORKLOAD else ("python3", "train.py"),
        preemptible=kind is not ProgramKind.COMMAND
        if spec_preemptible is None
        else spec_preemptible,
        job_type="resnet",
    )
    return Job(
        id=job_id,
        user="alice",
        spec=spec,
        state=JobState.RUNNING,
        reason="",
        iterations_done=0,
        checkpoint_iterations=0,
        attained_service=0.0,
        retries=0,
        exit_code=None,
        preemptions=0,
        migrations=0,
        submitted_at=NOW,
        started_at=NOW,
        finished_at=None,
        version=1,
        reports_progress=reports_progress,
    )


@pytest.mark.parametrize(
    ("kind", "reports_progress", "spec_preemptible", "expected"),
    [
        (ProgramKind.WORKLOAD, False, None, True),
        (ProgramKind.WORKLOAD, True, False, False),
        (ProgramKind.SCRIPT, False, None, False),
        (ProgramKind.SCRIPT, True, None, True),
        (ProgramKind.SCRIPT, True, False, False),
        (ProgramKind.COMMAND, False, None, False),
    ],
)
def test_a_script_is_preemptible_only_once_it_has_reported_progress(
    kind: ProgramKind, reports_progress: bool, spec_preemptible: bool | None, expected: bool
) -> None:
    """Workloads are managed from the start and commands never are; a script counts as using
    the runtime helper only after its first progress report, and a spec that says not
    preemptible always wins."""
    job = make_job(1, kind, reports_progress=reports_progress, spec_preemptible=spec_preemptible)
    assert preemptible(job) is expected


def round_input(script: Job, other: Job) -> RoundInput:
    snapshot = Snapshot(CLUSTER, (), 2, 60.0, ThroughputModel({}))
    return RoundInput(
        snapshot=snapshot,
        jobs={script.id: script, other.id: other},
        current={script.id: Allocation.on((K80,), 32)},
        tasks={},
        nodes={},
    )


def test_a_running_script_that_never_reported_progress_keeps_its_gpus() -> None:
    """A plan that moves a running plain script to a faster GPU and gives its GPU to another
    job is overruled: the script keeps its GPU and the other job waits, saying why."""
    script = make_job(1, ProgramKind.SCRIPT)
    other = make_job(2, ProgramKind.WORKLOAD)
    plan = Plan({1: Allocation.on((V100,), 32), 2: Allocation.on((K80,), 32)})
    kept = keep_non_preemptible(round_input(script, other), plan)
    assert dict(kept.allocations) == {1: Allocation.on((K80,), 32)}
    assert kept.reason(2) == "waiting: GPUs held by job 1 (not preemptible)"


def test_a_running_script_that_reported_progress_follows_the_plan() -> None:
    """Once the script has reported progress it uses the runtime helper: the plan stands."""
    script = replace(make_job(1, ProgramKind.SCRIPT), reports_progress=True)
    other = make_job(2, ProgramKind.WORKLOAD)
    plan = Plan({1: Allocation.on((V100,), 32), 2: Allocation.on((K80,), 32)})
    assert keep_non_preemptible(round_input(script, other), plan) == plan
