"""Conversions between store domain objects and hadar.v1 messages."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import datetime

from google.protobuf.timestamp_pb2 import Timestamp

from master.jobs.notifications import effective_states, endpoint
from protos.hadar.v1 import common_pb2, hadar_pb2
from store import domain
from store.states import (
    ExitKind,
    GpuHealth,
    JobState,
    NodeState,
    NotificationStatus,
    ProgramKind,
    TaskState,
)

JOB_STATE_TO_PB = {
    JobState.PENDING: common_pb2.JOB_STATE_PENDING,
    JobState.RUNNING: common_pb2.JOB_STATE_RUNNING,
    JobState.PREEMPTED: common_pb2.JOB_STATE_PREEMPTED,
    JobState.COMPLETED: common_pb2.JOB_STATE_COMPLETED,
    JobState.FAILED: common_pb2.JOB_STATE_FAILED,
    JobState.CANCELLED: common_pb2.JOB_STATE_CANCELLED,
    JobState.TIMEOUT: common_pb2.JOB_STATE_TIMEOUT,
}
JOB_STATE_FROM_PB = {v: k for k, v in JOB_STATE_TO_PB.items()}
NODE_STATE_TO_PB = {
    NodeState.READY: common_pb2.NODE_STATE_READY,
    NodeState.DRAINING: common_pb2.NODE_STATE_DRAINING,
    NodeState.DRAINED: common_pb2.NODE_STATE_DRAINED,
    NodeState.UNREACHABLE: common_pb2.NODE_STATE_UNREACHABLE,
}
TASK_STATE_TO_PB = {
    TaskState.ASSIGNED: common_pb2.TASK_STATE_ASSIGNED,
    TaskState.STARTING: common_pb2.TASK_STATE_STARTING,
    TaskState.RUNNING: common_pb2.TASK_STATE_RUNNING,
    TaskState.STOPPING: common_pb2.TASK_STATE_STOPPING,
    TaskState.EXITED: common_pb2.TASK_STATE_EXITED,
    TaskState.LOST: common_pb2.TASK_STATE_LOST,
}
EXIT_KIND_FROM_PB = {
    common_pb2.EXIT_KIND_COMPLETED: ExitKind.COMPLETED,
    common_pb2.EXIT_KIND_STOPPED: ExitKind.STOPPED,
    common_pb2.EXIT_KIND_FAILED: ExitKind.FAILED,
    common_pb2.EXIT_KIND_KILLED: ExitKind.KILLED,
    common_pb2.EXIT_KIND_LEASE_DONE: ExitKind.LEASE_DONE,
}


def timestamp(value: datetime) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(value)
    return ts


def spec_to_pb(spec: domain.JobSpec) -> common_pb2.JobSpec:
    out = common_pb2.JobSpec(
        name=spec.name,
        num_gpus=spec.num_gpus,
        iterations=spec.iterations,
        batch_size=spec.batch_size,
        priority=spec.priority,
        allowed_gpu_types=list(spec.allowed_gpu_types),
        preemptible=spec.preemptible,
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
        array_job_id=spec.array_job_id,
        after_ok=[i for kind, i in spec.dependencies if kind == "afterok"],
        after_any=[i for kind, i in spec.dependencies if kind == "afterany"],
        after_fail=[i for kind, i in spec.dependencies if kind == "afterfail"],
        # Every user may read every job, and a webhook's path is often its secret.
        notify_url=endpoint(spec.notify_url) if spec.notify_url else "",
        notify_on=[JOB_STATE_TO_PB[s] for s in spec.notify_on],
        no_notify=spec.no_notify,
        warn_signal=spec.warn_signal,
        warn_before_s=spec.warn_before_s,
        interactive=spec.interactive,
    )
    if spec.array_index is not None:
        out.array_index = spec.array_index
    if spec.max_retries is not None:
        out.max_retries = spec.max_retries
    if spec.program_kind is ProgramKind.WORKLOAD:
        out.workload.name = spec.workload
    elif spec.program_kind is ProgramKind.SCRIPT:
        out.script.argv.extend(spec.argv)
    else:
        out.command.argv.extend(spec.argv)
    return out


def task_to_pb(task: domain.Task) -> common_pb2.Task:
    return common_pb2.Task(
        job_id=task.job_id,
        task_index=task.task_index,
        node=task.node,
        gpu_indices=list(task.gpu_indices),
        gpu_type=task.gpu_type,
        lease=task.lease,
        state=TASK_STATE_TO_PB[task.state],
        rank_offset=task.rank_offset,
        local_batch_size=task.local_batch_sizes[0] if task.local_batch_sizes else 0,
        accumulation_steps=task.accumulation_steps,
        shared_with_job_id=task.shared_with_job_id,
    )


def job_to_pb(
    job: domain.Job,
    tasks: Iterable[domain.Task] = (),
    throughputs: Iterable[tuple[str, float, str]] = (),
    *,
    reason: str | None = None,
) -> common_pb2.Job:
    """The job's message; ``reason`` in place of the stored one (a round's waiting reason,
    master/rounds/reasons.py)."""
    out = common_pb2.Job(
        id=job.id,
        spec=spec_to_pb(job.spec),
        user=job.user,
        state=JOB_STATE_TO_PB[job.state],
        reason=job.reason if reason is None else reason,
        iterations_done=job.iterations_done,
        attained_service=job.attained_service,
        submitted_at=timestamp(job.submitted_at),
        tasks=[task_to_pb(t) for t in tasks],
        retries=job.retries,
        version=job.version,
        preemptions=job.preemptions,
        migrations=job.migrations,
        checkpoint_iterations=job.checkpoint_iterations,
        reports_progress=job.reports_progress,
        throughputs=[
            common_pb2.Throughput(gpu_type=g, iterations_per_s=v, source=s)
            for g, v, s in throughputs
        ],
    )
    if job.started_at is not None:
        out.started_at.CopyFrom(timestamp(job.started_at))
    if job.finished_at is not None:
        out.finished_at.CopyFrom(timestamp(job.finished_at))
    if job.exit_code is not None:
        out.exit_code = job.exit_code
    out.failure_output = job.failure_output
    out.held_by = job.held_by
    out.requeues = job.requeues
    return out


def hide_private(job: common_pb2.Job) -> common_pb2.Job:
    """Empties the job's private parts (see `Job.private_hidden` in common.proto) in place,
    for a caller who may see only what a queue shows."""
    spec = job.spec
    spec.env.clear()
    program = spec.WhichOneof("program")
    if program in ("script", "command"):
        getattr(spec, program).ClearField("argv")
        # Named after the program it runs unless the submitter chose a name.
        spec.job_type = ""
    for name in ("workdir", "checkpoint_dir", "output", "error", "notify_url"):
        spec.ClearField(name)
    job.failure_output = ""
    job.private_hidden = True
    return job


class ListedJobs:
    """Jobs without tasks encoded for listings, remembered by the job object: the store
    hands out the same object for a row that has not changed (store.repositories.listing),
    so listing a long queue again encodes only the jobs that changed. Remembered messages
    are shared: a response's constructor copies them; nothing may change them."""

    def __init__(self, size: int = 40_000) -> None:
        self._size = size
        # id(job) -> (job, its messages by whether private parts are hidden, each with the
        # reason it shows). The job is kept so that its id cannot be reused while the entry
        # exists.
        self._encoded: dict[int, tuple[domain.Job, dict[bool, tuple[str, common_pb2.Job]]]] = {}
        # id(job) -> (job, its messages with an expected start, by whether private parts
        # are hidden, each with the start it carries and the message it copies): a forecast
        # changes the start only every forecast_interval_s, so listings between two copy
        # each message once.
        self._started: dict[
            int,
            tuple[domain.Job, dict[bool, tuple[datetime, common_pb2.Job, common_pb2.Job]]],
        ] = {}
        self._lock = threading.Lock()

    def pb_expected(
        self, job: domain.Job, *, hidden: bool, expected_start: datetime | None, reason: str
    ) -> common_pb2.Job:
        """As :meth:`pb`, with ``expected_start`` set when it is not None."""
        base = self.pb(job, hidden=hidden, reason=reason)
        if expected_start is None:
            return base
        entry = self._started.get(id(job))
        if entry is None or entry[0] is not job:
            entry = (job, {})
            with self._lock:
                while len(self._started) >= self._size:
                    del self._started[next(iter(self._started))]
                self._started[id(job)] = entry
        known = entry[1].get(hidden)
        if known is not None and known[0] == expected_start and known[1] is base:
            return known[2]
        message = common_pb2.Job()
        message.CopyFrom(base)
        message.expected_start.CopyFrom(timestamp(expected_start))
        entry[1][hidden] = (expected_start, base, message)
        return message

    def pb(self, job: domain.Job, *, hidden: bool, reason: str) -> common_pb2.Job:
        """The job as a listing shows it, with ``reason`` (see :func:`job_to_pb`)."""
        entry = self._encoded.get(id(job))
        if entry is None or entry[0] is not job:
            entry = (job, {})
            with self._lock:
                while len(self._encoded) >= self._size:
                    # Oldest first: enough for any queue shorter than the memo.
                    del self._encoded[next(iter(self._encoded))]
                self._encoded[id(job)] = entry
        known = entry[1].get(hidden)
        if known is not None and known[0] == reason:
            return known[1]
        # Two calls may both encode it; either message is the same. A waiting job's reason
        # changes from round to round while its row stays: the message is made again.
        message = job_to_pb(job, reason=reason)
        if hidden:
            message = hide_private(message)
        entry[1][hidden] = (reason, message)
        return message


def event_to_pb(event: domain.JobEvent) -> common_pb2.JobEvent:
    return common_pb2.JobEvent(
        job_id=event.job_id,
        at=timestamp(event.at),
        from_state=JOB_STATE_TO_PB[event.from_state],
        to_state=JOB_STATE_TO_PB[event.to_state],
        kind=event.kind,
        reason=event.reason,
        round=event.round,
    )


def gpu_from_pb(gpu: common_pb2.Gpu) -> domain.Gpu:
    return domain.Gpu(
        index=gpu.index,
        type=gpu.type,
        memory_bytes=gpu.memory_bytes,
        device_name=gpu.device_name,
        uuid=gpu.uuid,
        health=GpuHealth.UNHEALTHY
        if gpu.health == common_pb2.GPU_HEALTH_UNHEALTHY
        else GpuHealth.HEALTHY,
        utilization=gpu.utilization,
        fake=gpu.fake,
    )


def node_to_pb(node: domain.Node, jobs_by_gpu: dict[tuple[str, int], list[int]]) -> common_pb2.Node:
    return common_pb2.Node(
        name=node.name,
        state=NODE_STATE_TO_PB[node.state],
        address=node.address,
        gpus=[
            common_pb2.Gpu(
                index=g.index,
                type=g.type,
                memory_bytes=g.memory_bytes,
                device_name=g.device_name,
                uuid=g.uuid,
                health=common_pb2.GPU_HEALTH_HEALTHY
                if g.health is GpuHealth.HEALTHY
                else common_pb2.GPU_HEALTH_UNHEALTHY,
                utilization=g.utilization,
                job_ids=jobs_by_gpu.get((node.name, g.index), []),
                fake=g.fake,
            )
            for g in node.gpus
        ],
        last_heartbeat=timestamp(node.last_heartbeat),
        agent_version=node.agent_version,
        reason=node.reason,
        registered_at=timestamp(node.registered_at),
    )


def token_to_pb(token: domain.ApiToken) -> hadar_pb2.TokenInfo:
    out = hadar_pb2.TokenInfo(
        id=token.id,
        user=token.user,
        admin=token.admin,
        description=token.description,
        created_at=timestamp(token.created_at),
        revoked=token.revoked,
    )
    if token.last_used_at is not None:
        out.last_used_at.CopyFrom(timestamp(token.last_used_at))
    return out


DELIVERY_STATUS_TO_PB = {
    NotificationStatus.PENDING: hadar_pb2.DELIVERY_STATUS_PENDING,
    NotificationStatus.DELIVERED: hadar_pb2.DELIVERY_STATUS_DELIVERED,
    NotificationStatus.GAVE_UP: hadar_pb2.DELIVERY_STATUS_GAVE_UP,
}


def delivery_to_pb(item: domain.Notification) -> hadar_pb2.NotificationDelivery:
    out = hadar_pb2.NotificationDelivery(
        id=item.id,
        job_state=JOB_STATE_TO_PB[item.job_state],
        endpoint=endpoint(item.url),
        status=DELIVERY_STATUS_TO_PB[item.status],
        attempts=item.attempts,
        created_at=timestamp(item.created_at),
        last_error=item.last_error,
    )
    if item.history:
        out.last_attempt_at.CopyFrom(timestamp(item.history[-1].at))
    if item.next_attempt_at is not None and item.status is NotificationStatus.PENDING:
        out.next_attempt_at.CopyFrom(timestamp(item.next_attempt_at))
    if item.delivered_at is not None:
        out.delivered_at.CopyFrom(timestamp(item.delivered_at))
    return out


def notify_default_to_pb(
    user: str, default: domain.NotifyDefault | None
) -> hadar_pb2.NotifyDefaultResponse:
    if default is None:
        return hadar_pb2.NotifyDefaultResponse(user=user, configured=False)
    return hadar_pb2.NotifyDefaultResponse(
        user=user,
        configured=True,
        url=default.url,
        on=[JOB_STATE_TO_PB[s] for s in effective_states(default.on)],
        updated_at=timestamp(default.updated_at),
    )
