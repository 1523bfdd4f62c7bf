"""hadar.v1.Coordinator: what workers call. Decode, call the domain, encode."""

# ruff: noqa: N802  (method names are the RPC names from the .proto)
from __future__ import annotations

import grpc

from master.components import Components
from master.errors import InvalidArgumentError
from master.jobs import ProgressUpdate, TaskExit
from master.metrics import MasterMetrics
from master.registry import Registration, ReportedTask
from master.service.codec import EXIT_KIND_FROM_PB, gpu_from_pb
from master.service.status import metadata, unary
from master.workloads import workload_info
from protos.hadar.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from store import UnitOfWork


def _metrics(servicer: CoordinatorServicer) -> MasterMetrics:
    return servicer.parts.metrics


def _reported(tasks: list[common_pb2.WorkerTask]) -> tuple[ReportedTask, ...]:
    return tuple(ReportedTask(t.job_id, t.task_index, t.lease) for t in tasks)


def _refs(items: list[ReportedTask] | tuple[ReportedTask, ...]) -> list[coordinator_pb2.TaskRef]:
    return [
        coordinator_pb2.TaskRef(job_id=t.job_id, task_index=t.task_index, lease=t.lease)
        for t in items
    ]


def _node_name(node: str) -> str:
    name = node.strip()
    if not name or len(name) > 255:
        raise InvalidArgumentError("node", "must be 1 to 255 characters")
    return name


class CoordinatorServicer(coordinator_pb2_grpc.CoordinatorServicer):
    def __init__(self, parts: Components) -> None:
        self.parts = parts

    @unary(_metrics)
    def RegisterWorker(
        self, request: coordinator_pb2.RegisterWorkerRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.RegisterWorkerResponse:
        self.parts.auth.worker(metadata(context))
        if not request.address.strip():
            raise InvalidArgumentError("address", "the worker's host:port is required")
        indices = [g.index for g in request.gpus]
        if len(set(indices)) != len(indices):
            raise InvalidArgumentError("gpus", f"GPU indices repeat: {indices}")
        for i, gpu in enumerate(request.gpus):
            if not gpu.type.strip():
                raise InvalidArgumentError(f"gpus[{i}].type", "must not be empty")
        result = self.parts.registry.register(
            Registration(
                node=_node_name(request.node),
                address=request.address.strip(),
                gpus=tuple(gpu_from_pb(g) for g in request.gpus),
                agent_version=request.agent_version,
                workloads=tuple(request.workloads),
                tasks=_reported(list(request.tasks)),
            )
        )
        return coordinator_pb2.RegisterWorkerResponse(
            heartbeat_interval_s=self.parts.settings.heartbeat_interval_s,
            keep=_refs(result.keep),
            stop=_refs(result.stop),
        )

    @unary(_metrics)
    def Heartbeat(
        self, request: coordinator_pb2.HeartbeatRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.HeartbeatResponse:
        self.parts.auth.worker(metadata(context))
        reregister, stop = self.parts.registry.heartbeat(
            _node_name(request.node),
            _reported(list(request.tasks)),
            [gpu_from_pb(g) for g in request.gpus],
        )
        return coordinator_pb2.HeartbeatResponse(
            reregister=reregister,
            stop=_refs(stop),
            heartbeat_interval_s=self.parts.settings.heartbeat_interval_s,
        )

    @unary(_metrics)
    def ReportProgress(
        self, request: coordinator_pb2.ReportProgressRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ReportProgressResponse:
        self.parts.auth.worker(metadata(context))
        updates = [
            ProgressUpdate(
                job_id=r.job_id,
                task_index=r.task_index,
                lease=r.lease,
                iterations_done=r.iterations_done,
                iterations_per_s=r.iterations_per_s,
                checkpoint_iterations=r.checkpoint_iterations,
                gpu_type=r.gpu_type,
            )
            for r in request.reports
        ]
        stale = self.parts.jobs.report_progress(_node_name(request.node), updates)
        return coordinator_pb2.ReportProgressResponse(
            acks=[
                coordinator_pb2.ProgressAck(
                    job_id=u.job_id, task_index=u.task_index, lease=u.lease, stale=s
                )
                for u, s in zip(updates, stale, strict=True)
            ]
        )

    @unary(_metrics)
    def TaskExited(
        self, request: coordinator_pb2.TaskExitedRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.TaskExitedResponse:
        self.parts.auth.worker(metadata(context))
        kind = EXIT_KIND_FROM_PB.get(request.kind)
        if kind is None:
            raise InvalidArgumentError("kind", "an exit kind is required")
        accepted = self.parts.jobs.task_exited(
            TaskExit(
                node=_node_name(request.node),
                job_id=request.job_id,
                task_index=request.task_index,
                lease=request.lease,
                kind=kind,
                exit_code=request.exit_code if request.HasField("exit_code") else None,
                signal=request.signal,
                iterations_done=request.iterations_done,
                message=request.message,
            )
        )
        return coordinator_pb2.TaskExitedResponse(accepted=accepted)

    @unary(_metrics)
    def ReportProfile(
        self, request: coordinator_pb2.ReportProfileRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ReportProfileResponse:
        self.parts.auth.worker(metadata(context))
        for i, entry in enumerate(request.entries):
            if not entry.gpu_type:
                raise InvalidArgumentError(f"entries[{i}].gpu_type", "must not be empty")
            if entry.num_gpus < 1:
                raise InvalidArgumentError(f"entries[{i}].num_gpus", "must be >= 1")
            if not entry.iterations_per_s > 0 or entry.iterations_per_s == float("inf"):
                raise InvalidArgumentError(
                    f"entries[{i}].iterations_per_s", "must be positive and finite"
                )
            if not (entry.job_type or entry.workload):
                raise InvalidArgumentError(f"entries[{i}].job_type", "job_type or workload needed")
        entries = list(request.entries)

        def store(uow: UnitOfWork) -> int:
            for e in entries:
                job_type = e.job_type or workload_info(e.workload).job_type()
                uow.throughput.set_profile(job_type, e.gpu_type, e.num_gpus, e.iterations_per_s)
            return len(entries)

        stored = self.parts.tx.write(store, jobs=False)
        return coordinator_pb2.ReportProfileResponse(stored=stored)
