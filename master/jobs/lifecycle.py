"""Job and task life rules shared by rounds, progress reports, exits and the registry.

Every function runs inside a caller's unit of work and returns the stop orders to send to
workers once that unit of work has committed (state first, then actions).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import structlog

from store import UnitOfWork
from store.domain import Job, JobSpec, Task
from store.states import JobState, ProgramKind, TaskState

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class StopOrder:
    """Stop one task on its worker (StopTask), after the decision is committed."""

    node: str
    job_id: int
    task_index: int
    lease: int
    reason: str
    checkpoint: bool = True
    # The job runs again from its checkpoint: its output says from which.
    resumes: bool = False


def release_tasks(
    uow: UnitOfWork,
    tasks: list[Task],
    reason: str,
    *,
    checkpoint: bool = True,
    resumes: bool = False,
    now: datetime | None = None,
) -> list[StopOrder]:
    """Take tasks out of the job's placement and order their workers to stop them; the
    worker writes `reason` into the job's output once each has stopped.

    Acknowledged tasks become STOPPING until their worker reports the exit; tasks the
    worker may never have received become LOST at once (nothing waits for them).
    """
    orders: list[StopOrder] = []
    for task in tasks:
        if not task.active:
            continue
        if task.state is TaskState.ASSIGNED:
            uow.tasks.set_state(task.id, TaskState.LOST, now=now)
        elif task.state is not TaskState.STOPPING:
            uow.tasks.set_state(task.id, TaskState.STOPPING, now=now)
        orders.append(
            StopOrder(
                task.node, task.job_id, task.task_index, task.lease, reason, checkpoint, resumes
            )
        )
    return orders


def release_finished_job(
    uow: UnitOfWork,
    job_id: int,
    reason: str,
    *,
    finishing: int | None = None,
    now: datetime | None = None,
) -> list[StopOrder]:
    """A job just reached a terminal state: take back every task it still holds.

    Other copies may still run, and a placement decided in the round before the completion
    may not have started yet; left active, such a task would keep its GPUs from later jobs.
    ``finishing`` is the task that reported the completion: it ends by itself.
    """
    tasks = [t for t in uow.tasks.active_for_job(job_id) if t.id != finishing]
    return release_tasks(uow, tasks, reason, checkpoint=False, now=now)


def retry_limit(spec: JobSpec, cluster_default: int) -> int:
    """How many failed attempts of a job are retried: its spec's limit when set, else none
    for an opaque command (like a Slurm batch job that exits non-zero) and the cluster's
    default for managed programs."""
    if spec.max_retries is not None:
        return spec.max_retries
    return 0 if spec.program_kind is ProgramKind.COMMAND else cluster_default


def fail_attempt(
    uow: UnitOfWork,
    job: Job,
    *,
    reason: str,
    exit_code: int | None,
    max_retries: int,
    retryable: bool = True,
    not_retried: str = "",
    round: int = 0,
    now: datetime | None = None,
) -> tuple[Job, list[StopOrder]]:
    """A task of the job failed: stop its other tasks, then retry (PREEMPTED) or give up.

    `max_retries` is the cluster's default (the job's spec may set its own limit);
    `retryable=False` fails the job at once, for a failure no retry can avoid, saying why
    in `not_retried` (default: no placement can run it). An attempt
    ends once: when the job no longer runs (another task's failure ended this attempt
    already), only the remaining tasks are stopped.
    """
    orders = release_tasks(uow, uow.tasks.active_for_job(job.id), reason, checkpoint=False, now=now)
    if job.state is not JobState.RUNNING:
        return job, orders
    limit = retry_limit(job.spec, max_retries)
    if retryable and job.retries < limit:
        attempt = job.retries + 1
        updated = uow.jobs.transition(
            job.id,
            JobState.PREEMPTED,
            kind="retried",
            reason=f"{reason}; retry {attempt} of {limit}",
            round=round,
            exit_code=exit_code,
            count_retry=True,
            at=now,
        )
    else:
        why = (
            f"no retries left ({limit} allowed)"
            if retryable
            else not_retried or "not retried: no placement can run it"
        )
        updated = uow.jobs.transition(
            job.id,
            JobState.FAILED,
            kind="failed",
            reason=f"{reason}; {why}",
            round=round,
            exit_code=exit_code,
            at=now,
        )
    log.info("job attempt failed", job_id=job.id, state=updated.state.value, reason=reason)
    return updated, orders


def lose_job_placement(
    uow: UnitOfWork, job: Job, reason: str, *, kind: str, now: datetime | None = None
) -> tuple[Job, list[StopOrder]]:
    """The job no longer runs where it was placed (lost node, unexpected stop): its other
    tasks stop and it waits to be placed again from its last checkpoint."""
    orders = release_tasks(uow, uow.tasks.active_for_job(job.id), reason, resumes=True, now=now)
    if job.state is JobState.RUNNING:
        job = uow.jobs.transition(
            job.id, JobState.PREEMPTED, kind=kind, reason=reason, count_preemption=True, at=now
        )
        log.info("job lost its placement", job_id=job.id, reason=reason)
    return job, orders


def lose_node(
    uow: UnitOfWork, node: str, reason: str, *, now: datetime | None = None
) -> list[StopOrder]:
    """Fence off every task on a node: they are LOST, their jobs PREEMPTED and their tasks
    on other nodes stopped (a distributed job cannot continue without a member)."""
    orders: list[StopOrder] = []
    lost = uow.tasks.active_on_node(node)
    for task in lost:
        uow.tasks.set_state(task.id, TaskState.LOST, now=now)
    for job_id in sorted({t.job_id for t in lost}):
        job = uow.jobs.get(job_id)
        _, more = lose_job_placement(uow, job, reason, kind="node_lost", now=now)
        orders.extend(o for o in more if o.node != node)
    return orders
