import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from protos.hadar.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RegisterWorkerRequest(_message.Message):
    __slots__ = ("node", "address", "gpus", "agent_version", "workloads", "tasks", "ended")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    WORKLOADS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    node: str
    address: str
    gpus: _containers.RepeatedCompositeFieldContainer[_common_pb2.Gpu]
    agent_version: str
    workloads: _containers.RepeatedScalarFieldContainer[str]
    tasks: _containers.RepeatedCompositeFieldContainer[_common_pb2.WorkerTask]
    ended: _containers.RepeatedCompositeFieldContainer[TaskRef]
    def __init__(self, node: _Optional[str] = ..., address: _Optional[str] = ..., gpus: _Optional[_Iterable[_Union[_common_pb2.Gpu, _Mapping]]] = ..., agent_version: _Optional[str] = ..., workloads: _Optional[_Iterable[str]] = ..., tasks: _Optional[_Iterable[_Union[_common_pb2.WorkerTask, _Mapping]]] = ..., ended: _Optional[_Iterable[_Union[TaskRef, _Mapping]]] = ...) -> None: ...

class TaskRef(_message.Message):
    __slots__ = ("job_id", "task_index", "lease")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    task_index: int
    lease: int
    def __init__(self, job_id: _Optional[int] = ..., task_index: _Optional[int] = ..., lease: _Optional[int] = ...) -> None: ...

class RegisterWorkerResponse(_message.Message):
    __slots__ = ("heartbeat_interval_s", "keep", "stop")
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    KEEP_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    heartbeat_interval_s: float
    keep: _containers.RepeatedCompositeFieldContainer[TaskRef]
    stop: _containers.RepeatedCompositeFieldContainer[TaskRef]
    def __init__(self, heartbeat_interval_s: _Optional[float] = ..., keep: _Optional[_Iterable[_Union[TaskRef, _Mapping]]] = ..., stop: _Optional[_Iterable[_Union[TaskRef, _Mapping]]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("node", "tasks", "gpus")
    NODE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    node: str
    tasks: _containers.RepeatedCompositeFieldContainer[_common_pb2.WorkerTask]
    gpus: _containers.RepeatedCompositeFieldContainer[_common_pb2.Gpu]
    def __init__(self, node: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[_common_pb2.WorkerTask, _Mapping]]] = ..., gpus: _Optional[_Iterable[_Union[_common_pb2.Gpu, _Mapping]]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("reregister", "stop", "heartbeat_interval_s")
    REREGISTER_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    reregister: bool
    stop: _containers.RepeatedCompositeFieldContainer[TaskRef]
    heartbeat_interval_s: float
    def __init__(self, reregister: _Optional[bool] = ..., stop: _Optional[_Iterable[_Union[TaskRef, _Mapping]]] = ..., heartbeat_interval_s: _Optional[float] = ...) -> None: ...

class ProgressReport(_message.Message):
    __slots__ = ("job_id", "task_index", "lease", "iterations_done", "iterations_per_s", "samples_per_s", "loss", "at", "checkpoint_iterations", "gpu_type")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_DONE_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_PER_S_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_S_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    task_index: int
    lease: int
    iterations_done: int
    iterations_per_s: float
    samples_per_s: float
    loss: float
    at: _timestamp_pb2.Timestamp
    checkpoint_iterations: int
    gpu_type: str
    def __init__(self, job_id: _Optional[int] = ..., task_index: _Optional[int] = ..., lease: _Optional[int] = ..., iterations_done: _Optional[int] = ..., iterations_per_s: _Optional[float] = ..., samples_per_s: _Optional[float] = ..., loss: _Optional[float] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., checkpoint_iterations: _Optional[int] = ..., gpu_type: _Optional[str] = ...) -> None: ...

class ReportProgressRequest(_message.Message):
    __slots__ = ("node", "reports")
    NODE_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    node: str
    reports: _containers.RepeatedCompositeFieldContainer[ProgressReport]
    def __init__(self, node: _Optional[str] = ..., reports: _Optional[_Iterable[_Union[ProgressReport, _Mapping]]] = ...) -> None: ...

class ProgressAck(_message.Message):
    __slots__ = ("job_id", "task_index", "lease", "stale")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    task_index: int
    lease: int
    stale: bool
    def __init__(self, job_id: _Optional[int] = ..., task_index: _Optional[int] = ..., lease: _Optional[int] = ..., stale: _Optional[bool] = ...) -> None: ...

class ReportProgressResponse(_message.Message):
    __slots__ = ("acks",)
    ACKS_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[ProgressAck]
    def __init__(self, acks: _Optional[_Iterable[_Union[ProgressAck, _Mapping]]] = ...) -> None: ...

class TaskExitedRequest(_message.Message):
    __slots__ = ("node", "job_id", "task_index", "lease", "kind", "exit_code", "signal", "iterations_done", "message", "contract_error")
    NODE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_DONE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_ERROR_FIELD_NUMBER: _ClassVar[int]
    node: str
    job_id: int
    task_index: int
    lease: int
    kind: _common_pb2.ExitKind
    exit_code: int
    signal: int
    iterations_done: int
    message: str
    contract_error: bool
    def __init__(self, node: _Optional[str] = ..., job_id: _Optional[int] = ..., task_index: _Optional[int] = ..., lease: _Optional[int] = ..., kind: _Optional[_Union[_common_pb2.ExitKind, str]] = ..., exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., iterations_done: _Optional[int] = ..., message: _Optional[str] = ..., contract_error: _Optional[bool] = ...) -> None: ...

class TaskExitedResponse(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    def __init__(self, accepted: _Optional[bool] = ...) -> None: ...

class ProfileEntry(_message.Message):
    __slots__ = ("workload", "job_type", "gpu_type", "num_gpus", "iterations_per_s")
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    JOB_TYPE_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_PER_S_FIELD_NUMBER: _ClassVar[int]
    workload: str
    job_type: str
    gpu_type: str
    num_gpus: int
    iterations_per_s: float
    def __init__(self, workload: _Optional[str] = ..., job_type: _Optional[str] = ..., gpu_type: _Optional[str] = ..., num_gpus: _Optional[int] = ..., iterations_per_s: _Optional[float] = ...) -> None: ...

class ReportProfileRequest(_message.Message):
    __slots__ = ("node", "entries")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    node: str
    entries: _containers.RepeatedCompositeFieldContainer[ProfileEntry]
    def __init__(self, node: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[ProfileEntry, _Mapping]]] = ...) -> None: ...

class ReportProfileResponse(_message.Message):
    __slots__ = ("stored",)
    STORED_FIELD_NUMBER: _ClassVar[int]
    stored: int
    def __init__(self, stored: _Optional[int] = ...) -> None: ...
