"""Plain, immutable values the client returns: jobs, tasks, nodes, GPUs, cluster status.

Callers never see protobuf messages. Enums are string enums whose values are the lowercase
state names (``"pending"``), which is also how they appear in ``--json`` output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum


class JobState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    PREEMPTED = "preempted"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # Stopped at its time limit (--time); a managed job's checkpoint is kept.
    TIMEOUT = "timeout"
    UNSPECIFIED = "unspecified"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_JOB_STATES

    @classmethod
    def parse(cls, text: str) -> JobState:
        """Accepts the name in any case, and Slurm's short codes (PD, R, CA, CD, F, TO)."""
        key = text.strip().lower()
        found = _JOB_STATE_ALIASES.get(key)
        if found is None:
            try:
                found = cls(key)
            except ValueError:
                names = ", ".join(s.value for s in cls if s is not cls.UNSPECIFIED)
                raise ValueError(f"unknown job state {text!r} (expected one of {names})") from None
        return found


TERMINAL_JOB_STATES: frozenset[JobState] = frozenset(
    {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT}
)
ACTIVE_JOB_STATES: tuple[JobState, ...] = (
    JobState.PENDING,
    JobState.RUNNING,
    JobState.PREEMPTED,
)
# Jobs waiting for GPUs: what `hctl queue --start` lists and forecasts.
WAITING_JOB_STATES: tuple[JobState, ...] = (JobState.PENDING, JobState.PREEMPTED)
_JOB_STATE_ALIASES: dict[str, JobState] = {
    "pd": JobState.PENDING,
    "r": JobState.RUNNING,
    "pr": JobState.PREEMPTED,
    "cd": JobState.COMPLETED,
    "f": JobState.FAILED,
    "ca": JobState.CANCELLED,
    "canceled": JobState.CANCELLED,
    "to": JobState.TIMEOUT,
}


class NodeState(StrEnum):
    READY = "ready"
    DRAINING = "draining"
    DRAINED = "drained"
    UNREACHABLE = "unreachable"
    UNSPECIFIED = "unspecified"


class GpuHealth(StrEnum):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    UNSPECIFIED = "unspecified"


class TaskState(StrEnum):
    ASSIGNED = "assigned"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    EXITED = "exited"
    LOST = "lost"
    UNSPECIFIED = "unspecified"


class ProgramKind(StrEnum):
    """What a job runs: a built-in workload, a managed script, or an opaque command."""

    WORKLOAD = "workload"
    SCRIPT = "script"
    COMMAND = "command"


@dataclass(frozen=True, slots=True)
class Program:
    kind: ProgramKind
    # Set for WORKLOAD only.
    workload: str = ""
    # Set for SCRIPT and COMMAND only.
    argv: tuple[str, ...] = ()

    @classmethod
    def builtin(cls, name: str) -> Program:
        return cls(ProgramKind.WORKLOAD, workload=name)

    @classmethod
    def script(cls, argv: Sequence[str]) -> Program:
        return cls(ProgramKind.SCRIPT, argv=tuple(argv))

    @classmethod
    def command(cls, argv: Sequence[str]) -> Program:
        return cls(ProgramKind.COMMAND, argv=tuple(argv))

    def describe(self) -> str:
        if self.kind is ProgramKind.WORKLOAD:
            return f"workload {self.workload}"
        return f"{self.kind.value} {' '.join(self.argv)}"


@dataclass(frozen=True, slots=True)
class Dependency:
    """A job this one waits for: kind afterok, afterany or afterfail (sbatch's names; an
    array's id stands for all its elements)."""

    kind: str
    job_id: int


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a user asks for; see JobSpec in protos/hadar/v1/common.proto."""

    name: str
    program: Program
    # Training iterations; for an opaque command optional (0: unknown, it runs until it
    # exits).
    iterations: int = 0
    num_gpus: int = 1
    batch_size: int = 0
    priority: float = 1.0
    allowed_gpu_types: tuple[str, ...] = ()
    # None: the master's default (true for managed jobs, false for opaque commands).
    preemptible: bool | None = None
    shareable: bool = False
    # May run as several averaged copies on separate servers (hadare); off unless asked.
    forkable: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str = ""
    checkpoint_dir: str = ""
    job_type: str = ""
    gpu_memory_bytes: int = 0
    # Failed attempts retried before the job is FAILED (0: never, at most 10); None: the
    # master's default (none for opaque commands, the cluster's max_retries otherwise).
    max_retries: int | None = None
    # sbatch's --output and --error: files in the workdir the output is also appended to.
    output: str = ""
    error: str = ""
    # Run time allowed in seconds (sbatch --time), summed over attempts; 0: the cluster's
    # default (none unless the admin set one). See protos.durations for the written forms.
    time_limit_s: int = 0
    # A job array in sbatch --array's syntax (`0-31%4`, see protos.arrays); empty: one job.
    # On an element read back: its array's spec, the array's id and the element's index.
    array: str = ""
    array_job_id: int = 0
    array_index: int | None = None
    # Jobs this one waits for.
    dependencies: tuple[Dependency, ...] = ()
    # Webhook POSTed when the job ends; empty: the owner's default (set_notify_default).
    # Read back from the master it is only scheme://host[:port] (its path may be secret).
    notify_url: str = ""
    # End states that notify; empty: COMPLETED, FAILED and TIMEOUT.
    notify_on: tuple[JobState, ...] = ()
    # No notification at all, not even to the owner's default webhook.
    no_notify: bool = False
    # sbatch --signal: the signal number the job's processes get `warn_before_s` seconds
    # before a preemption or its time limit stops them (0: none; see protos.warnsignal).
    warn_signal: int = 0
    warn_before_s: int = 0
    # An interactive session (hctl run --pty): the command runs under a terminal that its
    # owner attaches to (Client.attach_job); never preempted.
    interactive: bool = False


@dataclass(frozen=True, slots=True)
class Task:
    job_id: int
    task_index: int
    node: str
    gpu_indices: tuple[int, ...]
    gpu_type: str
    lease: int
    state: TaskState
    rank_offset: int
    local_batch_size: int
    accumulation_steps: int
    # 0 when the GPUs are not shared.
    shared_with_job_id: int


@dataclass(frozen=True, slots=True)
class Throughput:
    gpu_type: str
    iterations_per_s: float
    # measured, profile or prior
    source: str


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    spec: JobSpec
    user: str
    state: JobState
    reason: str
    iterations_done: int
    attained_service: float
    submitted_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    tasks: tuple[Task, ...]
    retries: int
    exit_code: int | None
    throughputs: tuple[Throughput, ...]
    version: int
    preemptions: int
    migrations: int
    checkpoint_iterations: int
    # Failed attempts it may retry in all (its spec's or the default); None where the
    # master did not say (only GetJob does).
    retry_limit: int | None = None

    # Whether its program has reported progress (uses the runtime helper). Opaque commands
    # and plain scripts never do: their iterations mean nothing, their exit code does.
    reports_progress: bool = False
    # Seconds run so far (summed over attempts) and GPU-seconds used; only get_job and
    # describe_job fill them (0 elsewhere).
    run_seconds: float = 0.0
    gpu_seconds: float = 0.0
    # The last line a failed attempt wrote to standard error ("" when none failed).
    failure_output: str = ""
    # True when the caller may see only what a queue shows of this job (it is another
    # user's): its command, environment, paths, webhook and failure_output are then empty.
    private_hidden: bool = False
    # Who holds it back from scheduling (hctl hold); "" when nobody does.
    held_by: str = ""
    # Times it was requeued (hctl requeue).
    requeues: int = 0
    # Run time its time limit counts: since its last requeue (get_job and describe_job
    # only; 0 elsewhere).
    limit_run_seconds: float = 0.0
    # When a waiting (pending or preempted) job is expected to start, from the master's
    # newest forecast (the policy run forward over the queue); None when it has no
    # estimate: running or finished, held, waiting on a dependency, or beyond the horizon.
    expected_start: datetime | None = None

    @property
    def progress_measured(self) -> bool:
        """Whether iterations measure this job's progress: built-in workloads, and scripts
        once they have reported progress."""
        return self.reports_progress or self.spec.program.kind is ProgramKind.WORKLOAD

    @property
    def progress(self) -> float:
        """Fraction of the job's iterations done, in [0, 1]."""
        if self.spec.iterations <= 0:
            return 0.0
        return min(1.0, self.iterations_done / self.spec.iterations)

    @property
    def remaining_iterations(self) -> int:
        return max(0, self.spec.iterations - self.iterations_done)


@dataclass(frozen=True, slots=True)
class JobEvent:
    job_id: int
    at: datetime | None
    from_state: JobState
    to_state: JobState
    # submitted, scheduled, preempted, migrated, resized, node_lost, exited, retried,
    # completed, failed, cancelled, timeout, waiting, ...
    kind: str
    reason: str
    # 0 when no round caused it.
    round: int


class DeliveryStatus(StrEnum):
    UNSPECIFIED = "unspecified"
    # Not delivered yet: a first attempt or a retry is to come.
    PENDING = "pending"
    DELIVERED = "delivered"
    # Every attempt failed (or the cluster refused the URL); not retried.
    GAVE_UP = "gave_up"


@dataclass(frozen=True, slots=True)
class Delivery:
    """A webhook call for a job's end, and where it stands."""

    id: int
    job_state: JobState
    # scheme://host[:port] of the webhook.
    endpoint: str
    status: DeliveryStatus
    attempts: int
    created_at: datetime | None
    last_attempt_at: datetime | None
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    last_error: str


@dataclass(frozen=True, slots=True)
class NotifyDefault:
    """A user's default webhook; `configured` is False (and the rest empty) without one."""

    user: str
    configured: bool
    url: str = ""
    on: tuple[JobState, ...] = ()
    updated_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class JobDescription:
    """A job with its full event history, oldest event first, and its webhook calls."""

    job: Job
    events: tuple[JobEvent, ...]
    notifications: tuple[Delivery, ...] = ()


@dataclass(frozen=True, slots=True)
class JobUpdate:
    """One message of a job watch: the job after a change, and the change itself."""

    job: Job
    # None for the initial snapshot of a job.
    event: JobEvent | None


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    type: str
    memory_bytes: int
    device_name: str
    uuid: str
    health: GpuHealth
    utilization: float
    job_ids: tuple[int, ...]
    fake: bool


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    state: NodeState
    address: str
    gpus: tuple[Gpu, ...]
    last_heartbeat: datetime | None
    agent_version: str
    reason: str
    registered_at: datetime | None


@dataclass(frozen=True, slots=True)
class GpuTypeSummary:
    type: str
    total: int
    busy: int
    idle: int
    unavailable: int


@dataclass(frozen=True, slots=True)
class RoundSummary:
    number: int
    started_at: datetime | None
    duration_s: float
    policy: str
    actions: int
    dispatch_failures: int


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    gpus: tuple[GpuTypeSummary, ...]
    # Number of jobs per state; states with no job are absent.
    jobs: Mapping[JobState, int]
    # None before the first round.
    last_round: RoundSummary | None
    policy: str
    round_seconds: float
    version: str
    nodes_ready: int
    nodes_total: int
    next_round_at: datetime | None

    @property
    def queue_length(self) -> int:
        """Jobs waiting for GPUs: pending or preempted."""
        return self.jobs.get(JobState.PENDING, 0) + self.jobs.get(JobState.PREEMPTED, 0)


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    description: str
    default_batch_size: int
    job_type: str


@dataclass(frozen=True, slots=True)
class Identity:
    user: str
    admin: bool


@dataclass(frozen=True, slots=True)
class TokenInfo:
    id: str
    user: str
    admin: bool
    description: str
    created_at: datetime | None
    last_used_at: datetime | None
    revoked: bool


@dataclass(frozen=True, slots=True)
class CreatedToken:
    # Plaintext, returned once by the master and never again.
    token: str
    info: TokenInfo


class UsageGrouping(StrEnum):
    """How a usage report groups GPU-seconds."""

    USER = "user"
    GPU_TYPE = "type"
    DAY = "day"


@dataclass(frozen=True, slots=True)
class UsageRow:
    # The user, the GPU type or the UTC day (YYYY-MM-DD), as grouped.
    key: str
    gpu_seconds: float
    jobs: int
    attempts: int

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600.0


@dataclass(frozen=True, slots=True)
class FairShareRow:
    """One user's fair share (a row of Slurm's sshare)."""

    user: str
    # The user's group in the fair-share settings; empty when in none.
    group: str
    # The share as configured, and the fraction of the cluster among active users (0-1).
    raw_share: float
    share: float
    # Decayed GPU-seconds, and their fraction of all listed users' decayed usage (0-1).
    usage_gpu_seconds: float
    usage: float
    # 2^(-usage/share): 1 for no usage, 0.5 at exactly the share.
    factor: float
    # GPUs held now, and the user's quota (0: no limit).
    gpus: int
    quota: int


@dataclass(frozen=True, slots=True)
class FairShareReport:
    """Fair share as the master's rounds see it."""

    # Whether the rounds apply shares (quotas hold either way).
    enabled: bool
    half_life_s: float
    rows: tuple[FairShareRow, ...]


@dataclass(frozen=True, slots=True)
class UsageReport:
    """GPU-seconds used in a period, grouped (like Slurm's sreport)."""

    grouping: UsageGrouping
    rows: tuple[UsageRow, ...]
    total_gpu_seconds: float
    since: datetime | None
    until: datetime | None

    @property
    def total_gpu_hours(self) -> float:
        return self.total_gpu_seconds / 3600.0


@dataclass(frozen=True, slots=True)
class JobRecord:
    """An ended job and what it used (like a line of Slurm's sacct)."""

    job: Job
    # Seconds it ran, summed over its attempts, and the GPU-seconds they used.
    run_seconds: float
    gpu_seconds: float
    attempts: int
    gpu_types: tuple[str, ...]

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600.0


class LogStream(StrEnum):
    STDOUT = "stdout"
    STDERR = "stderr"


@dataclass(frozen=True, slots=True)
class TerminalInput:
    """What a terminal sends to an interactive job: bytes typed, and/or its new window
    size as (rows, columns)."""

    data: bytes = b""
    size: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class TerminalOutput:
    """What an interactive job's terminal shows; the last one carries how its command
    exited (`exit_code`, negative: killed by that signal) and no data."""

    data: bytes = b""
    exited: bool = False
    exit_code: int = 0


@dataclass(frozen=True, slots=True)
class LogChunk:
    job_id: int
    task_index: int
    rank: int
    node: str
    data: bytes
    offset: int
    # The placement that wrote it: attempts count from 1; lease is its fencing token.
    attempt: int = 0
    lease: int = 0
    stream: LogStream = LogStream.STDOUT
    # On an attempt's opening chunk (no data): why the attempt never started, if it did not.
    start_failure: str = ""
    # On an attempt's opening chunk: how many attempts the job has had (so far, when
    # following), and the nodes the attempt was placed on.
    attempts: int = 0
    nodes: tuple[str, ...] = ()
