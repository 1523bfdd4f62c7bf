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

class DeliveryStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DELIVERY_STATUS_UNSPECIFIED: _ClassVar[DeliveryStatus]
    DELIVERY_STATUS_PENDING: _ClassVar[DeliveryStatus]
    DELIVERY_STATUS_DELIVERED: _ClassVar[DeliveryStatus]
    DELIVERY_STATUS_GAVE_UP: _ClassVar[DeliveryStatus]

class UsageGrouping(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    USAGE_GROUPING_UNSPECIFIED: _ClassVar[UsageGrouping]
    USAGE_GROUPING_USER: _ClassVar[UsageGrouping]
    USAGE_GROUPING_GPU_TYPE: _ClassVar[UsageGrouping]
    USAGE_GROUPING_DAY: _ClassVar[UsageGrouping]
DELIVERY_STATUS_UNSPECIFIED: DeliveryStatus
DELIVERY_STATUS_PENDING: DeliveryStatus
DELIVERY_STATUS_DELIVERED: DeliveryStatus
DELIVERY_STATUS_GAVE_UP: DeliveryStatus
USAGE_GROUPING_UNSPECIFIED: UsageGrouping
USAGE_GROUPING_USER: UsageGrouping
USAGE_GROUPING_GPU_TYPE: UsageGrouping
USAGE_GROUPING_DAY: UsageGrouping

class SubmitJobRequest(_message.Message):
    __slots__ = ("spec", "idempotency_key", "hold")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    spec: _common_pb2.JobSpec
    idempotency_key: str
    hold: bool
    def __init__(self, spec: _Optional[_Union[_common_pb2.JobSpec, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., hold: _Optional[bool] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id", "include_events")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_EVENTS_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    include_events: bool
    def __init__(self, job_id: _Optional[int] = ..., include_events: _Optional[bool] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job", "events", "notifications")
    JOB_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NOTIFICATIONS_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    events: _containers.RepeatedCompositeFieldContainer[_common_pb2.JobEvent]
    notifications: _containers.RepeatedCompositeFieldContainer[NotificationDelivery]
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ..., events: _Optional[_Iterable[_Union[_common_pb2.JobEvent, _Mapping]]] = ..., notifications: _Optional[_Iterable[_Union[NotificationDelivery, _Mapping]]] = ...) -> None: ...

class NotificationDelivery(_message.Message):
    __slots__ = ("id", "job_state", "endpoint", "status", "attempts", "created_at", "last_attempt_at", "next_attempt_at", "delivered_at", "last_error")
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_STATE_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    id: int
    job_state: _common_pb2.JobState
    endpoint: str
    status: DeliveryStatus
    attempts: int
    created_at: _timestamp_pb2.Timestamp
    last_attempt_at: _timestamp_pb2.Timestamp
    next_attempt_at: _timestamp_pb2.Timestamp
    delivered_at: _timestamp_pb2.Timestamp
    last_error: str
    def __init__(self, id: _Optional[int] = ..., job_state: _Optional[_Union[_common_pb2.JobState, str]] = ..., endpoint: _Optional[str] = ..., status: _Optional[_Union[DeliveryStatus, str]] = ..., attempts: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_attempt_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., next_attempt_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delivered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_error: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("user", "states", "page_size", "page_token", "array_job_id")
    USER_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ARRAY_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    user: str
    states: _containers.RepeatedScalarFieldContainer[_common_pb2.JobState]
    page_size: int
    page_token: str
    array_job_id: int
    def __init__(self, user: _Optional[str] = ..., states: _Optional[_Iterable[_Union[_common_pb2.JobState, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., array_job_id: _Optional[int] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_common_pb2.Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[_common_pb2.Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("job_id", "reason", "whole_array")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    WHOLE_ARRAY_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    reason: str
    whole_array: bool
    def __init__(self, job_id: _Optional[int] = ..., reason: _Optional[str] = ..., whole_array: _Optional[bool] = ...) -> None: ...

class CancelJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class HoldJobRequest(_message.Message):
    __slots__ = ("job_id", "reason", "whole_array")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    WHOLE_ARRAY_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    reason: str
    whole_array: bool
    def __init__(self, job_id: _Optional[int] = ..., reason: _Optional[str] = ..., whole_array: _Optional[bool] = ...) -> None: ...

class HoldJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class ReleaseJobRequest(_message.Message):
    __slots__ = ("job_id", "whole_array")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    WHOLE_ARRAY_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    whole_array: bool
    def __init__(self, job_id: _Optional[int] = ..., whole_array: _Optional[bool] = ...) -> None: ...

class ReleaseJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class RequeueJobRequest(_message.Message):
    __slots__ = ("job_id", "reason", "hold", "whole_array")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    WHOLE_ARRAY_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    reason: str
    hold: bool
    whole_array: bool
    def __init__(self, job_id: _Optional[int] = ..., reason: _Optional[str] = ..., hold: _Optional[bool] = ..., whole_array: _Optional[bool] = ...) -> None: ...

class RequeueJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class GpuTypeList(_message.Message):
    __slots__ = ("types",)
    TYPES_FIELD_NUMBER: _ClassVar[int]
    types: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, types: _Optional[_Iterable[str]] = ...) -> None: ...

class UpdateJobRequest(_message.Message):
    __slots__ = ("job_id", "whole_array", "name", "time_limit_s", "priority", "num_gpus", "allowed_gpu_types", "dependencies", "preemptible", "warning", "notify_url", "notify_on")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    WHOLE_ARRAY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_S_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_GPU_TYPES_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCIES_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIBLE_FIELD_NUMBER: _ClassVar[int]
    WARNING_FIELD_NUMBER: _ClassVar[int]
    NOTIFY_URL_FIELD_NUMBER: _ClassVar[int]
    NOTIFY_ON_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    whole_array: bool
    name: str
    time_limit_s: int
    priority: float
    num_gpus: int
    allowed_gpu_types: GpuTypeList
    dependencies: DependencyList
    preemptible: bool
    warning: WarningSignal
    notify_url: str
    notify_on: NotifyOn
    def __init__(self, job_id: _Optional[int] = ..., whole_array: _Optional[bool] = ..., name: _Optional[str] = ..., time_limit_s: _Optional[int] = ..., priority: _Optional[float] = ..., num_gpus: _Optional[int] = ..., allowed_gpu_types: _Optional[_Union[GpuTypeList, _Mapping]] = ..., dependencies: _Optional[_Union[DependencyList, _Mapping]] = ..., preemptible: _Optional[bool] = ..., warning: _Optional[_Union[WarningSignal, _Mapping]] = ..., notify_url: _Optional[str] = ..., notify_on: _Optional[_Union[NotifyOn, _Mapping]] = ...) -> None: ...

class DependencyList(_message.Message):
    __slots__ = ("after_ok", "after_any", "after_fail")
    AFTER_OK_FIELD_NUMBER: _ClassVar[int]
    AFTER_ANY_FIELD_NUMBER: _ClassVar[int]
    AFTER_FAIL_FIELD_NUMBER: _ClassVar[int]
    after_ok: _containers.RepeatedScalarFieldContainer[int]
    after_any: _containers.RepeatedScalarFieldContainer[int]
    after_fail: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, after_ok: _Optional[_Iterable[int]] = ..., after_any: _Optional[_Iterable[int]] = ..., after_fail: _Optional[_Iterable[int]] = ...) -> None: ...

class WarningSignal(_message.Message):
    __slots__ = ("signal", "before_s")
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    BEFORE_S_FIELD_NUMBER: _ClassVar[int]
    signal: int
    before_s: int
    def __init__(self, signal: _Optional[int] = ..., before_s: _Optional[int] = ...) -> None: ...

class NotifyOn(_message.Message):
    __slots__ = ("states", "none")
    STATES_FIELD_NUMBER: _ClassVar[int]
    NONE_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[_common_pb2.JobState]
    none: bool
    def __init__(self, states: _Optional[_Iterable[_Union[_common_pb2.JobState, str]]] = ..., none: _Optional[bool] = ...) -> None: ...

class UpdateJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class WatchJobsRequest(_message.Message):
    __slots__ = ("job_ids", "user", "include_initial", "batch")
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_INITIAL_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    job_ids: _containers.RepeatedScalarFieldContainer[int]
    user: str
    include_initial: bool
    batch: bool
    def __init__(self, job_ids: _Optional[_Iterable[int]] = ..., user: _Optional[str] = ..., include_initial: _Optional[bool] = ..., batch: _Optional[bool] = ...) -> None: ...

class JobUpdate(_message.Message):
    __slots__ = ("job", "event")
    JOB_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    event: _common_pb2.JobEvent
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ..., event: _Optional[_Union[_common_pb2.JobEvent, _Mapping]] = ...) -> None: ...

class WatchJobsResponse(_message.Message):
    __slots__ = ("job", "event", "updates")
    JOB_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    event: _common_pb2.JobEvent
    updates: _containers.RepeatedCompositeFieldContainer[JobUpdate]
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ..., event: _Optional[_Union[_common_pb2.JobEvent, _Mapping]] = ..., updates: _Optional[_Iterable[_Union[JobUpdate, _Mapping]]] = ...) -> None: ...

class StreamLogsRequest(_message.Message):
    __slots__ = ("job_id", "follow", "tail_lines", "rank", "attempt")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    TAIL_LINES_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    follow: bool
    tail_lines: int
    rank: int
    attempt: int
    def __init__(self, job_id: _Optional[int] = ..., follow: _Optional[bool] = ..., tail_lines: _Optional[int] = ..., rank: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListNodesResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[_common_pb2.Node]
    def __init__(self, nodes: _Optional[_Iterable[_Union[_common_pb2.Node, _Mapping]]] = ...) -> None: ...

class DrainNodeRequest(_message.Message):
    __slots__ = ("node", "reason")
    NODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    node: str
    reason: str
    def __init__(self, node: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class DrainNodeResponse(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: _common_pb2.Node
    def __init__(self, node: _Optional[_Union[_common_pb2.Node, _Mapping]] = ...) -> None: ...

class ResumeNodeRequest(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: str
    def __init__(self, node: _Optional[str] = ...) -> None: ...

class ResumeNodeResponse(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: _common_pb2.Node
    def __init__(self, node: _Optional[_Union[_common_pb2.Node, _Mapping]] = ...) -> None: ...

class GetClusterStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GpuTypeSummary(_message.Message):
    __slots__ = ("type", "total", "busy", "idle", "unavailable")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    BUSY_FIELD_NUMBER: _ClassVar[int]
    IDLE_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    type: str
    total: int
    busy: int
    idle: int
    unavailable: int
    def __init__(self, type: _Optional[str] = ..., total: _Optional[int] = ..., busy: _Optional[int] = ..., idle: _Optional[int] = ..., unavailable: _Optional[int] = ...) -> None: ...

class JobStateCount(_message.Message):
    __slots__ = ("state", "count")
    STATE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    state: _common_pb2.JobState
    count: int
    def __init__(self, state: _Optional[_Union[_common_pb2.JobState, str]] = ..., count: _Optional[int] = ...) -> None: ...

class RoundSummary(_message.Message):
    __slots__ = ("number", "started_at", "duration_s", "policy", "actions", "dispatch_failures")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_FAILURES_FIELD_NUMBER: _ClassVar[int]
    number: int
    started_at: _timestamp_pb2.Timestamp
    duration_s: float
    policy: str
    actions: int
    dispatch_failures: int
    def __init__(self, number: _Optional[int] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., duration_s: _Optional[float] = ..., policy: _Optional[str] = ..., actions: _Optional[int] = ..., dispatch_failures: _Optional[int] = ...) -> None: ...

class GetClusterStatusResponse(_message.Message):
    __slots__ = ("gpus", "jobs", "last_round", "policy", "round_seconds", "version", "nodes_ready", "nodes_total", "next_round_at")
    GPUS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    LAST_ROUND_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    ROUND_SECONDS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NODES_READY_FIELD_NUMBER: _ClassVar[int]
    NODES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    NEXT_ROUND_AT_FIELD_NUMBER: _ClassVar[int]
    gpus: _containers.RepeatedCompositeFieldContainer[GpuTypeSummary]
    jobs: _containers.RepeatedCompositeFieldContainer[JobStateCount]
    last_round: RoundSummary
    policy: str
    round_seconds: float
    version: str
    nodes_ready: int
    nodes_total: int
    next_round_at: _timestamp_pb2.Timestamp
    def __init__(self, gpus: _Optional[_Iterable[_Union[GpuTypeSummary, _Mapping]]] = ..., jobs: _Optional[_Iterable[_Union[JobStateCount, _Mapping]]] = ..., last_round: _Optional[_Union[RoundSummary, _Mapping]] = ..., policy: _Optional[str] = ..., round_seconds: _Optional[float] = ..., version: _Optional[str] = ..., nodes_ready: _Optional[int] = ..., nodes_total: _Optional[int] = ..., next_round_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListWorkloadsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkloadInfo(_message.Message):
    __slots__ = ("name", "description", "default_batch_size", "job_type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    JOB_TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    default_batch_size: int
    job_type: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., default_batch_size: _Optional[int] = ..., job_type: _Optional[str] = ...) -> None: ...

class ListWorkloadsResponse(_message.Message):
    __slots__ = ("workloads",)
    WORKLOADS_FIELD_NUMBER: _ClassVar[int]
    workloads: _containers.RepeatedCompositeFieldContainer[WorkloadInfo]
    def __init__(self, workloads: _Optional[_Iterable[_Union[WorkloadInfo, _Mapping]]] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("user", "admin")
    USER_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    user: str
    admin: bool
    def __init__(self, user: _Optional[str] = ..., admin: _Optional[bool] = ...) -> None: ...

class TokenInfo(_message.Message):
    __slots__ = ("id", "user", "admin", "description", "created_at", "last_used_at", "revoked")
    ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_USED_AT_FIELD_NUMBER: _ClassVar[int]
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    id: str
    user: str
    admin: bool
    description: str
    created_at: _timestamp_pb2.Timestamp
    last_used_at: _timestamp_pb2.Timestamp
    revoked: bool
    def __init__(self, id: _Optional[str] = ..., user: _Optional[str] = ..., admin: _Optional[bool] = ..., description: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_used_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revoked: _Optional[bool] = ...) -> None: ...

class CreateTokenRequest(_message.Message):
    __slots__ = ("user", "admin", "description")
    USER_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    user: str
    admin: bool
    description: str
    def __init__(self, user: _Optional[str] = ..., admin: _Optional[bool] = ..., description: _Optional[str] = ...) -> None: ...

class CreateTokenResponse(_message.Message):
    __slots__ = ("token", "info")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    token: str
    info: TokenInfo
    def __init__(self, token: _Optional[str] = ..., info: _Optional[_Union[TokenInfo, _Mapping]] = ...) -> None: ...

class ListTokensRequest(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: str
    def __init__(self, user: _Optional[str] = ...) -> None: ...

class ListTokensResponse(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[TokenInfo]
    def __init__(self, tokens: _Optional[_Iterable[_Union[TokenInfo, _Mapping]]] = ...) -> None: ...

class RevokeTokenRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class RevokeTokenResponse(_message.Message):
    __slots__ = ("info",)
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: TokenInfo
    def __init__(self, info: _Optional[_Union[TokenInfo, _Mapping]] = ...) -> None: ...

class GetUsageRequest(_message.Message):
    __slots__ = ("user", "since", "until", "by")
    USER_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    user: str
    since: _timestamp_pb2.Timestamp
    until: _timestamp_pb2.Timestamp
    by: UsageGrouping
    def __init__(self, user: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., by: _Optional[_Union[UsageGrouping, str]] = ...) -> None: ...

class UsageRow(_message.Message):
    __slots__ = ("key", "gpu_seconds", "jobs", "attempts")
    KEY_FIELD_NUMBER: _ClassVar[int]
    GPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    key: str
    gpu_seconds: float
    jobs: int
    attempts: int
    def __init__(self, key: _Optional[str] = ..., gpu_seconds: _Optional[float] = ..., jobs: _Optional[int] = ..., attempts: _Optional[int] = ...) -> None: ...

class GetUsageResponse(_message.Message):
    __slots__ = ("rows", "total_gpu_seconds", "since", "until")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_GPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[UsageRow]
    total_gpu_seconds: float
    since: _timestamp_pb2.Timestamp
    until: _timestamp_pb2.Timestamp
    def __init__(self, rows: _Optional[_Iterable[_Union[UsageRow, _Mapping]]] = ..., total_gpu_seconds: _Optional[float] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetFairShareRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FairShareRow(_message.Message):
    __slots__ = ("user", "group", "raw_share", "share", "usage_gpu_seconds", "usage", "factor", "gpus", "quota")
    USER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    RAW_SHARE_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    USAGE_GPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    FACTOR_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    user: str
    group: str
    raw_share: float
    share: float
    usage_gpu_seconds: float
    usage: float
    factor: float
    gpus: int
    quota: int
    def __init__(self, user: _Optional[str] = ..., group: _Optional[str] = ..., raw_share: _Optional[float] = ..., share: _Optional[float] = ..., usage_gpu_seconds: _Optional[float] = ..., usage: _Optional[float] = ..., factor: _Optional[float] = ..., gpus: _Optional[int] = ..., quota: _Optional[int] = ...) -> None: ...

class GetFairShareResponse(_message.Message):
    __slots__ = ("enabled", "half_life_s", "rows")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    HALF_LIFE_S_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    half_life_s: float
    rows: _containers.RepeatedCompositeFieldContainer[FairShareRow]
    def __init__(self, enabled: _Optional[bool] = ..., half_life_s: _Optional[float] = ..., rows: _Optional[_Iterable[_Union[FairShareRow, _Mapping]]] = ...) -> None: ...

class ListJobHistoryRequest(_message.Message):
    __slots__ = ("user", "since", "states", "page_size", "page_token")
    USER_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    user: str
    since: _timestamp_pb2.Timestamp
    states: _containers.RepeatedScalarFieldContainer[_common_pb2.JobState]
    page_size: int
    page_token: str
    def __init__(self, user: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., states: _Optional[_Iterable[_Union[_common_pb2.JobState, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class JobHistoryEntry(_message.Message):
    __slots__ = ("job", "run_seconds", "gpu_seconds", "attempts", "gpu_types")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RUN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    GPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPES_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    run_seconds: float
    gpu_seconds: float
    attempts: int
    gpu_types: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ..., run_seconds: _Optional[float] = ..., gpu_seconds: _Optional[float] = ..., attempts: _Optional[int] = ..., gpu_types: _Optional[_Iterable[str]] = ...) -> None: ...

class ListJobHistoryResponse(_message.Message):
    __slots__ = ("entries", "next_page_token")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[JobHistoryEntry]
    next_page_token: str
    def __init__(self, entries: _Optional[_Iterable[_Union[JobHistoryEntry, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SetNotifyDefaultRequest(_message.Message):
    __slots__ = ("user", "url", "on")
    USER_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    ON_FIELD_NUMBER: _ClassVar[int]
    user: str
    url: str
    on: _containers.RepeatedScalarFieldContainer[_common_pb2.JobState]
    def __init__(self, user: _Optional[str] = ..., url: _Optional[str] = ..., on: _Optional[_Iterable[_Union[_common_pb2.JobState, str]]] = ...) -> None: ...

class GetNotifyDefaultRequest(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: str
    def __init__(self, user: _Optional[str] = ...) -> None: ...

class ClearNotifyDefaultRequest(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: str
    def __init__(self, user: _Optional[str] = ...) -> None: ...

class NotifyDefaultResponse(_message.Message):
    __slots__ = ("user", "configured", "url", "on", "updated_at")
    USER_FIELD_NUMBER: _ClassVar[int]
    CONFIGURED_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    ON_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    user: str
    configured: bool
    url: str
    on: _containers.RepeatedScalarFieldContainer[_common_pb2.JobState]
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, user: _Optional[str] = ..., configured: _Optional[bool] = ..., url: _Optional[str] = ..., on: _Optional[_Iterable[_Union[_common_pb2.JobState, str]]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
