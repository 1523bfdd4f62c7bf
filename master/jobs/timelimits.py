"""Time limits (sbatch --time): what a job may ask for, and stopping jobs that reach theirs.

A job's run time is the time its tasks ran, summed over its attempts: from the worker's
acknowledgement of a placement to the end of that placement, the longest task of each
attempt counting once. Waiting in the queue, or preempted between attempts, does not count.
A requeue (hctl requeue) starts a new run: its time limit counts anew from there, as
Slurm's requeue does. A job whose run time reaches its limit is stopped the way a
preemption stops it (SIGTERM: a managed job saves a checkpoint, an opaque command gets the
grace to finish, then SIGKILL) and ends TIMEOUT. A job with a warning signal (sbatch
--signal SIG@SECONDS) is stopped SECONDS before its limit: its worker sends the signal then,
and SIGTERM at the limit. The daemon runs `TimeLimitEnforcer.check` on a timer, between
rounds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime

import structlog

from master.errors import InvalidArgumentError
from master.jobs.lifecycle import StopOrder, release_tasks
from master.jobs.usage import run_seconds
from master.nodes.dispatch import Dispatcher
from master.process.transactions import Transactor
from protos.durations import format_duration
from store import UnitOfWork
from store.domain import Job, JobSpec, UsageRecord
from store.states import JobState

log = structlog.get_logger(__name__)


def apply_time_limit(spec: JobSpec, *, max_s: int, default_s: int) -> JobSpec:
    """The spec with the limit the job runs under: its own, else the cluster's default.
    InvalidArgumentError when it asks for more than the cluster's maximum."""
    if spec.time_limit_s == 0:
        return dataclasses.replace(spec, time_limit_s=default_s) if default_s else spec
    if max_s and spec.time_limit_s > max_s:
        raise InvalidArgumentError(
            "spec.time_limit_s",
            f"time limit {format_duration(spec.time_limit_s)} is above the cluster's maximum "
            f"max_time_limit = {format_duration(max_s)}",
        )
    return spec


def timeout_reason(limit_s: int, ran_s: float) -> str:
    return (
        f"time limit {format_duration(limit_s)} reached after {format_duration(ran_s)} of run time"
    )


def stop_due(spec: JobSpec, ran_s: float) -> bool:
    """Whether a job that ran `ran_s` seconds is to be stopped for its limit now. A job
    warned before its stop (sbatch --signal) is stopped that much early: its worker sends
    the warning at once and SIGTERM when the limit is reached."""
    return ran_s + spec.warn_before_s >= spec.time_limit_s


def over_limit(uow: UnitOfWork, now: datetime) -> list[tuple[Job, float]]:
    """Jobs still running or waiting to run again whose run time reached their limit, with
    that run time."""
    jobs = uow.jobs.time_limited([JobState.RUNNING, JobState.PREEMPTED])
    if not jobs:
        return []
    used: dict[int, list[UsageRecord]] = {}
    for record in uow.usage.for_jobs([j.id for j in jobs]):
        used.setdefault(record.job_id, []).append(record)
    due = []
    for job in jobs:
        # A requeue starts a new run, as Slurm's does: the run time before it is not counted.
        ran = run_seconds(used.get(job.id, ()), now) - job.requeued_run_s
        if stop_due(job.spec, ran):
            due.append((job, ran))
    return due


class TimeLimitEnforcer:
    def __init__(
        self,
        tx: Transactor,
        dispatcher: Dispatcher,
        on_change: Callable[[], None],
        on_capacity: Callable[[bool], None],
    ) -> None:
        self._tx = tx
        self._dispatcher = dispatcher
        self._on_change = on_change
        self._on_capacity = on_capacity

    def check(self, now: datetime | None = None) -> list[int]:
        """Stop every job that reached its time limit; returns their ids."""
        at = now or datetime.now(UTC)
        # Read first: the write below takes the job lock rounds also need, so it is taken
        # only when some job is due.
        if not self._tx.read(lambda uow: over_limit(uow, at)):
            return []

        def change(uow: UnitOfWork) -> tuple[list[int], list[StopOrder]]:
            timed_out: list[int] = []
            orders: list[StopOrder] = []
            # Again under the lock: a job may have ended since the read.
            for job, ran in over_limit(uow, at):
                reason = timeout_reason(job.spec.time_limit_s, ran)
                # The state is stored before any worker hears of it: the stop orders go out
                # only after this commits. Stopping as a preemption does (SIGTERM) lets a
                # managed job save its checkpoint.
                orders.extend(
                    release_tasks(
                        uow, uow.tasks.active_for_job(job.id), reason, checkpoint=True, now=at
                    )
                )
                uow.jobs.transition(job.id, JobState.TIMEOUT, kind="timeout", reason=reason, at=at)
                timed_out.append(job.id)
            return timed_out, orders

        timed_out, orders = self._tx.write(change)
        if timed_out:
            for job_id in timed_out:
                log.info("job reached its time limit", job_id=job_id)
            self._dispatcher.send_stops(orders)
            self._on_change()
            self._on_capacity(True)
        return timed_out
