"""Protobuf messages to the client's plain values and back. Nothing else touches protobuf."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

from google.protobuf.timestamp_pb2 import Timestamp

from clients.types import (
    ClusterStatus,
    CreatedToken,
    Delivery,
    DeliveryStatus,
    Dependency,
    FairShareReport,
    FairShareRow,
    Gpu,
    GpuHealth,
    GpuTypeSummary,
    Identity,
    Job,
    JobEvent,
    JobRecord,
    JobSpec,
    JobState,
    LogChunk,
    LogStream,
    Node,
    NodeState,
    NotifyDefault,
    Program,
    ProgramKind,
    RoundSummary,
    Task,
    TaskState,
    Throughput,
    TokenInfo,
    UsageGrouping,
    UsageReport,
    UsageRow,
    Workload,
)
from protos.hadar.v1 import common_pb2, hadar_pb2

_JOB_STATES: dict[int, JobState] = {
    common_pb2.JOB_STATE_PENDING: JobState.PENDING,
    common_pb2.JOB_STATE_RUNNING: JobState.RUNNING,
    common_pb2.JOB_STATE_PREEMPTED: JobState.PREEMPTED,
    common_pb2.JOB_STATE_COMPLETED: JobState.COMPLETED,
    common_pb2.JOB_STATE_FAILED: JobState.FAILED,
    common_pb2.JOB_STATE_CANCELLED: JobState.CANCELLED,
    common_pb2.JOB_STATE_TIMEOUT: JobState.TIMEOUT,
}
_NODE_STATES: dict[int, NodeState] = {
    common_pb2.NODE_STATE_READY: NodeState.READY,
    common_pb2.NODE_STATE_DRAINING: NodeState.DRAINING,
    common_pb2.NODE_STATE_DRAINED: NodeState.DRAINED,
    common_pb2.NODE_STATE_UNREACHABLE: NodeState.UNREACHABLE,
}
_GPU_HEALTH: dict[int, GpuHealth] = {
    common_pb2.GPU_HEALTH_HEALTHY: GpuHealth.HEALTHY,
    common_pb2.GPU_HEALTH_UNHEALTHY: GpuHealth.UNHEALTHY,
}
_TASK_STATES: dict[int, TaskState] = {
    common_pb2.TASK_STATE_ASSIGNED: TaskState.ASSIGNED,
    common_pb2.TASK_STATE_STARTING: TaskState.STARTING,
    common_pb2.TASK_STATE_RUNNING: TaskState.RUNNING,
    common_pb2.TASK_STATE_STOPPING: TaskState.STOPPING,
    common_pb2.TASK_STATE_EXITED: TaskState.EXITED,
    common_pb2.TASK_STATE_LOST: TaskState.LOST,
}


def job_state(number: int) -> JobState:
    return _JOB_STATES.get(number, JobState.UNSPECIFIED)


def job_state_number(state: JobState) -> common_pb2.JobState:
    return cast("common_pb2.JobState", common_pb2.JobState.Value(f"JOB_STATE_{state.name}"))


def timestamp(message: Timestamp, present: bool = True) -> datetime | None:
    """A UTC datetime, or None for an unset timestamp (zero seconds and nanos)."""
    if not present or (message.seconds == 0 and message.nanos == 0):
        return None
    return datetime.fromtimestamp(message.seconds + message.nanos / 1e9, tz=UTC)


def spec_to_proto(spec: JobSpec) -> common_pb2.JobSpec:
    message = common_pb2.JobSpec(
        name=spec.name,
        num_gpus=spec.num_gpus,
        iterations=spec.iterations,
        batch_size=spec.batch_size,
        priority=spec.priority,
        allowed_gpu_types=list(spec.allowed_gpu_types),
        shareable=spec.shareable,
        forkable=spec.forkable,
        env=dict(spec.env),
        workdir=spec.workdir,
        checkpoint_dir=spec.checkpoint_dir,
        job_type=spec.job_type,
        gpu_memory_bytes=spec.gpu_memory_bytes,
        output=spec.output,
        error=spec.error,
        time_limit_s=spec.time_limit_s,
        array=spec.array,
        after_ok=[d.job_id for d in spec.dependencies if d.kind == "afterok"],
        after_any=[d.job_id for d in spec.dependencies if d.kind == "afterany"],
        after_fail=[d.job_id for d in spec.dependencies if d.kind == "afterfail"],
        notify_url=spec.notify_url,
        notify_on=[job_state_number(s) for s in spec.notify_on],
        no_notify=spec.no_notify,
        warn_signal=spec.warn_signal,
        warn_before_s=spec.warn_before_s,
        interactive=spec.interactive,
    )
    if spec.preemptible is not None:
        message.preemptible = spec.preemptible
    if spec.max_retries is not None:
        message.max_retries = spec.max_retries
    program = spec.program
    if program.kind is ProgramKind.WORKLOAD:
        message.workload.name = program.workload
    elif program.kind is ProgramKind.SCRIPT:
        message.script.argv.extend(program.argv)
    else:
        message.command.argv.extend(program.argv)
    return message


def spec_from_proto(message: common_pb2.JobSpec) -> JobSpec:
    which = message.WhichOneof("program")
    if which == "workload":
        program = Program.builtin(message.workload.name)
    elif which == "script":
        program = Program.script(message.script.argv)
    else:
        program = Program.command(message.command.argv)
    return JobSpec(
        name=message.name,
        program=program,
        iterations=message.iterations,
        num_gpus=message.num_gpus,
        batch_size=message.batch_size,
        priority=message.priority or 1.0,
        allowed_gpu_types=tuple(message.allowed_gpu_types),
        preemptible=message.preemptible if message.HasField("preemptible") else None,
        shareable=message.shareable,
        forkable=message.forkable,
        env=dict(sorted(message.env.items())),
        workdir=message.workdir,
        checkpoint_dir=message.checkpoint_dir,
        job_type=message.job_type,
        gpu_memory_bytes=message.gpu_memory_bytes,
        max_retries=message.max_retries if message.HasField("max_retries") else None,
        output=message.output,
        error=message.error,
        time_limit_s=message.time_limit_s,
        array=message.array,
        array_job_id=message.array_job_id,
        array_index=message.array_index if message.HasField("array_index") else None,
        warn_signal=message.warn_signal,
        warn_before_s=message.warn_before_s,
        interactive=message.interactive,
        dependencies=tuple(
            [Dependency("afterok", i) for i in message.after_ok]
            + [Dependency("afterany", i) for i in message.after_any]
            + [Dependency("afterfail", i) for i in message.after_fail]
        ),
        notify_url=message.notify_url,
        notify_on=tuple(job_state(s) for s in message.notify_on),
        no_notify=message.no_notify,
    )


def task(message: common_pb2.Task) -> Task:
    return Task(
        job_id=message.job_id,
        task_index=message.task_index,
        node=message.node,
        gpu_indices=tuple(message.gpu_indices),
        gpu_type=message.gpu_type,
        lease=message.lease,
        state=_TASK_STATES.get(message.state, TaskState.UNSPECIFIED),
        rank_offset=message.rank_offset,
        local_batch_size=message.local_batch_size,
        accumulation_steps=message.accumulation_steps,
        shared_with_job_id=message.shared_with_job_id,
    )


def job(message: common_pb2.Job) -> Job:
    return Job(
        id=message.id,
        spec=spec_from_proto(message.spec),
        user=message.user,
        state=job_state(message.state),
        reason=message.reason,
        iterations_done=message.iterations_done,
        attained_service=message.attained_service,
        submitted_at=timestamp(message.submitted_at, message.HasField("submitted_at")),
        started_at=timestamp(message.started_at, message.HasField("started_at")),
        finished_at=timestamp(message.finished_at, message.HasField("finished_at")),
        tasks=tuple(task(t) for t in message.tasks),
        retries=message.retries,
        exit_code=message.exit_code if message.HasField("exit_code") else None,
        throughputs=tuple(
            Throughput(t.gpu_type, t.iterations_per_s, t.source) for t in message.throughputs
        ),
        version=message.version,
        preemptions=message.preemptions,
        migrations=message.migrations,
        checkpoint_iterations=message.checkpoint_iterations,
        reports_progress=message.reports_progress,
        retry_limit=message.retry_limit if message.HasField("retry_limit") else None,
        run_seconds=message.run_seconds,
        gpu_seconds=message.gpu_seconds,
        failure_output=message.failure_output,
        private_hidden=message.private_hidden,
        held_by=message.held_by,
        requeues=message.requeues,
        limit_run_seconds=message.limit_run_seconds,
        expected_start=timestamp(message.expected_start, message.HasField("expected_start")),
    )


def event(message: common_pb2.JobEvent) -> JobEvent:
    return JobEvent(
        job_id=message.job_id,
        at=timestamp(message.at, message.HasField("at")),
        from_state=job_state(message.from_state),
        to_state=job_state(message.to_state),
        kind=message.kind,
        reason=message.reason,
        round=message.round,
    )


def gpu(message: common_pb2.Gpu) -> Gpu:
    return Gpu(
        index=message.index,
        type=message.type,
        memory_bytes=message.memory_bytes,
        device_name=message.device_name,
        uuid=message.uuid,
        health=_GPU_HEALTH.get(message.health, GpuHealth.UNSPECIFIED),
        utilization=message.utilization,
        job_ids=tuple(message.job_ids),
        fake=message.fake,
    )


def node(message: common_pb2.Node) -> Node:
    return Node(
        name=message.name,
        state=_NODE_STATES.get(message.state, NodeState.UNSPECIFIED),
        address=message.address,
        gpus=tuple(gpu(g) for g in message.gpus),
        last_heartbeat=timestamp(message.last_heartbeat, message.HasField("last_heartbeat")),
        agent_version=message.agent_version,
        reason=message.reason,
        registered_at=timestamp(message.registered_at, message.HasField("registered_at")),
    )


def cluster_status(message: hadar_pb2.GetClusterStatusResponse) -> ClusterStatus:
    last_round: RoundSummary | None = None
    if message.HasField("last_round") and message.last_round.number > 0:
        r = message.last_round
        last_round = RoundSummary(
            number=r.number,
            started_at=timestamp(r.started_at, r.HasField("started_at")),
            duration_s=r.duration_s,
            policy=r.policy,
            actions=r.actions,
            dispatch_failures=r.dispatch_failures,
        )
    counts: dict[JobState, int] = {}
    for entry in message.jobs:
        state = job_state(entry.state)
        counts[state] = counts.get(state, 0) + entry.count
    return ClusterStatus(
        gpus=tuple(
            GpuTypeSummary(g.type, g.total, g.busy, g.idle, g.unavailable) for g in message.gpus
        ),
        jobs=counts,
        last_round=last_round,
        policy=message.policy,
        round_seconds=message.round_seconds,
        version=message.version,
        nodes_ready=message.nodes_ready,
        nodes_total=message.nodes_total,
        next_round_at=timestamp(message.next_round_at, message.HasField("next_round_at")),
    )


def workload(message: hadar_pb2.WorkloadInfo) -> Workload:
    return Workload(
        name=message.name,
        description=message.description,
        default_batch_size=message.default_batch_size,
        job_type=message.job_type,
    )


def identity(message: hadar_pb2.WhoAmIResponse) -> Identity:
    return Identity(user=message.user, admin=message.admin)


def token_info(message: hadar_pb2.TokenInfo) -> TokenInfo:
    return TokenInfo(
        id=message.id,
        user=message.user,
        admin=message.admin,
        description=message.description,
        created_at=timestamp(message.created_at, message.HasField("created_at")),
        last_used_at=timestamp(message.last_used_at, message.HasField("last_used_at")),
        revoked=message.revoked,
    )


def created_token(message: hadar_pb2.CreateTokenResponse) -> CreatedToken:
    return CreatedToken(token=message.token, info=token_info(message.info))


def log_chunk(message: common_pb2.LogChunk) -> LogChunk:
    return LogChunk(
        job_id=message.job_id,
        task_index=message.task_index,
        rank=message.rank,
        node=message.node,
        data=message.data,
        offset=message.offset,
        attempt=message.attempt,
        lease=message.lease,
        stream=LogStream.STDERR
        if message.stream == common_pb2.LOG_STREAM_STDERR
        else LogStream.STDOUT,
        start_failure=message.start_failure,
        attempts=message.attempts,
        nodes=tuple(message.nodes),
    )


USAGE_GROUPING_NUMBERS: dict[UsageGrouping, hadar_pb2.UsageGrouping] = {
    UsageGrouping.USER: hadar_pb2.USAGE_GROUPING_USER,
    UsageGrouping.GPU_TYPE: hadar_pb2.USAGE_GROUPING_GPU_TYPE,
    UsageGrouping.DAY: hadar_pb2.USAGE_GROUPING_DAY,
}


def fair_share_report(message: hadar_pb2.GetFairShareResponse) -> FairShareReport:
    return FairShareReport(
        enabled=message.enabled,
        half_life_s=message.half_life_s,
        rows=tuple(
            FairShareRow(
                user=r.user,
                group=r.group,
                raw_share=r.raw_share,
                share=r.share,
                usage_gpu_seconds=r.usage_gpu_seconds,
                usage=r.usage,
                factor=r.factor,
                gpus=r.gpus,
                quota=r.quota,
            )
            for r in message.rows
        ),
    )


def usage_report(message: hadar_pb2.GetUsageResponse, grouping: UsageGrouping) -> UsageReport:
    return UsageReport(
        grouping=grouping,
        rows=tuple(
            UsageRow(key=r.key, gpu_seconds=r.gpu_seconds, jobs=r.jobs, attempts=r.attempts)
            for r in message.rows
        ),
        total_gpu_seconds=message.total_gpu_seconds,
        since=timestamp(message.since, message.HasField("since")),
        until=timestamp(message.until, message.HasField("until")),
    )


def job_record(message: hadar_pb2.JobHistoryEntry) -> JobRecord:
    return JobRecord(
        job=job(message.job),
        run_seconds=message.run_seconds,
        gpu_seconds=message.gpu_seconds,
        attempts=message.attempts,
        gpu_types=tuple(message.gpu_types),
    )


_DELIVERY_STATUSES = {
    hadar_pb2.DELIVERY_STATUS_PENDING: DeliveryStatus.PENDING,
    hadar_pb2.DELIVERY_STATUS_DELIVERED: DeliveryStatus.DELIVERED,
    hadar_pb2.DELIVERY_STATUS_GAVE_UP: DeliveryStatus.GAVE_UP,
}


def delivery(message: hadar_pb2.NotificationDelivery) -> Delivery:
    return Delivery(
        id=message.id,
        job_state=job_state(message.job_state),
        endpoint=message.endpoint,
        status=_DELIVERY_STATUSES.get(message.status, DeliveryStatus.UNSPECIFIED),
        attempts=message.attempts,
        created_at=timestamp(message.created_at, message.HasField("created_at")),
        last_attempt_at=timestamp(message.last_attempt_at, message.HasField("last_attempt_at")),
        next_attempt_at=timestamp(message.next_attempt_at, message.HasField("next_attempt_at")),
        delivered_at=timestamp(message.delivered_at, message.HasField("delivered_at")),
        last_error=message.last_error,
    )


def notify_default(message: hadar_pb2.NotifyDefaultResponse) -> NotifyDefault:
    return NotifyDefault(
        user=message.user,
        configured=message.configured,
        url=message.url,
        on=tuple(job_state(s) for s in message.on),
        updated_at=timestamp(message.updated_at, message.HasField("updated_at")),
    )
