"""hadar.v1.Coordinator: what workers call. Decode, call the domain, encode."""

# ruff: noqa: N802  (method names are the RPC names from the .proto)
from __future__ import annotations

from collections.abc import Sequence

import grpc

from master import fields
from master.errors import InvalidArgumentError
from master.jobs.manager import ProgressUpdate, TaskExit
from master.jobs.workloads import workload_info
from master.nodes.registry import Registration, ReportedTask
from master.process.metrics import MasterMetrics
from master.service.codec import EXIT_KIND_FROM_PB, gpu_from_pb
from master.service.components import Components
from master.service.status import unary
from protos.hadar.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from store import UnitOfWork
from store.domain import Gpu


def _metrics(servicer: CoordinatorServicer) -> MasterMetrics:
    return servicer.parts.metrics


# Sizes of the store's columns (store/models.py) and caps on what one worker reports.
NODE_MAX = 255
ADDRESS_MAX = 255
AGENT_VERSION_MAX = 64
GPU_TYPE_MAX = 64
DEVICE_TEXT_MAX = 128
WORKLOAD_MAX = 128
JOB_TYPE_MAX = 255
WORKLOADS_MAX = 1024
# The tail of a failing process's stderr kept in the job's reason.
EXIT_MESSAGE_MAX = 16 * 1024


def _reported(
    tasks: Sequence[common_pb2.WorkerTask | coordinator_pb2.TaskRef], name: str = "tasks"
) -> tuple[ReportedTask, ...]:
    return tuple(
        ReportedTask(
            fields.int64(t.job_id, f"{name}[{i}].job_id"),
            fields.int32(t.task_index, f"{name}[{i}].task_index"),
            fields.int64(t.lease, f"{name}[{i}].lease"),
        )
        for i, t in enumerate(tasks)
    )


def _gpus(gpus: list[common_pb2.Gpu]) -> tuple[Gpu, ...]:
    indices = [g.index for g in gpus]
    if len(set(indices)) != len(indices):
        raise InvalidArgumentError("gpus", f"GPU indices repeat: {indices}")
    for i, gpu in enumerate(gpus):
        fields.int32(gpu.index, f"gpus[{i}].index")
        fields.name(gpu.type, f"gpus[{i}].type", GPU_TYPE_MAX)
        fields.int64(gpu.memory_bytes, f"gpus[{i}].memory_bytes")
        fields.label(gpu.device_name, f"gpus[{i}].device_name", DEVICE_TEXT_MAX)
        fields.label(gpu.uuid, f"gpus[{i}].uuid", DEVICE_TEXT_MAX)
    return tuple(gpu_from_pb(g) for g in gpus)


def _refs(items: list[ReportedTask] | tuple[ReportedTask, ...]) -> list[coordinator_pb2.TaskRef]:
    return [
        coordinator_pb2.TaskRef(job_id=t.job_id, task_index=t.task_index, lease=t.lease)
        for t in items
    ]


def _node_name(node: str) -> str:
    return fields.name(node, "node", NODE_MAX)


class CoordinatorServicer(coordinator_pb2_grpc.CoordinatorServicer):
    def __init__(self, parts: Components) -> None:
        self.parts = parts

    @unary(_metrics)
    def RegisterWorker(
        self, request: coordinator_pb2.RegisterWorkerRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.RegisterWorkerResponse:
        node = _node_name(request.node)
        if not request.address.strip():
            raise InvalidArgumentError("address", "the worker's host:port is required")
        address = fields.name(request.address, "address", ADDRESS_MAX)
        if len(request.workloads) > WORKLOADS_MAX:
            raise InvalidArgumentError("workloads", f"at most {WORKLOADS_MAX} workloads")
        workloads = tuple(
            fields.name(w, f"workloads[{i}]", WORKLOAD_MAX) for i, w in enumerate(request.workloads)
        )
        result = self.parts.registry.register(
            Registration(
                node=node,
                address=address,
                gpus=_gpus(list(request.gpus)),
                agent_version=fields.label(
                    request.agent_version, "agent_version", AGENT_VERSION_MAX
                ),
                workloads=workloads,
                tasks=_reported(list(request.tasks)),
                ended=_reported(list(request.ended), "ended"),
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
        reregister, stop = self.parts.registry.heartbeat(
            _node_name(request.node),
            _reported(list(request.tasks)),
            list(_gpus(list(request.gpus))),
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
        node = _node_name(request.node)
        updates = [
            ProgressUpdate(
                job_id=fields.int64(r.job_id, f"reports[{i}].job_id"),
                task_index=fields.int32(r.task_index, f"reports[{i}].task_index"),
                lease=fields.int64(r.lease, f"reports[{i}].lease"),
                iterations_done=fields.int64(r.iterations_done, f"reports[{i}].iterations_done"),
                iterations_per_s=r.iterations_per_s,
                checkpoint_iterations=fields.int64(
                    r.checkpoint_iterations, f"reports[{i}].checkpoint_iterations"
                ),
                gpu_type=fields.text(r.gpu_type, f"reports[{i}].gpu_type", GPU_TYPE_MAX).strip(),
            )
            for i, r in enumerate(request.reports)
        ]
        stale = self.parts.jobs.report_progress(node, updates)
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
        kind = EXIT_KIND_FROM_PB.get(request.kind)
        if kind is None:
            raise InvalidArgumentError("kind", "an exit kind is required")
        accepted = self.parts.jobs.task_exited(
            TaskExit(
                node=_node_name(request.node),
                job_id=fields.int64(request.job_id, "job_id"),
                task_index=fields.int32(request.task_index, "task_index"),
                lease=fields.int64(request.lease, "lease"),
                kind=kind,
                exit_code=request.exit_code if request.HasField("exit_code") else None,
                signal=request.signal,
                iterations_done=fields.int64(request.iterations_done, "iterations_done"),
                # A process may write anything to stderr: keep the report, drop what the
                # store cannot hold (NULs, more than a tail).
                message=request.message.replace("\0", "\ufffd")[-EXIT_MESSAGE_MAX:],
                contract_error=request.contract_error,
            )
        )
        return coordinator_pb2.TaskExitedResponse(accepted=accepted)

    @unary(_metrics)
    def ReportProfile(
        self, request: coordinator_pb2.ReportProfileRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ReportProfileResponse:
        for i, entry in enumerate(request.entries):
            if not entry.gpu_type:
                raise InvalidArgumentError(f"entries[{i}].gpu_type", "must not be empty")
            fields.name(entry.gpu_type, f"entries[{i}].gpu_type", GPU_TYPE_MAX)
            if entry.num_gpus < 1:
                raise InvalidArgumentError(f"entries[{i}].num_gpus", "must be >= 1")
            fields.int32(entry.num_gpus, f"entries[{i}].num_gpus")
            fields.text(entry.job_type, f"entries[{i}].job_type", JOB_TYPE_MAX)
            fields.text(entry.workload, f"entries[{i}].workload", WORKLOAD_MAX)
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
