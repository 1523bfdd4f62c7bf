"""Jobs: submission, idempotency, the validated state machine, events, progress and paging."""

from __future__ import annotations

from dataclasses import replace

import pytest

from store import AlreadyExistsError, Database, InvalidTransitionError, NotFoundError
from store.domain import JobSpec, NewJob
from store.job_memo import JobMemo
from store.repositories.jobs import ProgressWrite
from store.states import ALLOWED_JOB_TRANSITIONS, TERMINAL_JOB_STATES, JobState, ProgramKind
from tests.unit.store.conftest import make_spec, submit


def test_submitted_job_round_trips_its_spec(db: Database) -> None:
    """A stored job comes back as a frozen domain object equal to what was submitted."""
    job_id = submit(db)
    with db.transaction() as uow:
        job = uow.jobs.get(job_id)
        events = uow.jobs.events(job_id)
    assert job.spec == make_spec()
    assert job.state is JobState.PENDING
    assert job.user == "alice"
    assert job.version == 1
    assert job.submitted_at.tzinfo is not None
    assert [e.kind for e in events] == ["submitted"]
    with pytest.raises(AttributeError):
        job.state = JobState.RUNNING  # type: ignore[misc]


def test_idempotency_key_returns_the_first_job(db: Database) -> None:
    """The same key from the same user yields the same job; another user gets a new one."""
    first = submit(db, key="k1")
    with db.transaction() as uow:
        again, created = uow.jobs.add(NewJob(user="alice", spec=make_spec(), idempotency_key="k1"))
        other, other_created = uow.jobs.add(
            NewJob(user="bob", spec=make_spec(), idempotency_key="k1")
        )
    assert again.id == first and not created
    assert other.id != first and other_created
    with db.transaction() as uow:
        assert len(uow.jobs.query()) == 2


def test_a_key_with_another_spec_digest_is_refused_and_a_key_without_one_matches_any(
    db: Database,
) -> None:
    """A key stored with a digest answers only a submission with that digest (or none);
    another digest is AlreadyExistsError naming the key and the job. A key stored before
    digests were kept (NULL) matches any spec, as it always did."""
    with db.transaction() as uow:
        first, _ = uow.jobs.add(
            NewJob(user="alice", spec=make_spec(), idempotency_key="k1", spec_digest="d1")
        )
        legacy, _ = uow.jobs.add(NewJob(user="alice", spec=make_spec("b"), idempotency_key="k2"))
    with db.transaction() as uow:
        same, created = uow.jobs.add(
            NewJob(user="alice", spec=make_spec(), idempotency_key="k1", spec_digest="d1")
        )
        assert (same.id, created) == (first.id, False)
        assert uow.jobs.find_by_idempotency_key("alice", "k1", "d1") == same
        assert uow.jobs.find_by_idempotency_key("alice", "k2", "d9") == legacy
    with db.transaction() as uow, pytest.raises(AlreadyExistsError) as caught:
        uow.jobs.add(NewJob(user="alice", spec=make_spec(), idempotency_key="k1", spec_digest="d2"))
    assert str(caught.value).startswith(
        f"idempotency key 'k1' was used for job {first.id} with a different spec"
    )
    with db.transaction() as uow, pytest.raises(AlreadyExistsError):
        uow.jobs.add_array(
            NewJob(user="alice", spec=make_spec(), idempotency_key="k1", spec_digest="d2"), [0, 1]
        )
    with db.transaction() as uow:
        assert len(uow.jobs.query()) == 2


def test_transition_records_event_with_reason_and_timestamps(db: Database) -> None:
    """Each state change stores one event (from, to, kind, reason, round) in the same
    transaction and sets started/finished times."""
    job_id = submit(db)
    with db.transaction() as uow:
        running = uow.jobs.transition(
            job_id, JobState.RUNNING, kind="scheduled", reason="placed on n1", round=3
        )
        preempted = uow.jobs.transition(
            job_id,
            JobState.PREEMPTED,
            kind="preempted",
            reason="preempted in round 4 for job 9",
            round=4,
            count_preemption=True,
        )
        done = uow.jobs.transition(job_id, JobState.CANCELLED, kind="cancelled", reason="by alice")
        events = uow.jobs.events(job_id)
    assert running.started_at is not None and running.finished_at is None
    assert preempted.preemptions == 1
    assert done.finished_at is not None and done.reason == "by alice"
    assert done.version > running.version
    assert [(e.from_state, e.to_state, e.kind, e.round) for e in events[1:]] == [
        (JobState.PENDING, JobState.RUNNING, "scheduled", 3),
        (JobState.RUNNING, JobState.PREEMPTED, "preempted", 4),
        (JobState.PREEMPTED, JobState.CANCELLED, "cancelled", 0),
    ]
    assert events[2].reason == "preempted in round 4 for job 9"


def test_the_latest_return_to_the_queue_is_found_per_job(db: Database) -> None:
    """Each job's newest event that put it back in the queue: into PREEMPTED (a retry
    after a preemption: the retry) or a requeue after it, whatever came later (a hold, a
    new start); jobs that never went back are left out."""
    twice, requeued, never = submit(db), submit(db, name="r"), submit(db, name="b")
    with db.transaction() as uow:
        for job in (twice, requeued):
            uow.jobs.transition(job, JobState.RUNNING, kind="scheduled", reason="placed")
            uow.jobs.transition(job, JobState.PREEMPTED, kind="preempted", reason="for job 9")
            uow.jobs.transition(job, JobState.RUNNING, kind="scheduled", reason="again")
            uow.jobs.transition(job, JobState.PREEMPTED, kind="retried", reason="exit code 1")
        uow.jobs.transition(requeued, JobState.RUNNING, kind="scheduled", reason="third")
        uow.jobs.transition(requeued, JobState.FAILED, kind="failed", reason="exit code 1")
        uow.jobs.requeue(requeued, reason="requeued by alice", ran_s=5, keep_progress=True)
        uow.jobs.set_hold(requeued, "alice", reason="held by alice")
        uow.jobs.transition(never, JobState.RUNNING, kind="scheduled", reason="placed")
    with db.transaction() as uow:
        found = uow.jobs.last_back_in_queue([twice, requeued, never])
        assert uow.jobs.last_back_in_queue([]) == {}
    assert sorted(found) == [twice, requeued]
    assert (found[twice].kind, found[twice].reason) == ("retried", "exit code 1")
    assert (found[requeued].kind, found[requeued].from_state) == ("requeued", JobState.FAILED)
    assert found[requeued].reason == "requeued by alice"


@pytest.mark.parametrize("terminal", sorted(TERMINAL_JOB_STATES))
def test_terminal_states_accept_no_transition(db: Database, terminal: JobState) -> None:
    """Nothing leaves a terminal state, and a refused transition stores no event."""
    job_id = submit(db)
    with db.transaction() as uow:
        if terminal in (JobState.COMPLETED, JobState.TIMEOUT):
            uow.jobs.transition(job_id, JobState.RUNNING, kind="scheduled", reason="r")
        uow.jobs.transition(job_id, terminal, kind="end", reason="end")
    for target in JobState:
        with pytest.raises(InvalidTransitionError), db.transaction() as uow:
            uow.jobs.transition(job_id, target, kind="x", reason="x")
    with db.transaction() as uow:
        assert uow.jobs.get(job_id).state is terminal
        assert all(e.kind != "x" for e in uow.jobs.events(job_id))


def test_transition_table_matches_the_documented_life() -> None:
    """PENDING -> RUNNING <-> PREEMPTED -> terminal; PENDING cannot be preempted."""
    assert JobState.RUNNING in ALLOWED_JOB_TRANSITIONS[JobState.PREEMPTED]
    assert JobState.PREEMPTED in ALLOWED_JOB_TRANSITIONS[JobState.RUNNING]
    assert JobState.PREEMPTED not in ALLOWED_JOB_TRANSITIONS[JobState.PENDING]
    assert JobState.COMPLETED not in ALLOWED_JOB_TRANSITIONS[JobState.PENDING]


def test_progress_only_moves_forward(db: Database) -> None:
    """A late progress report never lowers iterations; service accumulates."""
    job_id = submit(db)
    with db.transaction() as uow:
        uow.jobs.record_progress(
            job_id, iterations_done=50, checkpoint_iterations=40, service_delta=2.5
        )
        job = uow.jobs.record_progress(job_id, iterations_done=30, service_delta=1.0)
    assert job.iterations_done == 50
    assert job.checkpoint_iterations == 40
    assert job.attained_service == pytest.approx(3.5)


def test_a_job_reports_progress_from_its_first_progress_report_on(db: Database) -> None:
    """Progress recorded from an exit does not mark the job as reporting progress; the
    first report from the program does, for good; the store reads the flag back."""
    job_id = submit(db)
    with db.transaction() as uow:
        assert not uow.jobs.get(job_id).reports_progress
        assert not uow.jobs.record_progress(job_id, iterations_done=5).reports_progress
        assert uow.jobs.record_progress(job_id, iterations_done=6, reported=True).reports_progress
        uow.jobs.record_progress(job_id, iterations_done=7)
    with db.transaction() as uow:
        assert uow.jobs.get(job_id).reports_progress


def test_a_jobs_restart_cost_is_the_running_mean_of_its_measured_starts(db: Database) -> None:
    """Unmeasured at first; then each measured start (placement to first progress) is
    averaged with the figure so far; the store reads it back; bad figures are refused."""
    job_id = submit(db)
    with db.transaction() as uow:
        assert uow.jobs.get(job_id).restart_s is None
        assert uow.jobs.record_restart(job_id, 8.0).restart_s == pytest.approx(8.0)
        assert uow.jobs.record_restart(job_id, 4.0).restart_s == pytest.approx(6.0)
        with pytest.raises(ValueError, match="restart seconds"):
            uow.jobs.record_restart(job_id, -1.0)
    with db.transaction() as uow:
        assert uow.jobs.get(job_id).restart_s == pytest.approx(6.0)


def test_an_exit_code_is_set_without_a_transition(db: Database) -> None:
    """A completed job gets the exit code of its process afterwards; its state, reason and
    events stay as they are."""
    job_id = submit(db)
    with db.transaction() as uow:
        uow.jobs.transition(job_id, JobState.RUNNING, kind="scheduled", reason="placed")
        uow.jobs.transition(job_id, JobState.COMPLETED, kind="completed", reason="all done")
        job = uow.jobs.set_exit_code(job_id, 0)
        events = uow.jobs.events(job_id)
    assert (job.state, job.reason, job.exit_code) == (JobState.COMPLETED, "all done", 0)
    assert [e.kind for e in events][-1] == "completed"


def test_query_filters_and_pages_by_id(db: Database) -> None:
    """Listing filters by user and state and pages in id order."""
    ids = [submit(db, user="alice" if i % 2 else "bob", name=f"j{i}") for i in range(5)]
    with db.transaction() as uow:
        uow.jobs.transition(ids[0], JobState.CANCELLED, kind="cancelled", reason="r")
        page1 = uow.jobs.query(limit=2)
        page2 = uow.jobs.query(after_id=page1[-1].id, limit=2)
        bobs = uow.jobs.query(user="bob")
        pending = uow.jobs.query(states=[JobState.PENDING])
        unfinished = uow.jobs.list_unfinished()
        counts = uow.jobs.count_by_state()
    assert [j.id for j in page1 + page2] == ids[:4]
    assert [j.id for j in bobs] == [ids[0], ids[2], ids[4]]
    assert [j.id for j in pending] == ids[1:]
    assert [j.id for j in unfinished] == ids[1:]
    assert counts[JobState.PENDING] == 4 and counts[JobState.CANCELLED] == 1


def test_whether_any_job_is_in_some_states(db: Database) -> None:
    """The existence check the early round's idle check asks: true exactly while some job
    is in one of the states asked for; no states asked, no job."""
    with db.transaction() as uow:
        assert not uow.jobs.any_in_states([JobState.PENDING, JobState.PREEMPTED])
    job_id = submit(db)
    with db.transaction() as uow:
        assert uow.jobs.any_in_states([JobState.PENDING, JobState.PREEMPTED])
        assert not uow.jobs.any_in_states([JobState.RUNNING])
        assert not uow.jobs.any_in_states([])
        uow.jobs.transition(job_id, JobState.CANCELLED, kind="cancelled", reason="r")
    with db.transaction() as uow:
        assert not uow.jobs.any_in_states([JobState.PENDING, JobState.PREEMPTED])
        assert uow.jobs.any_in_states([JobState.CANCELLED])


def test_unknown_job_is_not_found(db: Database) -> None:
    with pytest.raises(NotFoundError), db.transaction() as uow:
        uow.jobs.get(424242)


def test_events_after_serves_watchers(db: Database) -> None:
    """Events come back in id order after a cursor, optionally for some jobs only."""
    a = submit(db, name="a")
    b = submit(db, name="b")
    with db.transaction() as uow:
        cursor = uow.jobs.last_event_id()
        uow.jobs.transition(a, JobState.RUNNING, kind="scheduled", reason="r")
        uow.jobs.transition(b, JobState.CANCELLED, kind="cancelled", reason="r")
    with db.transaction() as uow:
        assert [e.job_id for e in uow.jobs.events_after(cursor)] == [a, b]
        assert [e.kind for e in uow.jobs.events_after(cursor, job_ids=[b])] == ["cancelled"]


def test_waiting_reasons_are_set_in_bulk_without_new_versions(db: Database) -> None:
    """Bulk reason updates change only rows whose text differs and leave versions alone."""
    a = submit(db, name="a")
    b = submit(db, name="b")
    with db.transaction() as uow:
        before = uow.jobs.get(a)
        assert uow.jobs.set_waiting_reasons({a: "waiting: no free v100", b: before.reason}) == 1
        assert uow.jobs.get(a).reason == "waiting: no free v100"
    with db.transaction() as uow:
        after = uow.jobs.get(a)
        assert after.reason == "waiting: no free v100"
        assert after.version == before.version
        assert uow.jobs.get(b).reason == before.reason
        # A job that started meanwhile keeps its own reason.
        uow.jobs.transition(b, JobState.RUNNING, kind="scheduled", reason="placed")
        assert uow.jobs.set_waiting_reasons({b: "waiting: stale"}) == 0
    with db.transaction() as uow:
        assert uow.jobs.get(b).reason == "placed"


def test_many_reasons_are_set_at_once_on_the_jobs_still_waiting_only(db: Database) -> None:
    """A round sets thousands of reasons in one call: each waiting or preempted job gets its
    own, a running one and one whose reason already reads so are left alone, and the count
    says how many changed."""
    ids = [submit(db, name=f"j{i}") for i in range(300)]
    with db.transaction() as uow:
        uow.jobs.transition(ids[0], JobState.RUNNING, kind="scheduled", reason="placed")
        uow.jobs.transition(ids[1], JobState.RUNNING, kind="scheduled", reason="placed")
        uow.jobs.transition(ids[1], JobState.PREEMPTED, kind="preempted", reason="preempted")
        unchanged = uow.jobs.get(ids[2]).reason
        reasons = {job_id: f"waiting: behind job {job_id - 1}" for job_id in ids}
        reasons[ids[2]] = unchanged
        assert uow.jobs.set_waiting_reasons(reasons) == 300 - 2
    with db.transaction() as uow:
        got = {job_id: uow.jobs.get(job_id).reason for job_id in ids}
    assert got[ids[0]] == "placed"
    assert got[ids[1]] == reasons[ids[1]]
    assert got[ids[2]] == unchanged
    assert all(got[job_id] == reasons[job_id] for job_id in ids[3:])


def _varied_jobs(db: Database) -> list[int]:
    """Jobs that use every JSON column and none, of two users, one an array."""
    with db.transaction() as uow:
        command = JobSpec(
            name="cmd",
            num_gpus=2,
            iterations=5,
            program_kind=ProgramKind.COMMAND,
            argv=("python", "train.py", "--lr", "0.1"),
            env=(("SEED", "3"),),
            dependencies=(("afterok", 1),),
            notify_url="https://hooks.example.org/x",
            notify_on=(JobState.FAILED,),
            max_retries=2,
            workdir="/w",
        )
        plain = JobSpec(name="bare", num_gpus=1, iterations=1, program_kind=ProgramKind.WORKLOAD)
        ids = [uow.jobs.add(NewJob(user="bob", spec=command))[0].id]
        ids.append(uow.jobs.add(NewJob(user="alice", spec=plain))[0].id)
        elements, _ = uow.jobs.add_array(NewJob(user="alice", spec=make_spec("arr")), [0, 1, 2])
        ids.extend(e.id for e in elements)
    ids.append(submit(db, user="bob"))
    return ids


def test_listing_returns_what_query_returns(db: Database) -> None:
    """The plain-column listing reads every field as the ORM query does, for every filter
    and page, and sees a change made by a bulk update (which bumps no version)."""
    ids = _varied_jobs(db)
    with db.transaction() as uow:
        uow.jobs.transition(ids[1], JobState.CANCELLED, kind="cancelled", reason="r")
    filters: list[dict[str, object]] = [
        {},
        {"user": "bob"},
        {"states": [JobState.PENDING]},
        {"after_id": ids[1], "limit": 2},
        {"array_job_id": ids[2]},
        {"user": "alice", "states": [JobState.CANCELLED, JobState.PENDING], "limit": 1},
    ]
    with db.transaction() as uow:
        for given in filters:
            assert uow.jobs.listing(**given) == uow.jobs.query(**given), given  # type: ignore[arg-type]
        bobs = uow.jobs.listing(user="bob")
        assert bobs[0].spec.argv == ("python", "train.py", "--lr", "0.1")
        assert bobs[0].spec.env == (("SEED", "3"),)
    with db.transaction() as uow:
        uow.jobs.set_waiting_reasons({ids[0]: "waiting: no v100 free"})
    with db.transaction() as uow:
        (listed,) = uow.jobs.listing(user="bob", limit=1)
        assert listed.reason == "waiting: no v100 free"
        assert listed == uow.jobs.get(ids[0])


def test_hold_candidates_are_the_unfinished_jobs_a_hold_can_apply_to(db: Database) -> None:
    """Jobs with dependencies, held ones, elements of a capped array and requeued ones are
    candidates while unfinished; plain jobs and finished ones are not, with or without the
    memo, and the memo is left as it was."""
    plain = submit(db, name="plain")
    dependency = submit(db, name="dependency")
    with db.transaction() as uow:
        dependent = uow.jobs.add(
            NewJob(
                user="alice",
                spec=replace(make_spec("dependent"), dependencies=(("afterok", dependency),)),
            )
        )[0].id
        capped = uow.jobs.add(
            NewJob(
                user="alice", spec=replace(make_spec("capped"), array_job_id=0, array_max_running=2)
            )
        )[0].id
    held = submit(db, name="held")
    requeued = submit(db, name="requeued")
    finished = submit(db, name="finished")
    with db.transaction() as uow:
        uow.jobs.set_hold(held, "alice", reason="held by alice")
        uow.jobs.transition(requeued, JobState.RUNNING, kind="started", reason="placed")
        uow.jobs.requeue(requeued, reason="requeued by alice", ran_s=1.0, keep_progress=True)
        uow.jobs.set_hold(finished, "alice", reason="held by alice")
        uow.jobs.transition(finished, JobState.CANCELLED, kind="cancelled", reason="by alice")
    expected = [dependent, capped, held, requeued]
    memo = JobMemo()
    with db.transaction() as uow:
        assert [j.id for j in uow.jobs.hold_candidates()] == expected
        everything = uow.jobs.list_unfinished(memo=memo)
    assert plain in {j.id for j in everything}
    remembered = dict(memo.known())
    with db.transaction() as uow:
        assert [j.id for j in uow.jobs.hold_candidates(memo=memo)] == expected
    assert memo.known() == remembered


def test_progress_written_from_plain_columns_is_what_the_orm_would_store(db: Database) -> None:
    """progress_targets reads a job's counters without loading its row; write_progress
    stores new counters, marks the job as reporting progress and moves its version once,
    so a reader holding the old version sees the job changed."""
    job_id = submit(db)
    with db.transaction() as uow:
        uow.jobs.record_progress(job_id, iterations_done=10, service_delta=1.5)
    with db.transaction() as uow:
        target = uow.jobs.progress_targets([job_id, 999_999])
        assert list(target) == [job_id]
        before = target[job_id]
        assert (before.iterations_done, before.attained_service) == (10, 1.5)
        assert not before.reports_progress and before.state is JobState.PENDING
        uow.jobs.write_progress(
            [ProgressWrite(job_id, before.version, 25, 20, before.attained_service + 2.0)]
        )
    with db.transaction() as uow:
        job = uow.jobs.get(job_id)
    assert (job.iterations_done, job.checkpoint_iterations) == (25, 20)
    assert job.attained_service == pytest.approx(3.5)
    assert job.reports_progress and job.version == before.version + 1


def test_jobs_read_as_plain_columns_equal_those_read_as_rows(db: Database) -> None:
    """read_many returns what get_many returns, for jobs in any state, and leaves out ids
    that name no job; it sees what its own unit of work changed and has not flushed."""
    ids = [submit(db, name=f"job-{i}") for i in range(3)]
    with db.transaction() as uow:
        uow.jobs.transition(ids[1], JobState.CANCELLED, kind="cancelled", reason="x")
        uow.jobs.record_progress(ids[2], iterations_done=7, service_delta=1.0, flush=False)
        assert uow.jobs.read_many([ids[2]])[ids[2]].iterations_done == 7
    with db.transaction() as uow:
        plain = uow.jobs.read_many([*ids, 999_999])
    with db.transaction() as uow:
        assert plain == uow.jobs.get_many([*ids, 999_999])
    assert sorted(plain) == ids
