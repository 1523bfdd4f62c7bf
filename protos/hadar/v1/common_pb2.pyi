import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_PENDING: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_PREEMPTED: _ClassVar[JobState]
    JOB_STATE_COMPLETED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]
    JOB_STATE_TIMEOUT: _ClassVar[JobState]

class NodeState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NODE_STATE_UNSPECIFIED: _ClassVar[NodeState]
    NODE_STATE_READY: _ClassVar[NodeState]
    NODE_STATE_DRAINING: _ClassVar[NodeState]
    NODE_STATE_DRAINED: _ClassVar[NodeState]
    NODE_STATE_UNREACHABLE: _ClassVar[NodeState]

class GpuHealth(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GPU_HEALTH_UNSPECIFIED: _ClassVar[GpuHealth]
    GPU_HEALTH_HEALTHY: _ClassVar[GpuHealth]
    GPU_HEALTH_UNHEALTHY: _ClassVar[GpuHealth]

class TaskState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATE_UNSPECIFIED: _ClassVar[TaskState]
    TASK_STATE_ASSIGNED: _ClassVar[TaskState]
    TASK_STATE_STARTING: _ClassVar[TaskState]
    TASK_STATE_RUNNING: _ClassVar[TaskState]
    TASK_STATE_STOPPING: _ClassVar[TaskState]
    TASK_STATE_EXITED: _ClassVar[TaskState]
    TASK_STATE_LOST: _ClassVar[TaskState]

class ExitKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXIT_KIND_UNSPECIFIED: _ClassVar[ExitKind]
    EXIT_KIND_COMPLETED: _ClassVar[ExitKind]
    EXIT_KIND_STOPPED: _ClassVar[ExitKind]
    EXIT_KIND_FAILED: _ClassVar[ExitKind]
    EXIT_KIND_KILLED: _ClassVar[ExitKind]
    EXIT_KIND_LEASE_DONE: _ClassVar[ExitKind]

class LogStream(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOG_STREAM_UNSPECIFIED: _ClassVar[LogStream]
    LOG_STREAM_STDOUT: _ClassVar[LogStream]
    LOG_STREAM_STDERR: _ClassVar[LogStream]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_PENDING: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_PREEMPTED: JobState
JOB_STATE_COMPLETED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLED: JobState
JOB_STATE_TIMEOUT: JobState
NODE_STATE_UNSPECIFIED: NodeState
NODE_STATE_READY: NodeState
NODE_STATE_DRAINING: NodeState
NODE_STATE_DRAINED: NodeState
NODE_STATE_UNREACHABLE: NodeState
GPU_HEALTH_UNSPECIFIED: GpuHealth
GPU_HEALTH_HEALTHY: GpuHealth
GPU_HEALTH_UNHEALTHY: GpuHealth
TASK_STATE_UNSPECIFIED: TaskState
TASK_STATE_ASSIGNED: TaskState
TASK_STATE_STARTING: TaskState
TASK_STATE_RUNNING: TaskState
TASK_STATE_STOPPING: TaskState
TASK_STATE_EXITED: TaskState
TASK_STATE_LOST: TaskState
EXIT_KIND_UNSPECIFIED: ExitKind
EXIT_KIND_COMPLETED: ExitKind
EXIT_KIND_STOPPED: ExitKind
EXIT_KIND_FAILED: ExitKind
EXIT_KIND_KILLED: ExitKind
EXIT_KIND_LEASE_DONE: ExitKind
LOG_STREAM_UNSPECIFIED: LogStream
LOG_STREAM_STDOUT: LogStream
LOG_STREAM_STDERR: LogStream

class Gpu(_message.Message):
    __slots__ = ("index", "type", "memory_bytes", "device_name", "uuid", "health", "utilization", "job_ids", "fake")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_NAME_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    FAKE_FIELD_NUMBER: _ClassVar[int]
    index: int
    type: str
    memory_bytes: int
    device_name: str
    uuid: str
    health: GpuHealth
    utilization: float
    job_ids: _containers.RepeatedScalarFieldContainer[int]
    fake: bool
    def __init__(self, index: _Optional[int] = ..., type: _Optional[str] = ..., memory_bytes: _Optional[int] = ..., device_name: _Optional[str] = ..., uuid: _Optional[str] = ..., health: _Optional[_Union[GpuHealth, str]] = ..., utilization: _Optional[float] = ..., job_ids: _Optional[_Iterable[int]] = ..., fake: _Optional[bool] = ...) -> None: ...

class WorkloadProgram(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ScriptProgram(_message.Message):
    __slots__ = ("argv",)
    ARGV_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, argv: _Optional[_Iterable[str]] = ...) -> None: ...

class CommandProgram(_message.Message):
    __slots__ = ("argv",)
    ARGV_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, argv: _Optional[_Iterable[str]] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("name", "num_gpus", "iterations", "batch_size", "priority", "allowed_gpu_types", "preemptible", "shareable", "workload", "script", "command", "env", "workdir", "checkpoint_dir", "job_type", "gpu_memory_bytes", "max_retries", "output", "error", "forkable", "time_limit_s", "array", "array_job_id", "array_index", "after_ok", "after_any", "after_fail", "notify_url", "notify_on", "no_notify", "warn_signal", "warn_before_s", "interactive")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_GPU_TYPES_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIBLE_FIELD_NUMBER: _ClassVar[int]
    SHAREABLE_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    SCRIPT_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_DIR_FIELD_NUMBER: _ClassVar[int]
    JOB_TYPE_FIELD_NUMBER: _ClassVar[int]
    GPU_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FORKABLE_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_S_FIELD_NUMBER: _ClassVar[int]
    ARRAY_FIELD_NUMBER: _ClassVar[int]
    ARRAY_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ARRAY_INDEX_FIELD_NUMBER: _ClassVar[int]
    AFTER_OK_FIELD_NUMBER: _ClassVar[int]
    AFTER_ANY_FIELD_NUMBER: _ClassVar[int]
    AFTER_FAIL_FIELD_NUMBER: _ClassVar[int]
    NOTIFY_URL_FIELD_NUMBER: _ClassVar[int]
    NOTIFY_ON_FIELD_NUMBER: _ClassVar[int]
    NO_NOTIFY_FIELD_NUMBER: _ClassVar[int]
    WARN_SIGNAL_FIELD_NUMBER: _ClassVar[int]
    WARN_BEFORE_S_FIELD_NUMBER: _ClassVar[int]
    INTERACTIVE_FIELD_NUMBER: _ClassVar[int]
    name: str
    num_gpus: int
    iterations: int
    batch_size: int
    priority: float
    allowed_gpu_types: _containers.RepeatedScalarFieldContainer[str]
    preemptible: bool
    shareable: bool
    workload: WorkloadProgram
    script: ScriptProgram
    command: CommandProgram
    env: _containers.ScalarMap[str, str]
    workdir: str
    checkpoint_dir: str
    job_type: str
    gpu_memory_bytes: int
    max_retries: int
    output: str
    error: str
    forkable: bool
    time_limit_s: int
    array: str
    array_job_id: int
    array_index: int
    after_ok: _containers.RepeatedScalarFieldContainer[int]
    after_any: _containers.RepeatedScalarFieldContainer[int]
    after_fail: _containers.RepeatedScalarFieldContainer[int]
    notify_url: str
    notify_on: _containers.RepeatedScalarFieldContainer[JobState]
    no_notify: bool
    warn_signal: int
    warn_before_s: int
    interactive: bool
    def __init__(self, name: _Optional[str] = ..., num_gpus: _Optional[int] = ..., iterations: _Optional[int] = ..., batch_size: _Optional[int] = ..., priority: _Optional[float] = ..., allowed_gpu_types: _Optional[_Iterable[str]] = ..., preemptible: _Optional[bool] = ..., shareable: _Optional[bool] = ..., workload: _Optional[_Union[WorkloadProgram, _Mapping]] = ..., script: _Optional[_Union[ScriptProgram, _Mapping]] = ..., command: _Optional[_Union[CommandProgram, _Mapping]] = ..., env: _Optional[_Mapping[str, str]] = ..., workdir: _Optional[str] = ..., checkpoint_dir: _Optional[str] = ..., job_type: _Optional[str] = ..., gpu_memory_bytes: _Optional[int] = ..., max_retries: _Optional[int] = ..., output: _Optional[str] = ..., error: _Optional[str] = ..., forkable: _Optional[bool] = ..., time_limit_s: _Optional[int] = ..., array: _Optional[str] = ..., array_job_id: _Optional[int] = ..., array_index: _Optional[int] = ..., after_ok: _Optional[_Iterable[int]] = ..., after_any: _Optional[_Iterable[int]] = ..., after_fail: _Optional[_Iterable[int]] = ..., notify_url: _Optional[str] = ..., notify_on: _Optional[_Iterable[_Union[JobState, str]]] = ..., no_notify: _Optional[bool] = ..., warn_signal: _Optional[int] = ..., warn_before_s: _Optional[int] = ..., interactive: _Optional[bool] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("job_id", "task_index", "node", "gpu_indices", "gpu_type", "lease", "state", "rank_offset", "local_batch_size", "accumulation_steps", "shared_with_job_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    GPU_INDICES_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RANK_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOCAL_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    ACCUMULATION_STEPS_FIELD_NUMBER: _ClassVar[int]
    SHARED_WITH_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    task_index: int
    node: str
    gpu_indices: _containers.RepeatedScalarFieldContainer[int]
    gpu_type: str
    lease: int
    state: TaskState
    rank_offset: int
    local_batch_size: int
    accumulation_steps: int
    shared_with_job_id: int
    def __init__(self, job_id: _Optional[int] = ..., task_index: _Optional[int] = ..., node: _Optional[str] = ..., gpu_indices: _Optional[_Iterable[int]] = ..., gpu_type: _Optional[str] = ..., lease: _Optional[int] = ..., state: _Optional[_Union[TaskState, str]] = ..., rank_offset: _Optional[int] = ..., local_batch_size: _Optional[int] = ..., accumulation_steps: _Optional[int] = ..., shared_with_job_id: _Optional[int] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("job_id", "at", "from_state", "to_state", "kind", "reason", "round")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    at: _timestamp_pb2.Timestamp
    from_state: JobState
    to_state: JobState
    kind: str
    reason: str
    round: int
    def __init__(self, job_id: _Optional[int] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., from_state: _Optional[_Union[JobState, str]] = ..., to_state: _Optional[_Union[JobState, str]] = ..., kind: _Optional[str] = ..., reason: _Optional[str] = ..., round: _Optional[int] = ...) -> None: ...

class Throughput(_message.Message):
    __slots__ = ("gpu_type", "iterations_per_s", "source")
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_PER_S_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    gpu_type: str
    iterations_per_s: float
    source: str
    def __init__(self, gpu_type: _Optional[str] = ..., iterations_per_s: _Optional[float] = ..., source: _Optional[str] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "spec", "user", "state", "reason", "iterations_done", "attained_service", "submitted_at", "started_at", "finished_at", "tasks", "retries", "exit_code", "throughputs", "version", "preemptions", "migrations", "checkpoint_iterations", "reports_progress", "retry_limit", "run_seconds", "gpu_seconds", "failure_output", "private_hidden", "held_by", "requeues", "limit_run_seconds", "expected_start")
    ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_DONE_FIELD_NUMBER: _ClassVar[int]
    ATTAINED_SERVICE_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUTS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    MIGRATIONS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    REPORTS_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RETRY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    RUN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    GPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    PRIVATE_HIDDEN_FIELD_NUMBER: _ClassVar[int]
    HELD_BY_FIELD_NUMBER: _ClassVar[int]
    REQUEUES_FIELD_NUMBER: _ClassVar[int]
    LIMIT_RUN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_START_FIELD_NUMBER: _ClassVar[int]
    id: int
    spec: JobSpec
    user: str
    state: JobState
    reason: str
    iterations_done: int
    attained_service: float
    submitted_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    retries: int
    exit_code: int
    throughputs: _containers.RepeatedCompositeFieldContainer[Throughput]
    version: int
    preemptions: int
    migrations: int
    checkpoint_iterations: int
    reports_progress: bool
    retry_limit: int
    run_seconds: float
    gpu_seconds: float
    failure_output: str
    private_hidden: bool
    held_by: str
    requeues: int
    limit_run_seconds: float
    expected_start: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[int] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., user: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., reason: _Optional[str] = ..., iterations_done: _Optional[int] = ..., attained_service: _Optional[float] = ..., submitted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., retries: _Optional[int] = ..., exit_code: _Optional[int] = ..., throughputs: _Optional[_Iterable[_Union[Throughput, _Mapping]]] = ..., version: _Optional[int] = ..., preemptions: _Optional[int] = ..., migrations: _Optional[int] = ..., checkpoint_iterations: _Optional[int] = ..., reports_progress: _Optional[bool] = ..., retry_limit: _Optional[int] = ..., run_seconds: _Optional[float] = ..., gpu_seconds: _Optional[float] = ..., failure_output: _Optional[str] = ..., private_hidden: _Optional[bool] = ..., held_by: _Optional[str] = ..., requeues: _Optional[int] = ..., limit_run_seconds: _Optional[float] = ..., expected_start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("name", "state", "address", "gpus", "last_heartbeat", "agent_version", "reason", "registered_at")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: NodeState
    address: str
    gpus: _containers.RepeatedCompositeFieldContainer[Gpu]
    last_heartbeat: _timestamp_pb2.Timestamp
    agent_version: str
    reason: str
    registered_at: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., state: _Optional[_Union[NodeState, str]] = ..., address: _Optional[str] = ..., gpus: _Optional[_Iterable[_Union[Gpu, _Mapping]]] = ..., last_heartbeat: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., agent_version: _Optional[str] = ..., reason: _Optional[str] = ..., registered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WorkerTask(_message.Message):
    __slots__ = ("job_id", "task_index", "lease", "state", "gpu_indices", "iterations_done", "pids")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    GPU_INDICES_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_DONE_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    task_index: int
    lease: int
    state: TaskState
    gpu_indices: _containers.RepeatedScalarFieldContainer[int]
    iterations_done: int
    pids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, job_id: _Optional[int] = ..., task_index: _Optional[int] = ..., lease: _Optional[int] = ..., state: _Optional[_Union[TaskState, str]] = ..., gpu_indices: _Optional[_Iterable[int]] = ..., iterations_done: _Optional[int] = ..., pids: _Optional[_Iterable[int]] = ...) -> None: ...

class LogChunk(_message.Message):
    __slots__ = ("job_id", "task_index", "rank", "node", "data", "offset", "lease", "stream", "attempt", "start_failure", "attempts", "nodes")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    START_FAILURE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    task_index: int
    rank: int
    node: str
    data: bytes
    offset: int
    lease: int
    stream: LogStream
    attempt: int
    start_failure: str
    attempts: int
    nodes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_id: _Optional[int] = ..., task_index: _Optional[int] = ..., rank: _Optional[int] = ..., node: _Optional[str] = ..., data: _Optional[bytes] = ..., offset: _Optional[int] = ..., lease: _Optional[int] = ..., stream: _Optional[_Union[LogStream, str]] = ..., attempt: _Optional[int] = ..., start_failure: _Optional[str] = ..., attempts: _Optional[int] = ..., nodes: _Optional[_Iterable[str]] = ...) -> None: ...

class WindowSize(_message.Message):
    __slots__ = ("rows", "cols")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    rows: int
    cols: int
    def __init__(self, rows: _Optional[int] = ..., cols: _Optional[int] = ...) -> None: ...

class TerminalInput(_message.Message):
    __slots__ = ("job_id", "lease", "data", "size")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    lease: int
    data: bytes
    size: WindowSize
    def __init__(self, job_id: _Optional[int] = ..., lease: _Optional[int] = ..., data: _Optional[bytes] = ..., size: _Optional[_Union[WindowSize, _Mapping]] = ...) -> None: ...

class TerminalOutput(_message.Message):
    __slots__ = ("data", "exited", "exit_code")
    DATA_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    exited: bool
    exit_code: int
    def __init__(self, data: _Optional[bytes] = ..., exited: _Optional[bool] = ..., exit_code: _Optional[int] = ...) -> None: ...
