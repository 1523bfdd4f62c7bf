"""``make gpu-check``: Hadar's GPU path on a real NVIDIA GPU, step by step.

    .venv/bin/python bench/gpu_check.py [--iterations 300] [--skip-cluster]

1. discovery: the GPUs through NVML exactly as the worker finds them (``worker.gpus``, with
   the worker config's ``[gpu_names]``): name, memory, UUID, health and the GPU type the
   name maps to. The first healthy GPU that is not in MIG mode is the one checked (or the
   first one ``CUDA_VISIBLE_DEVICES`` names).
2. resume: each built-in workload trains ``--iterations`` iterations on CUDA under the
   runtime helper, once without a break and once as two leases in two processes (a
   checkpoint at half-way, then a resume); the final parameters must be bit-identical
   (``HADAR_DETERMINISTIC=1``). Where torch has no deterministic CUDA kernel for one of a
   workload's operations, the runs go without deterministic algorithms and the resumed run
   must be within twice the difference between two uninterrupted runs (that kernel's own
   run-to-run noise, which a resume cannot avoid).
3. sharing: two shareable jobs train on the GPU at the same time, each with gradient
   accumulation, and the peak memory each takes (``torch.cuda.max_memory_allocated``, and
   NVML's per-process figure, which includes the CUDA context) is compared with the
   footprint the ``sjf-bsbf`` policy predicted when it chose the accumulation steps.
4. throughput: each workload measured through the worker's profiling path (what
   ``hadar-worker profile`` reports to the master), with the rows it would add to the
   master's throughput table.
5. cluster: a one-worker local cluster (``hctl local``'s machinery) whose worker uses this
   machine's real GPUs through NVML, and a built-in job run on it to completion.

Each step prints PASS or FAIL with its figures; the exit status is 1 when any step failed.
Without a GPU (no NVML library, no device, or no CUDA in torch) the check prints one line
and exits 0. The steps that need CUDA run in child processes of this script (``--child``):
each gets the chosen GPU through ``CUDA_VISIBLE_DEVICES`` and a fresh CUDA context (so peak
memory is its own), and a crash in one cannot take the others down.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worker.gpus import (
    DEFAULT_GPU_NAME_TABLE,
    GIB,
    GpuError,
    GpuInfo,
    NvmlGpuProvider,
    PynvmlLibrary,
)

if TYPE_CHECKING:
    import torch

MIB = 1024**2
NO_GPU_LINE = "gpu-check: no NVIDIA GPU found ({reason}); nothing to check"
# A child that hit an operation torch has no deterministic CUDA kernel for.
EXIT_NOT_DETERMINISTIC = 3
SEED = 1234
# The shared pair: batches large enough that activations, which accumulation divides, and
# not the fixed CUDA workspaces dominate the footprint, as for the jobs a lab shares GPUs for.
SHARE_ITERATIONS = 60
# Measured peaks may exceed the prediction by this much: the caching allocator rounds blocks
# and cuDNN/cuBLAS pick workspaces per shape, neither of which the footprint model sees.
MEMORY_TOLERANCE = 0.05
PROFILE_ITERATIONS = 50
CLUSTER_WORKLOAD = "resnet"
CLUSTER_ITERATIONS = 300
CHILD_TIMEOUT_S = 600.0


class NoGpuError(Exception):
    """Nothing to check on this machine; the message says why."""


class CheckFailedError(Exception):
    """A step cannot go on; the message says why."""


class NotDeterministicError(Exception):
    """torch has no deterministic CUDA kernel for an operation of the workload."""


@dataclass(frozen=True, slots=True)
class StepResult:
    name: str
    passed: bool
    detail: str

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'} {self.name}: {self.detail}"


# --- discovery -------------------------------------------------------------------------------


class NvmlProbe:
    """What the check asks NVML beyond the worker's seam: MIG mode and per-process memory."""

    def __init__(self, module: Any) -> None:
        self._nvml = module

    def mig_enabled(self, index: int) -> bool:
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except (nvml.NVMLError, AttributeError):
            # Boards without MIG answer "not supported"; so does an old binding.
            return False
        return bool(current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1))

    def process_memory(self, index: int) -> dict[int, int] | None:
        """Bytes used per process on GPU ``index``; None when NVML cannot tell."""
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            processes = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except (nvml.NVMLError, AttributeError):
            return None
        return {
            int(p.pid): int(p.usedGpuMemory)
            for p in processes
            if getattr(p, "usedGpuMemory", None) is not None
        }


@dataclass(frozen=True, slots=True)
class Discovery:
    gpus: list[GpuInfo]
    mig: frozenset[int]
    probe: NvmlProbe


def load_nvml_module() -> Any:
    try:
        import pynvml
    except ImportError as exc:
        raise NoGpuError("nvidia-ml-py is not installed") from exc
    return pynvml


def discover(module: Any, name_table: Mapping[str, str]) -> Discovery:
    """The node's GPUs as the worker's NVML provider reports them, plus their MIG mode."""
    try:
        provider = NvmlGpuProvider(PynvmlLibrary(module), dict(name_table))
        gpus = provider.discover()
    except GpuError as exc:
        raise NoGpuError(str(exc)) from exc
    if not gpus:
        raise NoGpuError("NVML reports no device")
    probe = NvmlProbe(module)
    mig = frozenset(g.index for g in gpus if probe.mig_enabled(g.index))
    return Discovery(gpus, mig, probe)


def type_source(device_name: str, name_table: Mapping[str, str]) -> str:
    """Where the type of ``device_name`` comes from: the admin's [gpu_names], the built-in
    table, or neither (a slug of the name, which no throughput prior knows)."""
    if any(re.search(pattern, device_name, re.IGNORECASE) for pattern in name_table):
        return "[gpu_names]"
    if any(re.search(pattern, device_name, re.IGNORECASE) for pattern, _ in DEFAULT_GPU_NAME_TABLE):
        return "built-in table"
    return "no table entry: a slug of the name; add it to [gpu_names]"


def describe_gpu(gpu: GpuInfo, mig: bool, name_table: Mapping[str, str]) -> str:
    health = "healthy" if gpu.healthy else f"UNHEALTHY: {gpu.problem}"
    where = type_source(gpu.device_name, name_table) if gpu.device_name else "-"
    return (
        f"  GPU {gpu.index}: {gpu.device_name or '?'} -> type {gpu.type} ({where}), "
        f"{gpu.memory_bytes / GIB:.1f} GiB, {gpu.uuid or 'no UUID'}, {health}"
        + (", MIG mode on (the worker schedules whole GPUs)" if mig else "")
    )


def choose_gpu(discovery: Discovery, visible: str | None) -> GpuInfo:
    """The GPU to check: the first ``CUDA_VISIBLE_DEVICES`` names, else the first healthy
    one not in MIG mode."""
    gpus = discovery.gpus
    if visible is not None:
        first = visible.split(",")[0].strip()
        if first.isdigit():
            # An index names a GPU in PCI bus order only with CUDA_DEVICE_ORDER=PCI_BUS_ID,
            # which this check sets for its children.
            matches = [g for g in gpus if g.index == int(first)]
        elif first.startswith("GPU-"):
            matches = [g for g in gpus if g.uuid and g.uuid.startswith(first)]
        elif first.startswith("MIG-"):
            raise CheckFailedError(
                f"CUDA_VISIBLE_DEVICES names a MIG instance ({first}); the worker schedules "
                "whole GPUs: name a GPU (index or GPU-UUID) or unset it"
            )
        else:
            raise NoGpuError(f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU")
        if not matches:
            raise CheckFailedError(f"CUDA_VISIBLE_DEVICES={visible!r} names no GPU NVML knows")
        gpu = matches[0]
        if not gpu.healthy:
            raise CheckFailedError(f"GPU {gpu.index} is unhealthy: {gpu.problem}")
        if gpu.index in discovery.mig:
            raise CheckFailedError(f"GPU {gpu.index} is in MIG mode")
        return gpu
    usable = [g for g in gpus if g.healthy and g.index not in discovery.mig]
    if not usable:
        raise CheckFailedError(
            "no healthy GPU outside MIG mode (the worker schedules whole GPUs; "
            "`nvidia-smi -i N -mig 0` turns MIG off)"
        )
    return usable[0]


def check_discovery(
    discovery: Discovery, visible: str | None, name_table: Mapping[str, str]
) -> tuple[StepResult, GpuInfo | None]:
    """The discovery step's verdict and the GPU the other steps use (None: no usable GPU)."""
    try:
        gpu = choose_gpu(discovery, visible)
    except CheckFailedError as exc:
        return StepResult("discovery", False, str(exc)), None
    problems = []
    if gpu.memory_bytes <= 0:
        problems.append("no memory size")
    if not gpu.uuid:
        problems.append("no UUID")
    if gpu.fake:
        problems.append("a fake GPU")
    detail = (
        f"{len(discovery.gpus)} GPU(s) through NVML; checking GPU {gpu.index}: "
        f"{gpu.device_name} = {gpu.type}, {gpu.memory_bytes / GIB:.1f} GiB, {gpu.uuid}"
    )
    if problems:
        return StepResult("discovery", False, f"{detail}; but {', '.join(problems)}"), None
    return StepResult("discovery", True, detail), gpu


def cuda_problem() -> str | None:
    """Why torch cannot use the GPU (None when it can); CUDA_VISIBLE_DEVICES must be final."""
    import torch

    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build"
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is false"
    return None


# --- training under the runtime helper -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrainRequest:
    """One lease of a built-in workload under the runtime helper."""

    workload: str
    iterations: int
    checkpoint_dir: str
    job_id: str
    budget: int = 0
    done: int = 0
    batch_size: int = 0
    accumulation_steps: int = 1
    deterministic: bool = True
    device: str = "cuda"
    # Start barrier for runs that must overlap: touch ``ready``, wait for ``go``.
    ready: str = ""
    go: str = ""


@dataclass(frozen=True, slots=True)
class TrainReport:
    resumed_from: int
    iterations_done: int
    exit_reason: str
    peak_bytes: int
    began: float
    ended: float
    pid: int
    device: str


def contract_env(request: TrainRequest) -> dict[str, str]:
    from worker.runtime import contract

    env = {
        contract.JOB_ID: request.job_id,
        contract.TOTAL_ITERATIONS: str(request.iterations),
        contract.ITERATIONS_DONE: str(request.done),
        contract.ITERATION_BUDGET: str(request.budget),
        contract.GLOBAL_BATCH_SIZE: str(request.batch_size),
        contract.ACCUMULATION_STEPS: str(request.accumulation_steps),
        contract.CHECKPOINT_DIR: request.checkpoint_dir,
        contract.SEED: str(SEED),
        contract.DETERMINISTIC: "1" if request.deterministic else "0",
        contract.DEVICE: request.device,
    }
    return env


def train_here(request: TrainRequest) -> TrainReport:
    """Runs one lease in this process, exactly as ``python -m worker.workloads`` would."""
    import torch

    from worker.runtime.settings import RuntimeSettings
    from worker.runtime.training import TrainingRun
    from worker.workloads.registry import get_workload
    from worker.workloads.runner import build, train_step

    workload = get_workload(request.workload)
    settings = RuntimeSettings.from_env(
        contract_env(request), default_batch_size=workload.default_batch_size
    )
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        model, optimizer = build(workload, settings.seed)
        run = TrainingRun(model, optimizer, settings, handle_signals=False)
        resumed_from = run.iterations_done
        if request.ready:
            Path(request.ready).touch()
            _wait_for(Path(request.go), CHILD_TIMEOUT_S)
        began = time.time()
        try:
            for step in run.steps():
                train_step(workload, run, step)
        except RuntimeError as exc:
            if "deterministic" in str(exc):
                raise NotDeterministicError(str(exc).splitlines()[0]) from exc
            raise
        if run.device.type == "cuda":
            torch.cuda.synchronize(run.device)
        peak = torch.cuda.max_memory_allocated(run.device) if run.device.type == "cuda" else 0
        name = torch.cuda.get_device_name(run.device) if run.device.type == "cuda" else "cpu"
        return TrainReport(
            resumed_from=resumed_from,
            iterations_done=run.iterations_done,
            exit_reason=run.exit_reason or "",
            peak_bytes=int(peak),
            began=began,
            ended=time.time(),
            pid=os.getpid(),
            device=name,
        )
    finally:
        torch.use_deterministic_algorithms(was_deterministic)


def _wait_for(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout:.0f} s")
        time.sleep(0.05)


Launch = Callable[[TrainRequest], TrainReport]


def final_parameters(request: TrainRequest) -> dict[str, torch.Tensor]:
    from worker.runtime.checkpoint import CheckpointStore, job_directory

    latest = CheckpointStore(
        job_directory(Path(request.checkpoint_dir), request.job_id)
    ).load_latest()
    if latest is None:
        raise CheckFailedError(f"no checkpoint of {request.job_id} in {request.checkpoint_dir}")
    model: dict[str, torch.Tensor] = latest.state["model"]
    return model


@dataclass(frozen=True, slots=True)
class Difference:
    identical: bool
    max_abs: float
    differing: int
    tensors: int


def compare(left: Mapping[str, torch.Tensor], right: Mapping[str, torch.Tensor]) -> Difference:
    """How far apart two state dicts are (bitwise, and the largest absolute difference)."""
    if left.keys() != right.keys():
        raise CheckFailedError(f"different parameters: {sorted(set(left) ^ set(right))}")
    differing = 0
    max_abs = 0.0
    for name, tensor in left.items():
        other = right[name]
        if not _bitwise_equal(tensor, other):
            differing += 1
            gap = (tensor.double() - other.double()).abs().max().item()
            max_abs = max(max_abs, gap if not math.isnan(gap) else math.inf)
    return Difference(differing == 0, max_abs, differing, len(left))


def _bitwise_equal(left: torch.Tensor, right: torch.Tensor) -> bool:
    import torch

    if left.shape != right.shape or left.dtype != right.dtype:
        return False
    if left.is_floating_point():
        # NaN == NaN bitwise; torch.equal would call them different.
        width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[left.element_size()]
        return torch.equal(left.contiguous().view(width), right.contiguous().view(width))
    return torch.equal(left, right)


def check_resume(
    name: str, iterations: int, root: Path, launch: Launch, device: str = "cuda"
) -> StepResult:
    """``name`` trained uninterrupted vs stopped half-way, checkpointed and resumed."""
    split = iterations // 2
    step = f"resume {name}"

    def request(job: str, deterministic: bool, budget: int = 0, done: int = 0) -> TrainRequest:
        return TrainRequest(
            workload=name,
            iterations=iterations,
            checkpoint_dir=str(root / ("det" if deterministic else "nondet")),
            job_id=f"{name}-{job}",
            budget=budget,
            done=done,
            deterministic=deterministic,
            device=device,
        )

    def resumed_run(deterministic: bool) -> tuple[TrainRequest, TrainReport, TrainReport]:
        first = launch(request("resumed", deterministic, budget=split))
        second_request = request("resumed", deterministic, done=split)
        return second_request, first, launch(second_request)

    began = time.monotonic()
    try:
        whole = request("uninterrupted", True)
        launch(whole)
        resumed, first, second = resumed_run(True)
        difference = compare(final_parameters(whole), final_parameters(resumed))
        why = ""
        tolerance = 0.0
    except NotDeterministicError as exc:
        why = f"no deterministic CUDA kernel ({exc})"
        whole = request("uninterrupted", False)
        again = request("uninterrupted-again", False)
        launch(whole)
        launch(again)
        resumed, first, second = resumed_run(False)
        noise = compare(final_parameters(whole), final_parameters(again)).max_abs
        tolerance = 2 * noise
        difference = compare(final_parameters(whole), final_parameters(resumed))
    seconds = time.monotonic() - began
    leases = (
        f"lease 1 {first.exit_reason} at {first.iterations_done}, lease 2 resumed from "
        f"{second.resumed_from} and {second.exit_reason} at {second.iterations_done}"
    )
    if (first.iterations_done, second.resumed_from, second.iterations_done) != (
        split,
        split,
        iterations,
    ) or second.exit_reason != "completed":
        return StepResult(step, False, f"leases did not split as asked: {leases}")
    figures = (
        f"{iterations} iterations on {second.device}; {leases}; "
        f"{difference.differing}/{difference.tensors} tensors differ, "
        f"max |diff| {difference.max_abs:.3g} ({seconds:.1f} s)"
    )
    if not why:
        return StepResult(step, difference.identical, f"bit-identical required: {figures}")
    return StepResult(
        step,
        difference.max_abs <= tolerance,
        f"{why}; tolerance 2 x run-to-run difference = {tolerance:.3g}: {figures}",
    )


# --- sharing -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SharedSpec:
    """One of the two jobs that share the GPU."""

    workload: str
    batch_size: int
    accumulation_steps: int


# Batches large enough that activations, which accumulation divides, and not the fixed CUDA
# workspaces dominate the footprint, as for the jobs a lab shares GPUs for.
RESIDENT = SharedSpec("transformer", 1024, 2)
SHARER = SharedSpec("resnet", 1024, 4)


@dataclass(frozen=True, slots=True)
class SharedJob:
    workload: str
    batch_size: int
    accumulation_steps: int
    need_bytes: int  # peak alone, whole batch: what its user declares as gpu_memory
    predicted_bytes: int  # the policy's footprint at its accumulation steps
    measured_bytes: int  # peak while sharing
    nvml_bytes: int | None = None  # NVML's figure while sharing (with the CUDA context)


def predicted_footprints(
    resident: SharedSpec, sharer: SharedSpec, needs: tuple[int, int], gpu_memory: int
) -> tuple[int, int, int | None]:
    """The ``sjf-bsbf`` policy's footprints of the resident and the sharer at their
    accumulation steps, given each one's need (peak alone, whole batch), and the
    accumulation it would itself give the sharer beside the resident on this GPU."""
    from master.scheduling.plan import Allocation, GpuSlot
    from master.scheduling.policies.sjf_bsbf import SjfBsbfPolicy
    from master.scheduling.views import JobView

    policy = SjfBsbfPolicy()
    slot = GpuSlot("gpu-check", 0)
    resident_view = JobView(
        id=1,
        job_type=resident.workload,
        num_gpus=1,
        total_iterations=1,
        batch_size=resident.batch_size,
        shareable=True,
        memory_bytes_per_gpu=needs[0],
        current=Allocation(
            copies=((slot,),),
            batch_shares=(resident.batch_size,),
            accumulation_steps=resident.accumulation_steps,
        ),
    )
    sharer_view = JobView(
        id=2,
        job_type=sharer.workload,
        num_gpus=1,
        total_iterations=1,
        batch_size=sharer.batch_size,
        shareable=True,
        memory_bytes_per_gpu=needs[1],
    )
    return (
        policy.footprint(resident_view, resident.accumulation_steps),
        policy.footprint(sharer_view, sharer.accumulation_steps),
        policy.accumulation_for(sharer_view, resident_view, gpu_memory),
    )


def judge_sharing(jobs: Sequence[SharedJob], overlap_s: float, gpu_memory: int) -> StepResult:
    over = [
        job for job in jobs if job.measured_bytes > job.predicted_bytes * (1 + MEMORY_TOLERANCE)
    ]
    parts = []
    for job in jobs:
        need, k = job.need_bytes, job.accumulation_steps
        state = ""
        if k > 1 and need > 0:
            # need = state + activations; at k steps: state + activations / k.
            activations = (need - job.measured_bytes) * k / (k - 1)
            state = f", state fraction {(need - activations) / need:.2f} (model assumes 0.35)"
        nvml = f", NVML {job.nvml_bytes / MIB:.0f} MiB" if job.nvml_bytes is not None else ""
        parts.append(
            f"{job.workload} batch {job.batch_size} k={k}: alone {need / MIB:.0f} MiB, "
            f"predicted {job.predicted_bytes / MIB:.0f} MiB, measured "
            f"{job.measured_bytes / MIB:.0f} MiB{nvml}{state}"
        )
    total = sum(job.nvml_bytes or job.measured_bytes for job in jobs)
    figures = (
        f"{'; '.join(parts)}; together {total / MIB:.0f} MiB of {gpu_memory / MIB:.0f} MiB, "
        f"overlapping {overlap_s:.1f} s (tolerance {MEMORY_TOLERANCE:.0%})"
    )
    problems = []
    if over:
        problems.append(f"above the prediction: {', '.join(j.workload for j in over)}")
    if overlap_s <= 0:
        problems.append("the jobs did not run at the same time")
    if total > gpu_memory:
        problems.append("more than the GPU's memory")
    if problems:
        return StepResult("sharing", False, f"{'; '.join(problems)}: {figures}")
    return StepResult("sharing", True, figures)


def check_sharing(gpu: GpuInfo, root: Path, probe: NvmlProbe, env: Mapping[str, str]) -> StepResult:
    """Each job alone (its need), then both at once with accumulation, against the policy."""
    root.mkdir(parents=True, exist_ok=True)

    def request(
        spec: SharedSpec, job: str, steps: int, ready: str = "", go: str = ""
    ) -> TrainRequest:
        return TrainRequest(
            workload=spec.workload,
            iterations=SHARE_ITERATIONS,
            checkpoint_dir=str(root),
            job_id=f"{spec.workload}-{job}",
            batch_size=spec.batch_size,
            accumulation_steps=steps,
            deterministic=False,
            ready=ready,
            go=go,
        )

    needs = (
        run_child(request(RESIDENT, "alone", 1), env).peak_bytes,
        run_child(request(SHARER, "alone", 1), env).peak_bytes,
    )
    predicted_resident, predicted_sharer, chosen = predicted_footprints(
        RESIDENT, SHARER, needs, gpu.memory_bytes
    )
    go = root / "go"
    requests = [
        request(spec, "shared", spec.accumulation_steps, ready=str(root / f"ready-{i}"), go=str(go))
        for i, spec in enumerate((RESIDENT, SHARER))
    ]
    children = [start_child(r, env) for r in requests]
    peaks: dict[int, int] = {}
    try:
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        # Both hold their CUDA context and model before either trains, so they overlap.
        while not all(Path(r.ready).exists() for r in requests):
            if any(c.poll() is not None for c in children) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        go.touch()
        while any(c.poll() is None for c in children) and time.monotonic() < deadline:
            for pid, used in (probe.process_memory(gpu.index) or {}).items():
                peaks[pid] = max(peaks.get(pid, 0), used)
            time.sleep(0.1)
        resident, sharer = (finish_child(c) for c in children)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    overlap = min(resident.ended, sharer.ended) - max(resident.began, sharer.began)
    jobs = [
        SharedJob(
            spec.workload,
            spec.batch_size,
            spec.accumulation_steps,
            need,
            predicted,
            report.peak_bytes,
            peaks.get(report.pid),
        )
        for spec, need, predicted, report in (
            (RESIDENT, needs[0], predicted_resident, resident),
            (SHARER, needs[1], predicted_sharer, sharer),
        )
    ]
    result = judge_sharing(jobs, overlap, gpu.memory_bytes)
    fit = f"the policy would share at k={chosen}" if chosen else "the policy would not share"
    return StepResult(result.name, result.passed, f"{result.detail}; on this GPU {fit}")


# --- throughput -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProfileRow:
    """One ProfileEntry of ``hadar-worker profile``: a row of the master's throughput table."""

    workload: str
    job_type: str
    gpu_type: str
    num_gpus: int
    iterations_per_s: float


def profile_rows(gpu: GpuInfo, iterations: int) -> list[ProfileRow]:
    """What ``hadar-worker profile`` measures on ``gpu``, through the same function."""
    from worker.agent.profiling import measure_node

    return [
        ProfileRow(e.workload, e.job_type, e.gpu_type, e.num_gpus, e.iterations_per_s)
        for e in measure_node([gpu], None, iterations)
    ]


def judge_throughput(rows: Sequence[ProfileRow], gpu_type: str) -> StepResult:
    """Every built-in workload measured on ``gpu_type`` at a positive, finite rate."""
    from worker.workloads.registry import WORKLOADS

    missing = sorted(set(WORKLOADS) - {row.workload for row in rows})
    bad = [
        row.workload
        for row in rows
        if not (math.isfinite(row.iterations_per_s) and row.iterations_per_s > 0)
        or row.gpu_type != gpu_type
    ]
    print("  rows for the master's throughput table (job type | GPU type | GPUs | it/s):")
    for row in sorted(rows, key=lambda r: r.workload):
        print(
            f"  | {row.job_type} | {row.gpu_type} | {row.num_gpus} | {row.iterations_per_s:.1f} |"
        )
    figures = ", ".join(f"{r.workload} {r.iterations_per_s:.1f} it/s" for r in rows)
    if missing or bad:
        return StepResult(
            "throughput",
            False,
            f"missing {missing}, bad {bad}: {figures or 'nothing measured'}",
        )
    return StepResult("throughput", True, f"on {gpu_type}: {figures}")


# --- local cluster --------------------------------------------------------------------------


def check_cluster(gpu: GpuInfo, root: Path, probe: NvmlProbe) -> StepResult:
    """A one-worker local cluster on the real GPUs runs a built-in job to completion."""
    from clients.localcluster import LocalCluster, WorkerGroup
    from clients.types import JobSpec, JobState, Program

    cluster = LocalCluster(root / "cluster")
    began = time.monotonic()
    seen: dict[int, int] = {}
    # An empty GPU spec: the worker discovers this machine's GPUs through NVML.
    cluster.up([WorkerGroup(node="gpu-check", gpus="")], policy="fifo", round_seconds=2.0)
    try:
        with cluster.client() as client:
            offered = [g for n in client.list_nodes() for g in n.gpus]
            if not any(not g.fake and g.uuid == gpu.uuid for g in offered):
                described = ", ".join(f"{g.type} {g.uuid} fake={g.fake}" for g in offered)
                return StepResult(
                    "cluster", False, f"the worker does not offer {gpu.uuid}: {described}"
                )
            job = client.submit_job(
                JobSpec(
                    name="gpu-check",
                    program=Program.builtin(CLUSTER_WORKLOAD),
                    iterations=CLUSTER_ITERATIONS,
                    allowed_gpu_types=(gpu.type,),
                )
            )
            deadline = time.monotonic() + CHILD_TIMEOUT_S
            while not job.state.terminal and time.monotonic() < deadline:
                for pid, used in (probe.process_memory(gpu.index) or {}).items():
                    seen[pid] = max(seen.get(pid, 0), used)
                time.sleep(0.2)
                job = client.get_job(job.id)
            events = client.describe_job(job.id).events
    finally:
        cluster.down()
    rate = ", ".join(
        f"{t.gpu_type} {t.iterations_per_s:.1f} it/s ({t.source})" for t in job.throughputs
    )
    placed = ", ".join(f"{t.node} GPU {list(t.gpu_indices)} {t.gpu_type}" for t in job.tasks)
    on_gpu = (
        f"NVML saw {max(seen.values()) / MIB:.0f} MiB in use by a process"
        if seen
        else "NVML listed no process"
    )
    detail = (
        f"job {job.id} ({CLUSTER_WORKLOAD}, {CLUSTER_ITERATIONS} iterations) "
        f"{job.state.value} with {job.iterations_done} done on {placed or gpu.type}; "
        f"{on_gpu}; throughput {rate or 'none reported'}; "
        f"{time.monotonic() - began:.0f} s with start-up"
    )
    if job.state is not JobState.COMPLETED:
        last = events[-1].reason if events else job.reason
        return StepResult("cluster", False, f"{detail}; last event: {last or '-'}")
    return StepResult("cluster", True, detail)


# --- child processes -------------------------------------------------------------------------


def child_environment(visible: str | None) -> dict[str, str]:
    """This process's environment for a child, minus what would steer it off the GPU: the
    job contract's variables (HADAR_DEVICE=cpu, a fake GPU's pace) and the worker's settings
    (fake GPUs). ``visible`` None leaves every GPU visible, numbered as NVML does."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HADAR_")}
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _spawn(what: str, payload: object, env: Mapping[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), f"--child-{what}", json.dumps(payload)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env),
    )


def _answer(child: subprocess.Popen[str]) -> Any:
    try:
        out, err = child.communicate(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        raise CheckFailedError(f"child gave no answer within {CHILD_TIMEOUT_S:.0f} s") from None
    lines = err.strip().splitlines()
    if child.returncode == EXIT_NOT_DETERMINISTIC:
        raise NotDeterministicError(lines[-1] if lines else "?")
    if child.returncode != 0 or not out.strip():
        tail = "\n".join(lines[-15:])
        raise CheckFailedError(f"child exited {child.returncode}:\n{tail}")
    return json.loads(out.strip().splitlines()[-1])


def start_child(request: TrainRequest, env: Mapping[str, str]) -> subprocess.Popen[str]:
    return _spawn("train", asdict(request), env)


def finish_child(child: subprocess.Popen[str]) -> TrainReport:
    return TrainReport(**_answer(child))


def run_child(request: TrainRequest, env: Mapping[str, str]) -> TrainReport:
    return finish_child(start_child(request, env))


def profile_in_child(gpu: GpuInfo, iterations: int) -> list[ProfileRow]:
    # Every GPU visible, in NVML's order: the profiler addresses cuda:<NVML index>, as it
    # does under `hadar-worker profile`.
    child = _spawn(
        "profile", {"gpu": asdict(gpu), "iterations": iterations}, child_environment(None)
    )
    return [ProfileRow(**row) for row in _answer(child)]


def child_train(payload: str) -> int:
    try:
        report = train_here(TrainRequest(**json.loads(payload)))
    except NotDeterministicError as exc:
        print(exc, file=sys.stderr)
        return EXIT_NOT_DETERMINISTIC
    print(json.dumps(asdict(report)))
    return 0


def child_profile(payload: str) -> int:
    raw = json.loads(payload)
    rows = profile_rows(GpuInfo(**raw["gpu"]), int(raw["iterations"]))
    print(json.dumps([asdict(row) for row in rows]))
    return 0


# --- the whole check -------------------------------------------------------------------------


@dataclass
class Outcome:
    results: list[StepResult] = field(default_factory=list)

    def add(self, result: StepResult) -> None:
        self.results.append(result)
        print(result.line(), flush=True)

    @property
    def failed(self) -> list[str]:
        return [r.name for r in self.results if not r.passed]

    def summary(self) -> str:
        failed = self.failed
        passed = len(self.results) - len(failed)
        tail = f"; failed: {', '.join(failed)}" if failed else ""
        return f"gpu-check: {passed} of {len(self.results)} steps passed{tail}"


def guarded(name: str, work: Callable[[], StepResult]) -> StepResult:
    """A step that raises fails with its error instead of ending the check."""
    try:
        return work()
    except Exception as exc:
        return StepResult(name, False, f"{type(exc).__name__}: {exc}")


def worker_name_table() -> tuple[dict[str, str], str]:
    """The worker config's [gpu_names] (HADAR_WORKER_CONFIG), and a note when the settings
    ask for fake GPUs, which this check ignores."""
    from worker.settings import load_settings

    settings = load_settings({}, require_master=False)
    note = ""
    if settings.fake_gpus:
        note = f"ignoring fake_gpus={settings.fake_gpus!r}: this check uses the real GPUs"
    return dict(settings.gpu_names), note


def prepare(
    nvml_module: Any | None, environ: Mapping[str, str]
) -> tuple[Discovery, StepResult, GpuInfo | None, list[str]]:
    """Discovery up to the choice of GPU; raises NoGpuError when there is nothing to check.

    Returns the printed lines rather than printing them, so that a machine without a
    usable GPU prints nothing but the one line."""
    name_table, note = worker_name_table()
    module = nvml_module if nvml_module is not None else load_nvml_module()
    discovery = discover(module, name_table)
    result, gpu = check_discovery(discovery, environ.get("CUDA_VISIBLE_DEVICES"), name_table)
    lines = [f"gpu-check: {note}"] if note else []
    lines += [describe_gpu(g, g.index in discovery.mig, name_table) for g in discovery.gpus]
    return discovery, result, gpu, lines


def run_check(args: argparse.Namespace) -> int:
    try:
        discovery, discovered, gpu, lines = prepare(None, os.environ)
        if gpu is not None:
            # Before torch touches CUDA, here and in every child: only the checked GPU.
            os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
            os.environ["CUDA_VISIBLE_DEVICES"] = gpu.uuid
            problem = cuda_problem()
            if problem is not None:
                raise NoGpuError(problem)
    except NoGpuError as exc:
        print(NO_GPU_LINE.format(reason=exc))
        return 0
    print("\n".join(lines))
    outcome = Outcome()
    outcome.add(discovered)
    if gpu is None:
        print(outcome.summary())
        return 1
    checked = gpu
    env = child_environment(checked.uuid)
    root = Path(tempfile.mkdtemp(prefix="hadar-gpu-check-"))
    print(f"gpu-check: working in {root}", flush=True)

    def launch(request: TrainRequest) -> TrainReport:
        return run_child(request, env)

    def resume(name: str) -> StepResult:
        return check_resume(name, args.iterations, root / "resume", launch)

    steps = set(args.steps)
    if args.skip_cluster:
        steps.discard("cluster")
    if "resume" in steps:
        for name in workloads():
            outcome.add(guarded(f"resume {name}", partial(resume, name)))
    if "sharing" in steps:
        outcome.add(
            guarded(
                "sharing", lambda: check_sharing(checked, root / "sharing", discovery.probe, env)
            )
        )
    if "throughput" in steps:
        outcome.add(
            guarded(
                "throughput",
                lambda: judge_throughput(
                    profile_in_child(checked, args.profile_iterations), checked.type
                ),
            )
        )
    if "cluster" in steps:
        outcome.add(guarded("cluster", lambda: check_cluster(checked, root, discovery.probe)))
    print(outcome.summary())
    if outcome.failed:
        print(f"gpu-check: checkpoints and logs kept in {root}")
        return 1
    shutil.rmtree(root, ignore_errors=True)
    return 0


def workloads() -> list[str]:
    from worker.workloads.registry import WORKLOADS

    return sorted(WORKLOADS)


STEPS = ("resume", "sharing", "throughput", "cluster")


def _steps(text: str) -> list[str]:
    chosen = [s.strip() for s in text.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(STEPS))
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"unknown step(s) {', '.join(unknown) or '(none given)'}; choose from {','.join(STEPS)}"
        )
    return chosen


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench/gpu_check.py", description="Hadar's GPU path on a real NVIDIA GPU."
    )
    parser.add_argument(
        "--iterations", type=int, default=300, help="iterations per resume check (default 300)"
    )
    parser.add_argument(
        "--profile-iterations",
        type=int,
        default=PROFILE_ITERATIONS,
        help=f"timed iterations per workload in the throughput step (default {PROFILE_ITERATIONS})",
    )
    parser.add_argument(
        "--skip-cluster", action="store_true", help="leave out the local-cluster step"
    )
    parser.add_argument(
        "--steps",
        type=_steps,
        default=list(STEPS),
        metavar="STEP,...",
        help=f"the steps after discovery to run (default all: {','.join(STEPS)})",
    )
    parser.add_argument("--child-train", metavar="JSON", help=argparse.SUPPRESS)
    parser.add_argument("--child-profile", metavar="JSON", help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.child_train:
        return child_train(args.child_train)
    if args.child_profile:
        return child_profile(args.child_profile)
    return run_check(args)


if __name__ == "__main__":
    sys.exit(main())
