"""Storing a group of validated submissions in one unit of work.

Everything that can refuse one submission is checked for the whole group before anything
is inserted: idempotency keys (those stored before, and those used twice in the group), the
per-user pending limit, dependencies. A refused submission gets its own error and the others
are stored; the group's rows are then inserted together, in arrival order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import structlog
from sqlalchemy.exc import OperationalError

from master.errors import InvalidArgumentError, MasterError
from master.jobs.limits import pending_limit_error
from master.jobs.validation import DEPENDENCY_FIELDS
from master.process.transactions import Transactor
from store import UnitOfWork
from store.domain import Job, NewJob
from store.errors import ConflictError, StoreError
from store.repositories.jobs import key_reused

log = structlog.get_logger(__name__)

# A job and whether this submission created it (False: stored before under its key).
Stored = tuple[Job, bool]


@dataclass(frozen=True, slots=True)
class Submission:
    new: NewJob
    # An array's indices; empty for a single job.
    indices: tuple[int, ...]


def store(
    tx: Transactor, group: Sequence[Submission], pending_limit: int
) -> list[Stored | Exception]:
    """Store a group of submissions in one transaction. Should that transaction fail as a
    whole (the checks cover what can refuse one submission, so this is for the unforeseen),
    each is tried again in a transaction of its own, so that only a failing one fails."""
    try:
        return tx.write(lambda uow: store_group(uow, group, pending_limit), jobs=False)
    except (MasterError, ConflictError, OperationalError):
        # This master may not write, conflicts outlasted their retries, the database is
        # unreachable: each submission alone would meet the same.
        raise
    except Exception:
        if len(group) == 1:
            raise
    log.warning("a group of submissions failed; storing each alone", size=len(group))
    outcomes: list[Stored | Exception] = []
    for submission in group:
        try:
            outcomes.extend(_store_alone(tx, submission, pending_limit))
        except Exception as exc:  # this submission's caller gets it
            outcomes.append(exc)
    return outcomes


def _store_alone(
    tx: Transactor, submission: Submission, pending_limit: int
) -> list[Stored | Exception]:
    return tx.write(lambda uow: store_group(uow, [submission], pending_limit), jobs=False)


def store_group(
    uow: UnitOfWork, group: Sequence[Submission], pending_limit: int
) -> list[Stored | Exception]:
    """Per submission of `group`, in order, its job or why it was refused."""
    keys = {(s.new.user, s.new.idempotency_key) for s in group if s.new.idempotency_key}
    stored_keys = uow.jobs.keyed(keys)
    first_jobs = uow.jobs.get_many({k.job_id for k in stored_keys.values()})
    waiting = uow.jobs.waiting_counts({s.new.user for s in group}) if pending_limit else {}
    known = uow.jobs.get_many({job_id for s in group for _, job_id in s.new.spec.dependencies})

    outcomes: list[Stored | Exception | None] = [None] * len(group)
    to_insert: list[int] = []
    # The submission of this group that stores each key, and those that sent it again.
    storing: dict[tuple[str, str], int] = {}
    resent: list[int] = []
    for index, submission in enumerate(group):
        new = submission.new
        pair = (new.user, new.idempotency_key)
        try:
            if new.idempotency_key:
                found = stored_keys.get(pair)
                if found is not None:
                    first = first_jobs.get(found.job_id) or uow.jobs.get(found.job_id)
                    if new.spec_digest and found.spec_digest not in ("", new.spec_digest):
                        raise key_reused(new.idempotency_key, first)
                    outcomes[index] = (first, False)
                    continue
                if pair in storing:
                    resent.append(index)
                    continue
            if pending_limit:
                # Every element of an array is a waiting job of its own.
                elements = len(submission.indices)
                if waiting[new.user] + max(0, elements - 1) >= pending_limit:
                    raise pending_limit_error(new.user, waiting[new.user], pending_limit)
            # Only jobs stored before may be named, so dependencies never form a cycle.
            for kind, job_id in new.spec.dependencies:
                if job_id not in known:
                    raise InvalidArgumentError(
                        f"spec.{DEPENDENCY_FIELDS[kind]}",
                        f"job {job_id} does not exist (a job can only depend on jobs already "
                        "submitted)",
                    )
        except (MasterError, StoreError) as exc:
            outcomes[index] = exc
            continue
        if pending_limit:
            waiting[new.user] += max(1, len(submission.indices))
        if new.idempotency_key:
            storing[pair] = index
        to_insert.append(index)

    jobs = uow.jobs.add_many([(group[i].new, group[i].indices) for i in to_insert])
    for index, job in zip(to_insert, jobs, strict=True):
        outcomes[index] = (job, True)
    for index in resent:
        new = group[index].new
        first_submission = group[storing[(new.user, new.idempotency_key)]].new
        stored = outcomes[storing[(new.user, new.idempotency_key)]]
        assert isinstance(stored, tuple)
        if new.spec_digest and first_submission.spec_digest not in ("", new.spec_digest):
            outcomes[index] = key_reused(new.idempotency_key, stored[0])
        else:
            outcomes[index] = (stored[0], False)
    done: list[Stored | Exception] = []
    for outcome in outcomes:
        assert outcome is not None
        done.append(outcome)
    return done
