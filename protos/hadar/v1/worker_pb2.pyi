import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from protos.hadar.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AssignmentAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ASSIGNMENT_ACTION_UNSPECIFIED: _ClassVar[AssignmentAction]
    ASSIGNMENT_ACTION_START: _ClassVar[AssignmentAction]
    ASSIGNMENT_ACTION_EXTEND: _ClassVar[AssignmentAction]
    ASSIGNMENT_ACTION_STOP: _ClassVar[AssignmentAction]

class AssignmentOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ASSIGNMENT_OUTCOME_UNSPECIFIED: _ClassVar[AssignmentOutcome]
    ASSIGNMENT_OUTCOME_APPLIED: _ClassVar[AssignmentOutcome]
    ASSIGNMENT_OUTCOME_STALE: _ClassVar[AssignmentOutcome]
    ASSIGNMENT_OUTCOME_FAILED: _ClassVar[AssignmentOutcome]
ASSIGNMENT_ACTION_UNSPECIFIED: AssignmentAction
ASSIGNMENT_ACTION_START: AssignmentAction
ASSIGNMENT_ACTION_EXTEND: AssignmentAction
ASSIGNMENT_ACTION_STOP: AssignmentAction
ASSIGNMENT_OUTCOME_UNSPECIFIED: AssignmentOutcome
ASSIGNMENT_OUTCOME_APPLIED: AssignmentOutcome
ASSIGNMENT_OUTCOME_STALE: AssignmentOutcome
ASSIGNMENT_OUTCOME_FAILED: AssignmentOutcome

class Rendezvous(_message.Message):
    __slots__ = ("master_addr", "master_port", "world_size", "rank_offset")
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    MASTER_PORT_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    RANK_OFFSET_FIELD_NUMBER: _ClassVar[int]
    master_addr: str
    master_port: int
    world_size: int
    rank_offset: int
    def __init__(self, master_addr: _Optional[str] = ..., master_port: _Optional[int] = ..., world_size: _Optional[int] = ..., rank_offset: _Optional[int] = ...) -> None: ...

class TaskAssignment(_message.Message):
    __slots__ = ("job_id", "task_index", "lease", "action", "spec", "gpu_indices", "gpu_type", "rendezvous", "local_batch_sizes", "accumulation_steps", "iteration_budget", "iterations_done", "lease_expires_at", "num_copies", "copy_index", "round", "grace_s", "checkpoint_dir", "user", "reason", "resumes")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    GPU_INDICES_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    RENDEZVOUS_FIELD_NUMBER: _ClassVar[int]
    LOCAL_BATCH_SIZES_FIELD_NUMBER: _ClassVar[int]
    ACCUMULATION_STEPS_FIELD_NUMBER: _ClassVar[int]
    ITERATION_BUDGET_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_DONE_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    NUM_COPIES_FIELD_NUMBER: _ClassVar[int]
    COPY_INDEX_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    GRACE_S_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_DIR_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESUMES_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    task_index: int
    lease: int
    action: AssignmentAction
    spec: _common_pb2.JobSpec
    gpu_indices: _containers.RepeatedScalarFieldContainer[int]
    gpu_type: str
    rendezvous: Rendezvous
    local_batch_sizes: _containers.RepeatedScalarFieldContainer[int]
    accumulation_steps: int
    iteration_budget: int
    iterations_done: int
    lease_expires_at: _timestamp_pb2.Timestamp
    num_copies: int
    copy_index: int
    round: int
    grace_s: float
    checkpoint_dir: str
    user: str
    reason: str
    resumes: bool
    def __init__(self, job_id: _Optional[int] = ..., task_index: _Optional[int] = ..., lease: _Optional[int] = ..., action: _Optional[_Union[AssignmentAction, str]] = ..., spec: _Optional[_Union[_common_pb2.JobSpec, _Mapping]] = ..., gpu_indices: _Optional[_Iterable[int]] = ..., gpu_type: _Optional[str] = ..., rendezvous: _Optional[_Union[Rendezvous, _Mapping]] = ..., local_batch_sizes: _Optional[_Iterable[int]] = ..., accumulation_steps: _Optional[int] = ..., iteration_budget: _Optional[int] = ..., iterations_done: _Optional[int] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., num_copies: _Optional[int] = ..., copy_index: _Optional[int] = ..., round: _Optional[int] = ..., grace_s: _Optional[float] = ..., checkpoint_dir: _Optional[str] = ..., user: _Optional[str] = ..., reason: _Optional[str] = ..., resumes: _Optional[bool] = ...) -> None: ...

class ApplyAssignmentsRequest(_message.Message):
    __slots__ = ("round", "assignments", "master_epoch")
    ROUND_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    round: int
    assignments: _containers.RepeatedCompositeFieldContainer[TaskAssignment]
    master_epoch: int
    def __init__(self, round: _Optional[int] = ..., assignments: _Optional[_Iterable[_Union[TaskAssignment, _Mapping]]] = ..., master_epoch: _Optional[int] = ...) -> None: ...

class AssignmentResult(_message.Message):
    __slots__ = ("job_id", "task_index", "lease", "outcome", "message", "unknown_user")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_USER_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    task_index: int
    lease: int
    outcome: AssignmentOutcome
    message: str
    unknown_user: str
    def __init__(self, job_id: _Optional[int] = ..., task_index: _Optional[int] = ..., lease: _Optional[int] = ..., outcome: _Optional[_Union[AssignmentOutcome, str]] = ..., message: _Optional[str] = ..., unknown_user: _Optional[str] = ...) -> None: ...

class ApplyAssignmentsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AssignmentResult]
    def __init__(self, results: _Optional[_Iterable[_Union[AssignmentResult, _Mapping]]] = ...) -> None: ...

class StopTaskRequest(_message.Message):
    __slots__ = ("job_id", "lease", "checkpoint", "grace_s", "reason", "master_epoch", "resumes")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    GRACE_S_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    RESUMES_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    lease: int
    checkpoint: bool
    grace_s: float
    reason: str
    master_epoch: int
    resumes: bool
    def __init__(self, job_id: _Optional[int] = ..., lease: _Optional[int] = ..., checkpoint: _Optional[bool] = ..., grace_s: _Optional[float] = ..., reason: _Optional[str] = ..., master_epoch: _Optional[int] = ..., resumes: _Optional[bool] = ...) -> None: ...

class StopTaskResponse(_message.Message):
    __slots__ = ("was_running",)
    WAS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    was_running: bool
    def __init__(self, was_running: _Optional[bool] = ...) -> None: ...

class StreamTaskLogsRequest(_message.Message):
    __slots__ = ("job_id", "follow", "tail_lines", "rank", "offset", "lease")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    TAIL_LINES_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    follow: bool
    tail_lines: int
    rank: int
    offset: int
    lease: int
    def __init__(self, job_id: _Optional[int] = ..., follow: _Optional[bool] = ..., tail_lines: _Optional[int] = ..., rank: _Optional[int] = ..., offset: _Optional[int] = ..., lease: _Optional[int] = ...) -> None: ...

class GetWorkerStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetWorkerStatusResponse(_message.Message):
    __slots__ = ("node", "gpus", "tasks", "agent_version", "started_at", "master_address", "connected")
    NODE_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    node: str
    gpus: _containers.RepeatedCompositeFieldContainer[_common_pb2.Gpu]
    tasks: _containers.RepeatedCompositeFieldContainer[_common_pb2.WorkerTask]
    agent_version: str
    started_at: _timestamp_pb2.Timestamp
    master_address: str
    connected: bool
    def __init__(self, node: _Optional[str] = ..., gpus: _Optional[_Iterable[_Union[_common_pb2.Gpu, _Mapping]]] = ..., tasks: _Optional[_Iterable[_Union[_common_pb2.WorkerTask, _Mapping]]] = ..., agent_version: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., master_address: _Optional[str] = ..., connected: _Optional[bool] = ...) -> None: ...
