"""Plain, frozen domain objects: what the repositories return. No ORM object leaves the store."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from store.states import (
    ExitKind,
    GpuHealth,
    JobState,
    NodeState,
    NotificationStatus,
    ProgramKind,
    TaskState,
)


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a user asked for, validated by the master before it reaches the store."""

    name: str
    num_gpus: int
    iterations: int
    program_kind: ProgramKind
    # Workload name for built-in workloads, empty otherwise.
    workload: str = ""
    # Command line for scripts and opaque commands, empty for workloads.
    argv: tuple[str, ...] = ()
    batch_size: int = 0
    priority: float = 1.0
    allowed_gpu_types: tuple[str, ...] = ()
    preemptible: bool = True
    shareable: bool = False
    # May run as several averaged copies (HadarE); only when the job asked for it.
    forkable: bool = False
    env: tuple[tuple[str, str], ...] = ()
    workdir: str = ""
    checkpoint_dir: str = ""
    job_type: str = ""
    gpu_memory_bytes: int = 0
    # Failed attempts to retry before the job is FAILED; None means the default (see
    # master.jobs.lifecycle.retry_limit).
    max_retries: int | None = None
    # sbatch-style --output and --error file patterns (see common.proto JobSpec).
    output: str = ""
    error: str = ""
    # Run time allowed in seconds (sbatch --time), summed over attempts; 0 means none.
    time_limit_s: int = 0
    # A job array's element: its array's spec as submitted (`0-31%4`), the array's id (its
    # first element's), this element's index and the array's cap on running elements
    # (0: none). Empty/0/None for a job that is no array's element.
    array: str = ""
    array_job_id: int = 0
    array_index: int | None = None
    array_max_running: int = 0
    # (kind, job id) pairs this job waits for; kinds as protos.arrays.DEPENDENCY_KINDS.
    dependencies: tuple[tuple[str, int], ...] = ()
    # Webhook told when the job ends (see store.notifications); empty means the owner's
    # default, if any. `notify_on`: the end states that notify; empty means the default.
    notify_url: str = ""
    notify_on: tuple[JobState, ...] = ()
    # Not even the owner's default webhook is told of this job's end.
    no_notify: bool = False
    # sbatch --signal: the signal number its processes get `warn_before_s` seconds before a
    # preemption or its time limit stops them; 0: none.
    warn_signal: int = 0
    warn_before_s: int = 0
    # An interactive session (hctl run --pty): its command runs under a terminal that its
    # owner attaches to; never preempted.
    interactive: bool = False


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    user: str
    spec: JobSpec
    state: JobState
    reason: str
    iterations_done: int
    checkpoint_iterations: int
    attained_service: float
    retries: int
    exit_code: int | None
    preemptions: int
    migrations: int
    submitted_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    version: int
    # Whether any task of the job ever reported progress (it uses the runtime helper).
    reports_progress: bool = False
    # Measured seconds from a placement to its first progress (None: not yet measured).
    restart_s: float | None = None
    # The last line a failed attempt wrote to standard error (private to owner and admins).
    failure_output: str = ""
    # Who holds it back from scheduling (hctl hold); empty when nobody does.
    held_by: str = ""
    # Times it was requeued, and its run time before the last requeue (not counted by its
    # time limit).
    requeues: int = 0
    requeued_run_s: float = 0.0


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job to insert; the store assigns id, state PENDING and timestamps."""

    user: str
    spec: JobSpec
    idempotency_key: str = ""
    # Stored with the key: a later submission with the key and another digest is refused
    # (empty: not compared).
    spec_digest: str = ""
    # Stored held by its submitter (hctl submit --hold).
    hold: bool = False


@dataclass(frozen=True, slots=True)
class JobEvent:
    id: int
    job_id: int
    at: datetime
    from_state: JobState
    to_state: JobState
    kind: str
    reason: str
    round: int


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    type: str
    memory_bytes: int = 0
    device_name: str = ""
    uuid: str = ""
    health: GpuHealth = GpuHealth.HEALTHY
    utilization: float = 0.0
    fake: bool = False


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    address: str
    state: NodeState
    reason: str
    agent_version: str
    workloads: tuple[str, ...]
    gpus: tuple[Gpu, ...]
    registered_at: datetime
    last_heartbeat: datetime


@dataclass(frozen=True, slots=True)
class Task:
    id: int
    job_id: int
    task_index: int
    node: str
    lease: int
    gpu_indices: tuple[int, ...]
    gpu_type: str
    state: TaskState
    rank_offset: int
    local_batch_sizes: tuple[int, ...]
    accumulation_steps: int
    num_copies: int
    copy_index: int
    shared_with_job_id: int
    round: int
    iteration_budget: int
    created_at: datetime
    acknowledged_at: datetime | None
    exit_kind: ExitKind | None
    exit_code: int | None
    # When it exited or was written off (EXITED, LOST).
    finished_at: datetime | None = None

    @property
    def active(self) -> bool:
        return self.state not in (TaskState.EXITED, TaskState.LOST)


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """What one attempt of a job used on one node: a task from its start to its end.

    Stored when the task ends; a task still running is reported with `ended_at` None.
    """

    task_id: int
    job_id: int
    user: str
    node: str
    lease: int
    gpu_type: str
    num_gpus: int
    started_at: datetime
    ended_at: datetime | None
    # The task's final state (EXITED or LOST), how its processes ended and their exit code.
    end_state: TaskState | None = None
    exit_kind: ExitKind | None = None
    exit_code: int | None = None

    def seconds(self, now: datetime) -> float:
        end = self.ended_at or now
        return max(0.0, (end - self.started_at).total_seconds())

    def gpu_seconds(self, now: datetime) -> float:
        return self.seconds(now) * self.num_gpus


@dataclass(frozen=True, slots=True)
class NewTask:
    job_id: int
    task_index: int
    node: str
    lease: int
    gpu_indices: tuple[int, ...]
    gpu_type: str
    rank_offset: int
    local_batch_sizes: tuple[int, ...]
    accumulation_steps: int = 1
    num_copies: int = 1
    copy_index: int = 0
    shared_with_job_id: int = 0
    round: int = 0
    iteration_budget: int = 0
    state: TaskState = TaskState.ASSIGNED


@dataclass(frozen=True, slots=True)
class Round:
    number: int
    policy: str
    started_at: datetime
    duration_s: float
    plan: dict[str, object]
    actions: int
    dispatch_failures: int


@dataclass(frozen=True, slots=True)
class ThroughputMeasurement:
    job_type: str
    gpu_type: str
    num_gpus: int
    iterations_per_s: float
    count: int
    source: str
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class User:
    name: str
    admin: bool
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ApiToken:
    id: str
    user: str
    admin: bool
    description: str
    created_at: datetime
    last_used_at: datetime | None
    revoked: bool


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A freshly created token: the plaintext is returned once and never stored."""

    plaintext: str
    info: ApiToken


@dataclass(frozen=True, slots=True)
class JobCounts:
    by_state: dict[JobState, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NotifyDefault:
    """A user's own webhook, used for every job of theirs that names none."""

    user: str
    url: str
    # End states that notify; empty means the default (store.notifications.DEFAULT_NOTIFY_ON).
    on: tuple[JobState, ...]
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class NotificationAttempt:
    at: datetime
    # HTTP status of the answer; 0 when none came (refused, timed out, not sent).
    status_code: int
    error: str


@dataclass(frozen=True, slots=True)
class Notification:
    """One webhook call owed for a job's end (a row of the outbox)."""

    id: int
    job_id: int
    user: str
    url: str
    job_state: JobState
    status: NotificationStatus
    attempts: int
    created_at: datetime
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    last_error: str
    history: tuple[NotificationAttempt, ...] = ()
