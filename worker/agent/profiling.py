"""``hadar-worker profile``: measures the built-in workloads on each GPU type of this node
and reports the throughputs to the master (Coordinator.ReportProfile).

A real GPU is measured on its CUDA device. Fake GPUs all compute on the CPU, so each workload
is measured once on the CPU and scaled by each fake type's pace, which is exactly the
slow-down the runtime applies to jobs on that type.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from protos.hadar.v1 import coordinator_pb2
from worker.agent.master import GrpcMasterClient, MasterError
from worker.gpus import GpuError, GpuInfo, cuda_device
from worker.settings import WorkerSettings


class ProfileError(RuntimeError):
    """Profiling cannot run (no healthy GPU, unknown workload, no torch); says why."""


def _one_gpu_per_type(gpus: Sequence[GpuInfo]) -> dict[str, GpuInfo]:
    chosen: dict[str, GpuInfo] = {}
    for gpu in gpus:
        if gpu.healthy and gpu.type not in chosen:
            chosen[gpu.type] = gpu
    return chosen


def measure_node(
    gpus: Sequence[GpuInfo],
    workloads: Sequence[str] | None,
    iterations: int,
    batch_size: int | None = None,
) -> list[coordinator_pb2.ProfileEntry]:
    """One entry per (workload, GPU type): iterations per second of one process on one GPU."""
    if iterations < 1:
        raise ProfileError(f"iterations must be >= 1, got {iterations}")
    chosen = _one_gpu_per_type(gpus)
    if not chosen:
        raise ProfileError("this node has no healthy GPU to profile")
    # CUDA numbers devices like NVML only in PCI bus order; must be set before CUDA starts.
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    try:
        from worker.workloads.profile import profile
        from worker.workloads.registry import WORKLOADS, UnknownWorkloadError
    except ImportError as exc:
        raise ProfileError(f"the built-in workloads cannot be loaded: {exc}") from exc
    names = list(workloads) if workloads else sorted(WORKLOADS)
    entries: list[coordinator_pb2.ProfileEntry] = []
    cpu_results = None
    try:
        for gpu_type, gpu in sorted(chosen.items()):
            if gpu.fake:
                if cpu_results is None:
                    cpu_results = profile(names, "cpu", iterations, batch_size=batch_size)
                results = [
                    r._replace(iterations_per_s=r.iterations_per_s * gpu.fake_pace)
                    for r in cpu_results
                ]
            else:
                try:
                    device = cuda_device(gpu, os.environ.get("CUDA_VISIBLE_DEVICES"))
                except GpuError as exc:
                    raise ProfileError(str(exc)) from exc
                results = profile(names, device, iterations, batch_size=batch_size)
            entries.extend(
                coordinator_pb2.ProfileEntry(
                    workload=r.workload,
                    job_type=r.job_type,
                    gpu_type=gpu_type,
                    num_gpus=1,
                    iterations_per_s=r.iterations_per_s,
                )
                for r in results
            )
    except UnknownWorkloadError as exc:
        raise ProfileError(str(exc)) from exc
    return entries


def report_profile(
    settings: WorkerSettings, entries: Sequence[coordinator_pb2.ProfileEntry]
) -> int:
    """Sends the entries to the master; returns how many it stored."""
    client = GrpcMasterClient(
        settings.master, settings.token, settings.rpc_timeout_s, settings.master_credentials()
    )
    try:
        response = client.report_profile(
            coordinator_pb2.ReportProfileRequest(node=settings.node_name(), entries=entries)
        )
    except MasterError as exc:
        raise ProfileError(f"cannot report to the master: {exc}") from exc
    finally:
        client.close()
    return response.stored
