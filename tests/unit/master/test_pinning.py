"""Which running jobs rounds may stop, move, resize or fork (master.rounds.snapshot.preemptible);
what the round does with the others is in tests/unit/scheduling/test_round.py."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from master.rounds.snapshot import preemptible
from store.domain import Job, JobSpec
from store.states import JobState, ProgramKind

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


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


def test_an_interactive_session_is_never_preemptible() -> None:
    """Whatever its spec's preemptible flag says, a session is pinned where it runs."""
    job = make_job(1, ProgramKind.COMMAND, spec_preemptible=True)
    assert preemptible(job)
    session = replace(job, spec=replace(job.spec, interactive=True))
    assert not preemptible(session)
