"""A group of submissions stored in one unit of work (SQLite and, when configured,
PostgreSQL): arrival order, idempotency keys and the pending limit hold within the group,
and a refused submission leaves the others stored."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from master.errors import InvalidArgumentError, ResourceExhaustedError, UnavailableError
from master.jobs.submissions import Stored, Submission, store, store_group
from master.process.transactions import Transactor
from store import Database, UnitOfWork
from store.domain import JobSpec, NewJob
from store.errors import AlreadyExistsError
from store.migrate import upgrade
from store.repositories.jobs import JobRepository
from store.states import JobState, ProgramKind
from store.testing import backends, temporary_database_url


@pytest.fixture(params=backends())
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    with temporary_database_url(request.param, tmp_path) as url:
        database = Database(url)
        upgrade(database.url, engine=database.engine)
        try:
            yield database
        finally:
            database.dispose()


def job_spec(name: str, **changes: object) -> JobSpec:
    spec = JobSpec(
        name=name, num_gpus=1, iterations=100, program_kind=ProgramKind.WORKLOAD, workload="resnet"
    )
    return replace(spec, **changes)  # type: ignore[arg-type]


def submission(
    name: str,
    user: str = "alice",
    key: str = "",
    digest: str = "",
    indices: tuple[int, ...] = (),
    **changes: object,
) -> Submission:
    spec = job_spec(name, **changes)
    new = NewJob(user=user, spec=spec, idempotency_key=key, spec_digest=digest)
    return Submission(new, indices)


def stored(db: Database, group: Sequence[Submission], limit: int = 0) -> list[Stored | Exception]:
    with db.transaction() as uow:
        return store_group(uow, group, limit)


def job_of(outcome: Stored | Exception) -> Stored:
    assert isinstance(outcome, tuple), outcome
    return outcome


def test_a_group_is_stored_in_arrival_order_each_with_its_spec_and_event(db: Database) -> None:
    """Ids follow the order of the group; each job has its own spec, PENDING, with its
    `submitted` event."""
    outcomes = stored(db, [submission(f"job-{n}", user=f"u{n % 2}") for n in range(5)])
    jobs = [job_of(o) for o in outcomes]
    assert all(created for _, created in jobs)
    ids = [job.id for job, _ in jobs]
    assert ids == sorted(ids) and len(set(ids)) == 5
    with db.transaction() as uow:
        for n, job_id in enumerate(ids):
            job = uow.jobs.get(job_id)
            expected = (f"job-{n}", f"u{n % 2}", JobState.PENDING)
            assert (job.spec.name, job.user, job.state) == expected
            [event] = uow.jobs.events(job_id)
            assert (event.kind, event.reason) == ("submitted", f"submitted by u{n % 2}")


def test_an_array_in_a_group_keeps_its_elements_together_and_in_order(db: Database) -> None:
    """An array between two single jobs: its elements follow its first element, the array's
    id is that element's, and the job submitted after it comes after every element."""
    outcomes = stored(
        db,
        [
            submission("before"),
            submission("sweep-%a", indices=(0, 1, 2), array="0-2"),
            submission("after"),
        ],
    )
    before, head, after = (job_of(o)[0] for o in outcomes)
    with db.transaction() as uow:
        elements = uow.jobs.array_elements([head.id])[head.id]
    assert [e.id for e in elements] == [head.id, head.id + 1, head.id + 2]
    assert [e.spec.array_index for e in elements] == [0, 1, 2]
    assert all(e.spec.array_job_id == head.id for e in elements)
    assert before.id < head.id and after.id > elements[-1].id


def test_the_same_key_twice_in_one_group_stores_one_job(db: Database) -> None:
    """Two submissions with one key and one spec: one job, and both are answered with it;
    the same key with another spec is refused naming that job; another user's same key is
    a job of its own."""
    outcomes = stored(
        db,
        [
            submission("a", key="k", digest="d1"),
            submission("a", key="k", digest="d1"),
            submission("b", key="k", digest="d2"),
            submission("c", user="bob", key="k", digest="d2"),
        ],
    )
    first, again = job_of(outcomes[0]), job_of(outcomes[1])
    assert first[1] and not again[1] and again[0].id == first[0].id
    assert isinstance(outcomes[2], AlreadyExistsError)
    assert f"idempotency key 'k' was used for job {first[0].id}" in str(outcomes[2])
    bob = job_of(outcomes[3])
    assert bob[1] and bob[0].id != first[0].id
    with db.transaction() as uow:
        assert len(uow.jobs.query()) == 2


def test_a_key_stored_before_answers_with_its_job_or_refuses_another_spec(db: Database) -> None:
    """A key stored by an earlier group answers with its job (not created again); sent with
    another spec it is refused, and the rest of the group is stored."""
    [earlier] = stored(db, [submission("a", key="k", digest="d1")])
    first = job_of(earlier)[0]
    outcomes = stored(
        db,
        [
            submission("a", key="k", digest="d1"),
            submission("b", key="k", digest="d2"),
            submission("c"),
        ],
    )
    assert job_of(outcomes[0]) == (first, False)
    assert isinstance(outcomes[1], AlreadyExistsError)
    assert job_of(outcomes[2])[1]


def test_a_group_of_resends_only_stores_nothing(db: Database) -> None:
    """A group in which every submission was stored before answers each with its job and
    inserts nothing."""
    earlier = [job_of(o)[0] for o in stored(db, [submission("a", key="a"), submission("b")])]
    outcomes = stored(db, [submission("a", key="a"), submission("a", key="a")])
    assert [job_of(o) for o in outcomes] == [(earlier[0], False), (earlier[0], False)]
    with db.transaction() as uow:
        assert [job.id for job in uow.jobs.query()] == [job.id for job in earlier]
        assert len(uow.jobs.events(earlier[0].id)) == 1


def test_the_pending_limit_holds_exactly_within_a_group(db: Database) -> None:
    """With a limit of 4 and one job waiting, alice's next three fit (an array of two counts
    two) and the fourth is refused naming how many wait; bob's are counted apart."""
    stored(db, [submission("waiting")], limit=4)
    outcomes = stored(
        db,
        [
            submission("one"),
            submission("pair", indices=(0, 1), array="0-1"),
            submission("bob", user="bob"),
            submission("too many"),
            submission("bob again", user="bob"),
        ],
        limit=4,
    )
    assert job_of(outcomes[0])[1] and job_of(outcomes[1])[1]
    assert job_of(outcomes[2])[1] and job_of(outcomes[4])[1]
    refused = outcomes[3]
    assert isinstance(refused, ResourceExhaustedError)
    assert "alice already has 4 jobs waiting" in str(refused)
    with db.transaction() as uow:
        assert uow.jobs.waiting_counts({"alice", "bob"}) == {"alice": 4, "bob": 2}


def test_a_submission_naming_a_missing_job_is_refused_and_the_others_are_stored(
    db: Database,
) -> None:
    """A dependency on a job that does not exist refuses that submission only; a dependency
    on a job stored before is accepted."""
    [earlier] = stored(db, [submission("first")])
    first = job_of(earlier)[0]
    outcomes = stored(
        db,
        [
            submission("ok", dependencies=(("afterok", first.id),)),
            submission("bad", dependencies=(("afterany", first.id + 1000),)),
            submission("also ok"),
        ],
    )
    assert job_of(outcomes[0])[1] and job_of(outcomes[2])[1]
    refused = outcomes[1]
    assert isinstance(refused, InvalidArgumentError)
    assert f"job {first.id + 1000} does not exist" in str(refused)


def test_a_group_whose_transaction_fails_is_stored_one_by_one(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should inserting a group fail as a whole, each submission is stored alone: only the
    one that fails is refused."""
    add_many = JobRepository.add_many

    def failing(self: JobRepository, items: Sequence[tuple[NewJob, Sequence[int]]]) -> object:
        if any(new.spec.name == "poison" for new, _ in items):
            raise RuntimeError("the database refused a row")
        return add_many(self, items)

    monkeypatch.setattr(JobRepository, "add_many", failing)
    outcomes = store(
        Transactor(db), [submission("a"), submission("poison"), submission("b")], pending_limit=0
    )
    assert job_of(outcomes[0])[1] and job_of(outcomes[2])[1]
    assert isinstance(outcomes[1], RuntimeError)

    def names(uow: UnitOfWork) -> list[str]:
        return [job.spec.name for job in uow.jobs.query()]

    assert Transactor(db).read(names) == ["a", "b"]


def test_a_group_refused_by_the_term_check_is_not_retried_one_by_one(db: Database) -> None:
    """When this master may not write, the whole group gets that error from one attempt:
    storing each alone would meet the same refusal."""
    tx = Transactor(db)
    checks: list[int] = []

    def deposed(_session: object) -> None:
        checks.append(1)
        raise UnavailableError("this master is not the active one (deposed)")

    tx.guard = deposed
    with pytest.raises(UnavailableError, match="deposed"):
        store(tx, [submission("a"), submission("b")], pending_limit=0)
    assert len(checks) == 1
    assert Transactor(db).read(lambda uow: uow.jobs.query()) == []
