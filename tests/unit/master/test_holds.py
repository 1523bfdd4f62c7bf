"""Which jobs are held back from the policies: user holds, array caps and dependencies (pure
rules)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from master.jobs.holds import array_cap_holds, dependency_state, user_holds
from store.domain import Job, JobSpec
from store.states import JobState, ProgramKind

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def job(
    job_id: int,
    state: JobState = JobState.PENDING,
    *,
    array: int = 0,
    index: int | None = None,
    cap: int = 0,
    deps: tuple[tuple[str, int], ...] = (),
) -> Job:
    spec = JobSpec(
        name="j",
        num_gpus=1,
        iterations=1,
        program_kind=ProgramKind.COMMAND,
        argv=("true",),
        array_job_id=array,
        array_index=index,
        array_max_running=cap,
        dependencies=deps,
    )
    return Job(
        id=job_id,
        user="alice",
        spec=spec,
        state=state,
        reason="",
        iterations_done=0,
        checkpoint_iterations=0,
        attained_service=0.0,
        retries=0,
        exit_code=None,
        preemptions=0,
        migrations=0,
        submitted_at=T0,
        started_at=None,
        finished_at=None,
        version=1,
    )


def test_the_cap_offers_only_the_room_left_lowest_index_and_preempted_first() -> None:
    """%3 with one element running leaves room for two: the preempted element first (it has
    progress), then the lowest index; the rest are held with the array's reason."""
    jobs = [
        job(10, JobState.RUNNING, array=10, index=0, cap=3),
        job(11, array=10, index=1, cap=3),
        job(12, array=10, index=2, cap=3),
        job(13, JobState.PREEMPTED, array=10, index=3, cap=3),
        job(14, array=10, index=4, cap=3),
        job(15, JobState.COMPLETED, array=10, index=5, cap=3),
        job(20),
    ]
    held = array_cap_holds(jobs, frozenset())
    assert held == {
        12: "waiting: array 10 at its limit of 3 running",
        14: "waiting: array 10 at its limit of 3 running",
    }


def test_a_full_array_offers_none_and_an_uncapped_array_all() -> None:
    full = [job(1, JobState.RUNNING, array=1, index=0, cap=1), job(2, array=1, index=1, cap=1)]
    assert set(array_cap_holds(full, frozenset())) == {2}
    free = [job(1, JobState.RUNNING, array=1, index=0), job(2, array=1, index=1)]
    assert array_cap_holds(free, frozenset()) == {}


def test_elements_held_for_dependencies_do_not_use_the_caps_room() -> None:
    jobs = [job(1, array=1, index=0, cap=1), job(2, array=1, index=1, cap=1)]
    assert set(array_cap_holds(jobs, frozenset({1}))) == set()


def test_dependency_states() -> None:
    """afterok waits for COMPLETED and breaks on any other end; afterany waits for any end;
    afterfail needs an unsuccessful end and breaks on COMPLETED; an array stands for all
    its elements."""
    done, failed, running = (
        job(1, JobState.COMPLETED),
        job(2, JobState.FAILED),
        job(3, JobState.RUNNING),
    )
    targets = {1: [done], 2: [failed], 3: [running], 9: [done, running], 8: [done, failed]}

    def state(*deps: tuple[str, int]) -> tuple[str, str]:
        return dependency_state(job(100, deps=deps), targets)

    assert state(("afterok", 1)) == ("", "")
    assert state(("afterok", 3)) == ("waiting for job 3 (afterok)", "")
    assert state(("afterok", 2))[1].endswith("job 2 ended FAILED")
    assert state(("afterany", 2)) == ("", "")
    assert state(("afterany", 3)) == ("waiting for job 3 (afterany)", "")
    assert state(("afterfail", 2)) == ("", "")
    assert state(("afterfail", 1))[1].endswith("job 1 ended COMPLETED")
    assert state(("afterok", 9)) == ("waiting for job 9 (afterok)", "")
    # One failed element breaks afterok at once, before the others end.
    assert state(("afterok", 8))[1].startswith("dependency afterok:8 can never be satisfied")
    assert state(("afterfail", 8)) == ("", "")
    assert state(("afterok", 1), ("afterany", 3)) == ("waiting for job 3 (afterany)", "")


def test_user_holds_keep_waiting_jobs_back_and_say_how_to_release_them() -> None:
    """A held pending or preempted job is held with who holds it and the command that
    releases it; a held job that runs (a hold never stops one) is not listed."""
    jobs = [
        replace(job(1), held_by="alice"),
        replace(job(2, JobState.PREEMPTED), held_by="root"),
        replace(job(3, JobState.RUNNING), held_by="alice"),
        job(4),
    ]
    assert user_holds(jobs) == {
        1: "held by alice (hctl release 1 to let it run)",
        2: "held by root (hctl release 2 to let it run)",
    }
