"""Row -> domain conversions, shared by the repositories."""

from __future__ import annotations

from typing import Any

from store.domain import (
    ApiToken,
    Gpu,
    Job,
    JobEvent,
    JobSpec,
    Node,
    Round,
    Task,
    ThroughputMeasurement,
    UsageRecord,
)
from store.models import (
    ApiTokenRow,
    GpuRow,
    JobEventRow,
    JobRow,
    NodeRow,
    RoundRow,
    TaskRow,
    ThroughputRow,
    UsageRow,
)
from store.states import ExitKind, GpuHealth, JobState, NodeState, ProgramKind, TaskState


def job_spec(row: JobRow) -> JobSpec:
    return JobSpec(
        name=row.name,
        num_gpus=row.num_gpus,
        iterations=row.iterations,
        program_kind=ProgramKind(row.program_kind),
        workload=row.workload,
        argv=tuple(row.argv or ()),
        batch_size=row.batch_size,
        priority=row.priority,
        allowed_gpu_types=tuple(row.allowed_gpu_types or ()),
        preemptible=row.preemptible,
        shareable=row.shareable,
        forkable=row.forkable,
        env=tuple(sorted((row.env or {}).items())),
        workdir=row.workdir,
        checkpoint_dir=row.checkpoint_dir,
        job_type=row.job_type,
        gpu_memory_bytes=row.gpu_memory_bytes,
        max_retries=row.max_retries,
        output=row.output,
        error=row.error,
        time_limit_s=row.time_limit_s,
        array=row.array_spec or "",
        array_job_id=row.array_job_id or 0,
        array_index=row.array_index,
        array_max_running=row.array_max_running or 0,
        dependencies=tuple((str(k), int(i)) for k, i in (row.dependencies or ())),
        notify_url=row.notify_url,
        notify_on=tuple(JobState(s) for s in row.notify_on or ()),
        no_notify=row.no_notify,
        warn_signal=row.warn_signal or 0,
        warn_before_s=row.warn_before_s or 0,
        interactive=bool(row.interactive),
    )


def spec_columns(spec: JobSpec) -> dict[str, Any]:
    """The jobs table's columns that hold `spec`, by name."""
    return {
        "name": spec.name,
        "num_gpus": spec.num_gpus,
        "iterations": spec.iterations,
        "program_kind": spec.program_kind.value,
        "workload": spec.workload,
        "argv": list(spec.argv),
        "batch_size": spec.batch_size,
        "priority": spec.priority,
        "allowed_gpu_types": list(spec.allowed_gpu_types),
        "preemptible": spec.preemptible,
        "shareable": spec.shareable,
        "forkable": spec.forkable,
        "env": dict(spec.env),
        "workdir": spec.workdir,
        "checkpoint_dir": spec.checkpoint_dir,
        "job_type": spec.job_type,
        "gpu_memory_bytes": spec.gpu_memory_bytes,
        "max_retries": spec.max_retries,
        "output": spec.output,
        "error": spec.error,
        "time_limit_s": spec.time_limit_s,
        "array_spec": spec.array,
        "array_job_id": spec.array_job_id or None,
        "array_index": spec.array_index,
        "array_max_running": spec.array_max_running,
        "dependencies": [[kind, job_id] for kind, job_id in spec.dependencies],
        "notify_url": spec.notify_url,
        "notify_on": [s.value for s in spec.notify_on],
        "no_notify": spec.no_notify,
        "warn_signal": spec.warn_signal,
        "warn_before_s": spec.warn_before_s,
        "interactive": spec.interactive,
    }


def fill_spec(row: JobRow, spec: JobSpec) -> None:
    for name, value in spec_columns(spec).items():
        setattr(row, name, value)


def job(row: JobRow) -> Job:
    return Job(
        id=row.id,
        user=row.user,
        spec=job_spec(row),
        state=JobState(row.state),
        reason=row.reason,
        iterations_done=row.iterations_done,
        checkpoint_iterations=row.checkpoint_iterations,
        attained_service=row.attained_service,
        retries=row.retries,
        exit_code=row.exit_code,
        preemptions=row.preemptions,
        migrations=row.migrations,
        submitted_at=row.submitted_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        version=row.version,
        reports_progress=row.reports_progress,
        restart_s=row.restart_s,
        failure_output=row.failure_output or "",
        held_by=row.held_by or "",
        requeues=row.requeues or 0,
        requeued_run_s=row.requeued_run_s or 0.0,
    )


def job_event(row: JobEventRow) -> JobEvent:
    return JobEvent(
        id=row.id,
        job_id=row.job_id,
        at=row.at,
        from_state=JobState(row.from_state),
        to_state=JobState(row.to_state),
        kind=row.kind,
        reason=row.reason,
        round=row.round,
    )


def gpu(row: GpuRow) -> Gpu:
    return Gpu(
        index=row.index,
        type=row.type,
        memory_bytes=row.memory_bytes,
        device_name=row.device_name,
        uuid=row.uuid,
        health=GpuHealth(row.health),
        utilization=row.utilization,
        fake=row.fake,
    )


def node(row: NodeRow) -> Node:
    return Node(
        name=row.name,
        address=row.address,
        state=NodeState(row.state),
        reason=row.reason,
        agent_version=row.agent_version,
        workloads=tuple(row.workloads or ()),
        gpus=tuple(gpu(g) for g in row.gpus),
        registered_at=row.registered_at,
        last_heartbeat=row.last_heartbeat,
    )


def task(row: TaskRow) -> Task:
    return Task(
        id=row.id,
        job_id=row.job_id,
        task_index=row.task_index,
        node=row.node_name,
        lease=row.lease,
        gpu_indices=tuple(row.gpu_indices or ()),
        gpu_type=row.gpu_type,
        state=TaskState(row.state),
        rank_offset=row.rank_offset,
        local_batch_sizes=tuple(row.local_batch_sizes or ()),
        accumulation_steps=row.accumulation_steps,
        num_copies=row.num_copies,
        copy_index=row.copy_index,
        shared_with_job_id=row.shared_with_job_id,
        round=row.round,
        iteration_budget=row.iteration_budget,
        created_at=row.created_at,
        acknowledged_at=row.acknowledged_at,
        exit_kind=ExitKind(row.exit_kind) if row.exit_kind else None,
        exit_code=row.exit_code,
        finished_at=row.finished_at,
    )


def round_(row: RoundRow) -> Round:
    return Round(
        number=row.number,
        policy=row.policy,
        started_at=row.started_at,
        duration_s=row.duration_s,
        plan=dict(row.plan or {}),
        actions=row.actions,
        dispatch_failures=row.dispatch_failures,
    )


def throughput(row: ThroughputRow) -> ThroughputMeasurement:
    return ThroughputMeasurement(
        job_type=row.job_type,
        gpu_type=row.gpu_type,
        num_gpus=row.num_gpus,
        iterations_per_s=row.iterations_per_s,
        count=row.count,
        source=row.source,
        updated_at=row.updated_at,
    )


def api_token(row: ApiTokenRow) -> ApiToken:
    return ApiToken(
        id=row.id,
        user=row.user,
        admin=row.admin,
        description=row.description,
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        revoked=row.revoked_at is not None,
    )


def usage(row: UsageRow) -> UsageRecord:
    return UsageRecord(
        task_id=row.task_id,
        job_id=row.job_id,
        user=row.user,
        node=row.node_name,
        lease=row.lease,
        gpu_type=row.gpu_type,
        num_gpus=row.num_gpus,
        started_at=row.started_at,
        ended_at=row.ended_at,
        end_state=TaskState(row.end_state),
        exit_kind=ExitKind(row.exit_kind) if row.exit_kind else None,
        exit_code=row.exit_code,
    )
