"""From the store to the scheduling views: the cluster, the active jobs and what they hold."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from master.scheduling.plan import Allocation, GpuSlot
from master.scheduling.throughput import ThroughputModel
from master.scheduling.views import ClusterView, GpuView, JobView, NodeView, Snapshot
from store import UnitOfWork
from store.domain import Job, Node, Task, ThroughputMeasurement
from store.repositories.counters import ROUND
from store.states import GpuHealth, JobState, NodeState, TaskState

# Tasks that make up a job's current placement (acknowledged or about to be).
PLACED_STATES = (TaskState.ASSIGNED, TaskState.STARTING, TaskState.RUNNING)


@dataclass(frozen=True)
class RoundInput:
    snapshot: Snapshot
    jobs: Mapping[int, Job]
    current: Mapping[int, Allocation]
    tasks: Mapping[int, tuple[Task, ...]]
    nodes: Mapping[str, Node]


def with_measurements(
    base: ThroughputModel, measurements: Iterable[ThroughputMeasurement]
) -> ThroughputModel:
    model = base
    for m in measurements:
        model = model.observe(m.job_type, m.gpu_type, m.num_gpus, m.iterations_per_s)
    return model


def cluster_view(nodes: Iterable[Node]) -> ClusterView:
    return ClusterView(
        tuple(
            NodeView(
                name=node.name,
                gpus=tuple(
                    GpuView(
                        node=node.name,
                        index=g.index,
                        type=g.type,
                        memory_bytes=g.memory_bytes,
                        healthy=g.health is GpuHealth.HEALTHY,
                    )
                    for g in node.gpus
                ),
                schedulable=node.state is NodeState.READY,
            )
            for node in nodes
        )
    )


def current_allocation(job: Job, tasks: Iterable[Task]) -> Allocation | None:
    """The allocation a running job holds, rebuilt from its newest placement's tasks."""
    placed = [t for t in tasks if t.state in PLACED_STATES]
    if job.state is not JobState.RUNNING or not placed:
        return None
    lease = max(t.lease for t in placed)
    placed = sorted((t for t in placed if t.lease == lease), key=lambda t: t.task_index)
    copies: dict[int, list[Task]] = defaultdict(list)
    for task in placed:
        copies[task.copy_index].append(task)
    slots: list[tuple[GpuSlot, ...]] = []
    shares: list[int] = []
    for index in sorted(copies):
        copy_slots: list[GpuSlot] = []
        for task in copies[index]:
            copy_slots.extend(GpuSlot(task.node, i) for i in task.gpu_indices)
            shares.extend(task.local_batch_sizes or [1] * len(task.gpu_indices))
        slots.append(tuple(copy_slots))
    first = placed[0]
    try:
        return Allocation(
            copies=tuple(slots),
            batch_shares=tuple(shares),
            accumulation_steps=first.accumulation_steps,
            shared_with=first.shared_with_job_id or None,
        )
    except ValueError:
        return None


def read_round_input(
    uow: UnitOfWork, base_model: ThroughputModel, round_seconds: float
) -> RoundInput:
    nodes = uow.nodes.all()
    jobs = uow.jobs.list_unfinished()
    tasks_by_job: dict[int, list[Task]] = defaultdict(list)
    for task in uow.tasks.active():
        tasks_by_job[task.job_id].append(task)
    model = with_measurements(base_model, uow.throughput.all())
    current: dict[int, Allocation] = {}
    views: list[JobView] = []
    for job in jobs:
        alloc = current_allocation(job, tasks_by_job.get(job.id, ()))
        if alloc is not None:
            current[job.id] = alloc
        spec = job.spec
        views.append(
            JobView(
                id=job.id,
                job_type=spec.job_type,
                num_gpus=spec.num_gpus,
                total_iterations=float(spec.iterations),
                iterations_done=float(job.iterations_done),
                batch_size=max(1, spec.batch_size),
                priority=spec.priority,
                allowed_gpu_types=frozenset(spec.allowed_gpu_types),
                preemptible=spec.preemptible,
                migratable=spec.preemptible,
                shareable=spec.shareable,
                memory_bytes_per_gpu=spec.gpu_memory_bytes,
                arrival_time=job.submitted_at.timestamp(),
                attained_service=job.attained_service,
                current=alloc,
                user=job.user,
            )
        )
    snapshot = Snapshot(
        cluster=cluster_view(nodes),
        jobs=tuple(views),
        round_number=uow.counters.current(ROUND) + 1,
        round_seconds=round_seconds,
        throughput=model,
    )
    return RoundInput(
        snapshot=snapshot,
        jobs={j.id: j for j in jobs},
        current=current,
        tasks={k: tuple(v) for k, v in tasks_by_job.items()},
        nodes={n.name: n for n in nodes},
    )
