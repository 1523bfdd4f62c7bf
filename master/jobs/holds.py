"""Jobs held back from the scheduling policies: user holds, requeues still stopping, unmet
dependencies and array caps.

A held job is not offered to the policy at all (master/rounds/snapshot.py leaves it out of the
round's views), so every policy, present or future, sees the same rules:

- A job with dependencies (sbatch --dependency) waits until each one is satisfied:
  afterok once the job named COMPLETED, afterany once it ended, afterfail once it ended
  otherwise than COMPLETED. An id that names an array stands for all its elements. A
  dependency that can no longer be satisfied (afterok on a job that FAILED, was CANCELLED
  or timed out; afterfail on one that COMPLETED) gets the dependent CANCELLED by
  `HoldEnforcer.check`, with the dependency and its end state in the reason, so nothing
  waits forever. Dependencies must name jobs that exist at submission, so a job can only
  depend on older jobs: a cycle cannot be built, and every chain ends.
- A job its owner or an admin holds (hctl hold, hctl submit --hold, hctl requeue --hold)
  waits until released (hctl release): "held by alice (hctl release 12 to let it run)".
- A requeued job waits until the tasks of its previous run have exited.
- An array submitted with `%N` has at most N elements holding GPUs: once N run, the others
  are not offered ("waiting: array 12 at its limit of 4 running").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import structlog

from master.process.transactions import Transactor
from store import UnitOfWork
from store.domain import Job
from store.job_memo import JobMemo
from store.repositories.jobs import hold_reason
from store.states import JobState, is_terminal

log = structlog.get_logger(__name__)

WAITING_STATES = (JobState.PENDING, JobState.PREEMPTED)


@dataclass(frozen=True, slots=True)
class Holds:
    """Per held job, why it waits; per job whose dependencies failed, why it is cancelled."""

    waiting: Mapping[int, str]
    broken: Mapping[int, str]

    def held(self) -> frozenset[int]:
        return frozenset(self.waiting) | frozenset(self.broken)


def dependency_targets(
    uow: UnitOfWork, jobs: Iterable[Job], memo: JobMemo | None = None
) -> dict[int, list[Job]]:
    """Per id some job depends on, the jobs it stands for: the job, or an array's elements
    when it is an array's id. With a `memo`, the jobs it holds unchanged are not loaded
    again."""
    ids = {job_id for job in jobs for _, job_id in job.spec.dependencies}
    found = uow.jobs.get_many(ids, memo=memo)
    arrays = [i for i, job in found.items() if job.spec.array_job_id == i]
    targets: dict[int, list[Job]] = {i: [job] for i, job in found.items()}
    targets.update(uow.jobs.array_elements(arrays, memo=memo))
    return targets


def dependency_state(job: Job, targets: Mapping[int, Sequence[Job]]) -> tuple[str, str]:
    """("", "") when every dependency is satisfied; else (why it waits, "") or ("", why
    it can never run)."""
    for kind, dep_id in job.spec.dependencies:
        members = targets.get(dep_id, ())
        if not members:
            return "", f"dependency {kind}:{dep_id}: job {dep_id} no longer exists"
        ended = [m for m in members if is_terminal(m.state)]
        unsuccessful = [m for m in ended if m.state is not JobState.COMPLETED]
        if kind == "afterok" and unsuccessful:
            bad = unsuccessful[0]
            return "", (
                f"dependency afterok:{dep_id} can never be satisfied: job "
                f"{_name(bad)} ended {bad.state.value}"
            )
        if len(ended) < len(members):
            return f"waiting for job {dep_id} ({kind})", ""
        if kind == "afterfail" and not unsuccessful:
            return "", (
                f"dependency afterfail:{dep_id} can never be satisfied: job {dep_id} ended "
                "COMPLETED"
            )
    return "", ""


def _name(job: Job) -> str:
    if job.spec.array_job_id and job.spec.array_index is not None:
        return f"{job.id} ({job.spec.array_job_id}_{job.spec.array_index})"
    return str(job.id)


def array_cap_holds(jobs: Iterable[Job], skip: frozenset[int]) -> dict[int, str]:
    """Waiting elements of capped arrays beyond what their cap leaves room for: the cap
    minus the elements that run now. Preempted elements (they have progress) come first,
    then by index. Jobs in `skip` (held for another reason) are not offered anyway."""
    running: dict[int, int] = defaultdict(int)
    waiting: dict[int, list[Job]] = defaultdict(list)
    cap: dict[int, int] = {}
    for job in jobs:
        spec = job.spec
        if not spec.array_job_id or not spec.array_max_running:
            continue
        cap[spec.array_job_id] = spec.array_max_running
        if job.state is JobState.RUNNING:
            running[spec.array_job_id] += 1
        elif job.state in WAITING_STATES and job.id not in skip:
            waiting[spec.array_job_id].append(job)
    held: dict[int, str] = {}
    for array_id, elements in waiting.items():
        room = max(0, cap[array_id] - running[array_id])
        elements.sort(key=lambda j: (j.state is not JobState.PREEMPTED, j.spec.array_index))
        reason = f"waiting: array {array_id} at its limit of {cap[array_id]} running"
        for job in elements[room:]:
            held[job.id] = reason
    return held


def user_holds(jobs: Iterable[Job]) -> dict[int, str]:
    """Waiting jobs a user or an admin holds (hctl hold, submit --hold), with why."""
    return {
        job.id: hold_reason(job.held_by, job.id)
        for job in jobs
        if job.held_by and job.state in WAITING_STATES
    }


def stopping_holds(uow: UnitOfWork, jobs: Iterable[Job]) -> dict[int, str]:
    """Requeued jobs whose previous run has not exited yet: started again before, a
    command would run twice at once, and a managed job would resume from an older
    checkpoint than the one its stopping run is writing."""
    requeued = [j.id for j in jobs if j.state is JobState.PENDING and j.requeues]
    if not requeued:
        return {}
    active = uow.tasks.active_for_jobs(requeued)
    return {
        job_id: "requeued: waiting for its previous run to stop"
        for job_id in requeued
        if active.get(job_id)
    }


def read_holds(uow: UnitOfWork, jobs: Sequence[Job], memo: JobMemo | None = None) -> Holds:
    """The holds on `jobs`: the unfinished jobs, or those of them a hold can apply to
    (JobRepository.hold_candidates); `memo`: see dependency_targets."""
    waiting: dict[int, str] = stopping_holds(uow, jobs)
    # A user's hold is what they must act on, so its reason is the one shown.
    waiting.update(user_holds(jobs))
    dependent = [
        j for j in jobs if j.spec.dependencies and j.state in WAITING_STATES and j.id not in waiting
    ]
    targets = dependency_targets(uow, dependent, memo) if dependent else {}
    broken: dict[int, str] = {}
    for job in dependent:
        wait, never = dependency_state(job, targets)
        if wait:
            waiting[job.id] = wait
        elif never:
            broken[job.id] = never
    waiting.update(array_cap_holds(jobs, frozenset(waiting) | frozenset(broken)))
    return Holds(waiting, broken)


def _anything_to_write(uow: UnitOfWork, memo: JobMemo | None) -> bool:
    jobs = uow.jobs.hold_candidates(memo=memo)
    holds = read_holds(uow, jobs, memo)
    reasons = {job.id: job.reason for job in jobs}
    return bool(holds.broken) or any(
        reasons.get(job_id) != why for job_id, why in holds.waiting.items()
    )


class HoldEnforcer:
    """Cancels jobs whose dependencies can no longer be satisfied and stores why held jobs
    wait. The daemon runs `check` before each round."""

    def __init__(
        self, tx: Transactor, on_change: Callable[[], None], memo: JobMemo | None = None
    ) -> None:
        self._tx = tx
        self._on_change = on_change
        # The check reads the jobs a hold can apply to before each round; with the
        # rounds' memo only those changed since are loaded and converted.
        self._memo = memo if memo is not None else JobMemo()

    def check(self) -> list[int]:
        """Returns the ids of the jobs it cancelled."""
        cancelled: list[int] = []
        # Read first: the write below takes the lock rounds also need, so it is taken only
        # when a job is to be cancelled or a held job's reason changed.
        if not self._tx.read(lambda uow: _anything_to_write(uow, self._memo)):
            return cancelled
        # A cancelled dependent can break its own dependents: repeat until nothing changes
        # (each pass cancels at least one job, so this ends).
        while True:
            done = self._tx.write(self._pass)
            cancelled.extend(done)
            if not done:
                break
        if cancelled:
            self._on_change()
        return cancelled

    def _pass(self, uow: UnitOfWork) -> list[int]:
        # Read before any write, so the memo applies: a job cancelled below is loaded by
        # its transition, in this transaction.
        jobs = uow.jobs.hold_candidates(memo=self._memo)
        holds = read_holds(uow, jobs, self._memo)
        for job_id, why in sorted(holds.broken.items()):
            uow.jobs.transition(job_id, JobState.CANCELLED, kind="cancelled", reason=why)
            log.info("job cancelled: dependency never satisfied", job_id=job_id, reason=why)
        if not holds.broken:
            # Only the reasons that change: one statement per distinct reason otherwise.
            reasons = {job.id: job.reason for job in jobs}
            uow.jobs.set_waiting_reasons(
                {job_id: why for job_id, why in holds.waiting.items() if reasons[job_id] != why}
            )
        return sorted(holds.broken)
