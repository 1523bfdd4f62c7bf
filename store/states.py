"""States of jobs, tasks, nodes and GPUs, and the job life's allowed transitions.

The terminal job states are listed here and nowhere else.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PREEMPTED = "PREEMPTED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    # Reached its time limit (JobSpec.time_limit_s of run time) and was stopped.
    TIMEOUT = "TIMEOUT"


TERMINAL_JOB_STATES: frozenset[JobState] = frozenset(
    {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT}
)

# PENDING -> RUNNING <-> PREEMPTED -> COMPLETED | FAILED | CANCELLED | TIMEOUT. A job may
# finish from PREEMPTED when its last task reports completion after the master decided to
# stop it, and a pending job may fail when it can never be placed (for example its GPU
# types are gone). TIMEOUT needs run time, so only a job that has run (RUNNING, or
# PREEMPTED between attempts) can reach it.
ALLOWED_JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.RUNNING, JobState.FAILED, JobState.CANCELLED}),
    JobState.RUNNING: frozenset(
        {
            JobState.PREEMPTED,
            JobState.COMPLETED,
            JobState.FAILED,
            JobState.CANCELLED,
            JobState.TIMEOUT,
        }
    ),
    JobState.PREEMPTED: frozenset(
        {
            JobState.RUNNING,
            JobState.COMPLETED,
            JobState.FAILED,
            JobState.CANCELLED,
            JobState.TIMEOUT,
        }
    ),
    JobState.COMPLETED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
    JobState.TIMEOUT: frozenset(),
}


# The one way back to PENDING, outside the life above: a requeue (hctl requeue) of a job
# that runs, waits to run again, or ended otherwise than COMPLETED. It runs again, from its
# last checkpoint when it has one.
REQUEUABLE_JOB_STATES: frozenset[JobState] = frozenset(
    {
        JobState.RUNNING,
        JobState.PREEMPTED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.TIMEOUT,
    }
)


def is_terminal(state: JobState) -> bool:
    return state in TERMINAL_JOB_STATES


def can_transition(from_state: JobState, to_state: JobState) -> bool:
    return to_state in ALLOWED_JOB_TRANSITIONS[from_state]


class TaskState(StrEnum):
    ASSIGNED = "ASSIGNED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    EXITED = "EXITED"
    LOST = "LOST"


# Tasks in these states no longer hold GPUs.
FINISHED_TASK_STATES: frozenset[TaskState] = frozenset({TaskState.EXITED, TaskState.LOST})

# A task's life. ASSIGNED (decided, not yet acknowledged) -> STARTING (acknowledged) ->
# RUNNING (reported progress) -> STOPPING (asked to stop) -> EXITED (its worker reported
# the exit). Progress or an exit report may overtake the acknowledgement. Any active task
# becomes LOST when its node is lost or its worker no longer runs it; a LOST task becomes
# STOPPING when its node returns still running it, and EXITED when its completion is
# reported late. EXITED is final.
ALLOWED_TASK_TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    TaskState.ASSIGNED: frozenset(
        {TaskState.STARTING, TaskState.RUNNING, TaskState.EXITED, TaskState.LOST}
    ),
    TaskState.STARTING: frozenset(
        {TaskState.RUNNING, TaskState.STOPPING, TaskState.EXITED, TaskState.LOST}
    ),
    TaskState.RUNNING: frozenset({TaskState.STOPPING, TaskState.EXITED, TaskState.LOST}),
    TaskState.STOPPING: frozenset({TaskState.EXITED, TaskState.LOST}),
    TaskState.LOST: frozenset({TaskState.STOPPING, TaskState.EXITED}),
    TaskState.EXITED: frozenset(),
}


def can_task_transition(from_state: TaskState, to_state: TaskState) -> bool:
    return to_state in ALLOWED_TASK_TRANSITIONS[from_state]


class NodeState(StrEnum):
    READY = "READY"
    DRAINING = "DRAINING"
    DRAINED = "DRAINED"
    UNREACHABLE = "UNREACHABLE"


class GpuHealth(StrEnum):
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"


class ProgramKind(StrEnum):
    WORKLOAD = "workload"
    SCRIPT = "script"
    COMMAND = "command"


class ExitKind(StrEnum):
    COMPLETED = "COMPLETED"
    STOPPED = "STOPPED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    LEASE_DONE = "LEASE_DONE"


class NotificationStatus(StrEnum):
    # Not yet delivered; tried again at its next attempt time.
    PENDING = "PENDING"
    # The endpoint answered 2xx.
    DELIVERED = "DELIVERED"
    # Every attempt failed, or webhooks were refused by the cluster's settings; not retried.
    GAVE_UP = "GAVE_UP"


# End states that notify when a job or a user's default names none (like Slurm's END and
# FAIL): a cancellation was asked for by someone who already knows.
DEFAULT_NOTIFY_ON: tuple[JobState, ...] = (JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT)
