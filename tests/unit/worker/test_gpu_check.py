"""``make gpu-check`` (bench/gpu_check.py) on a machine without a GPU: its one line, and its
steps' logic against the fake NVML module and, where no CUDA is needed, on the CPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import gpu_check
from tests.unit.worker.test_gpus import FakePynvml, _NotSupportedError, _NvmlError
from worker.gpus import GIB

ROOT = Path(__file__).resolve().parents[3]


class _Process:
    def __init__(self, pid: int, used: int | None) -> None:
        self.pid = pid
        self.usedGpuMemory = used


class CheckNvml(FakePynvml):
    """The fake pynvml of the discovery tests plus MIG mode and per-process memory."""

    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self, mig: frozenset[int] = frozenset()) -> None:
        super().__init__()
        self.mig = mig

    def nvmlDeviceGetMigMode(self, handle: int) -> tuple[int, int]:
        if handle == 0:
            raise _NotSupportedError("no MIG on this board")
        return (1 if handle in self.mig else 0), 0

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[_Process]:
        if handle == 2:
            raise _NvmlError("not permitted")
        return [_Process(100, 300 * 1024**2), _Process(101, None)]


def test_without_a_gpu_it_prints_one_line_and_exits_zero() -> None:
    """This machine has no NVIDIA GPU: the check says so in one line and succeeds."""
    done = subprocess.run(
        [sys.executable, "bench/gpu_check.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    assert lines[0].startswith("gpu-check: no NVIDIA GPU found (")
    assert lines[0].endswith("); nothing to check")


def test_no_device_and_no_nvml_are_reasons_to_stop() -> None:
    """An NVML with no device, or one that fails to start, means nothing to check."""

    class NoDevices(CheckNvml):
        def nvmlDeviceGetCount(self) -> int:
            return 0

    class Broken(CheckNvml):
        def nvmlInit(self) -> None:
            raise _NvmlError("Driver Not Loaded")

    with pytest.raises(gpu_check.NoGpuError, match="no device"):
        gpu_check.discover(NoDevices(), {})
    with pytest.raises(gpu_check.NoGpuError, match="Driver Not Loaded"):
        gpu_check.discover(Broken(), {})


def test_discovery_prints_each_gpu_with_its_type_and_checks_a_healthy_one() -> None:
    """GPUs, types (from the admin's table or the built-in one), UUIDs and health as the
    worker sees them; the first healthy GPU outside MIG mode is the one checked."""
    discovery = gpu_check.discover(CheckNvml(), {"A100-SXM4-40GB": "a100-lab"})
    assert [(g.index, g.type) for g in discovery.gpus] == [
        (0, "v100"),
        (1, "a100-lab"),
        (2, "a100-lab"),
        (3, "unknown"),
    ]
    assert discovery.mig == frozenset()
    line = gpu_check.describe_gpu(discovery.gpus[0], False, {})
    assert "Tesla V100-SXM2-16GB -> type v100 (built-in table)" in line
    assert "16.0 GiB, GPU-0, healthy" in line
    admin = gpu_check.describe_gpu(discovery.gpus[1], False, {"A100-SXM4-40GB": "a100-lab"})
    assert "-> type a100-lab ([gpu_names])" in admin
    assert "UNHEALTHY: retired memory pages pending" in admin
    assert "slug" in gpu_check.type_source("NVIDIA Foo 9000", {})

    result, gpu = gpu_check.check_discovery(discovery, None, {})
    assert result.passed and gpu is not None
    assert gpu.index == 0
    assert result.line().startswith("PASS discovery: 4 GPU(s) through NVML; checking GPU 0")


def test_mig_mode_and_cuda_visible_devices_choose_or_refuse_a_gpu() -> None:
    """A GPU in MIG mode is skipped (the worker schedules whole GPUs); CUDA_VISIBLE_DEVICES
    picks the GPU by index or UUID, and one that hides every GPU leaves nothing to check."""
    discovery = gpu_check.discover(CheckNvml(mig=frozenset({1})), {})
    assert discovery.mig == frozenset({1})
    assert "MIG mode on" in gpu_check.describe_gpu(discovery.gpus[1], True, {})
    assert gpu_check.choose_gpu(discovery, "GPU-0").index == 0
    assert gpu_check.choose_gpu(discovery, "0,1").index == 0
    with pytest.raises(gpu_check.CheckFailedError, match="unhealthy"):
        gpu_check.choose_gpu(discovery, "2")
    with pytest.raises(gpu_check.CheckFailedError, match="MIG instance"):
        gpu_check.choose_gpu(discovery, "MIG-1234")
    with pytest.raises(gpu_check.NoGpuError, match="hides every GPU"):
        gpu_check.choose_gpu(discovery, "")

    class OnlyMig(CheckNvml):
        def nvmlDeviceGetName(self, handle: int) -> bytes:
            return b"NVIDIA H100 80GB HBM3"

        def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int:
            return 0

        def nvmlDeviceGetTotalEccErrors(self, handle: int, kind: int, counter: int) -> int:
            return 0

        def nvmlDeviceGetCount(self) -> int:
            return 2

    only_mig = gpu_check.discover(OnlyMig(mig=frozenset({1})), {})
    assert [g.type for g in only_mig.gpus] == ["h100-80gb", "h100-80gb"]
    result, gpu = gpu_check.check_discovery(
        gpu_check.Discovery(only_mig.gpus[1:], only_mig.mig, only_mig.probe), None, {}
    )
    assert not result.passed and gpu is None
    assert "MIG" in result.line() and result.line().startswith("FAIL discovery")


def test_probe_reads_per_process_memory_where_nvml_can_tell() -> None:
    """Per-process memory by pid; a process NVML cannot measure is left out, and a GPU
    whose process list is refused answers None."""
    probe = gpu_check.NvmlProbe(CheckNvml())
    assert probe.process_memory(0) == {100: 300 * 1024**2}
    assert probe.process_memory(2) is None
    assert probe.mig_enabled(0) is False


def test_fake_gpu_settings_are_ignored_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """HADAR_WORKER_FAKE_GPUS does not make the check use fake GPUs: discovery stays NVML's,
    a note says so, and children lose the contract's and the worker's variables."""
    monkeypatch.setenv("HADAR_WORKER_FAKE_GPUS", "v100:2")
    monkeypatch.setenv("HADAR_DEVICE", "cpu")
    monkeypatch.delenv("HADAR_WORKER_CONFIG", raising=False)
    _, result, gpu, lines = gpu_check.prepare(CheckNvml(), {})
    assert result.passed and gpu is not None and not gpu.fake
    assert lines[0] == "gpu-check: ignoring fake_gpus='v100:2': this check uses the real GPUs"
    env = gpu_check.child_environment(gpu.uuid)
    assert not any(name.startswith("HADAR_") for name in env)
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-0"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert "CUDA_VISIBLE_DEVICES" not in gpu_check.child_environment(None)


def test_resume_check_passes_for_a_bit_identical_resume_on_the_cpu(tmp_path: Path) -> None:
    """The resume step's whole logic on the CPU: uninterrupted vs two leases with a
    checkpoint between, compared bit for bit."""
    result = gpu_check.check_resume(
        "recommendation", 6, tmp_path, gpu_check.train_here, device="cpu"
    )
    assert result.passed, result.line()
    assert "lease 1 lease_done at 3, lease 2 resumed from 3 and completed at 6" in result.detail
    assert "0/" in result.detail and "bit-identical required" in result.detail


def test_resume_check_fails_when_the_resumed_run_differs(tmp_path: Path) -> None:
    """A resume that does not reproduce the uninterrupted run (here: the second lease trains
    on a smaller batch) fails the step, naming how far apart they are."""
    from dataclasses import replace

    def diverging(request: gpu_check.TrainRequest) -> gpu_check.TrainReport:
        return gpu_check.train_here(replace(request, batch_size=32 if request.done else 64))

    result = gpu_check.check_resume("recommendation", 6, tmp_path, diverging, device="cpu")
    assert not result.passed, result.line()
    assert result.line().startswith("FAIL resume recommendation: bit-identical required")


def test_compare_tells_bitwise_equality_and_the_largest_gap() -> None:
    """NaNs in the same places are equal bitwise; a changed value is measured."""
    import torch

    left = {"a": torch.tensor([1.0, float("nan")]), "b": torch.tensor([1, 2])}
    same = {"a": torch.tensor([1.0, float("nan")]), "b": torch.tensor([1, 2])}
    other = {"a": torch.tensor([1.5, float("nan")]), "b": torch.tensor([1, 2])}
    assert gpu_check.compare(left, same).identical
    gap = gpu_check.compare(left, other)
    assert not gap.identical and gap.differing == 1 and gap.tensors == 2


def test_sharing_prediction_and_verdict() -> None:
    """The policy's footprints (state + activations / k) against measured peaks: within the
    tolerance passes, above it fails, and jobs that never overlapped fail."""
    need = 1000 * 1024**2
    resident, sharer, chosen = gpu_check.predicted_footprints(
        gpu_check.RESIDENT, gpu_check.SHARER, (need, need), 80 * GIB
    )
    assert resident == int(0.35 * need + 0.65 * need / gpu_check.RESIDENT.accumulation_steps)
    assert sharer == int(0.35 * need + 0.65 * need / gpu_check.SHARER.accumulation_steps)
    assert chosen == 1
    *_, tight = gpu_check.predicted_footprints(
        gpu_check.RESIDENT, gpu_check.SHARER, (need, need), resident + sharer
    )
    assert tight == gpu_check.SHARER.accumulation_steps

    def job(measured: int) -> gpu_check.SharedJob:
        return gpu_check.SharedJob("resnet", 1024, 4, need, sharer, measured, measured + 500)

    ok = gpu_check.judge_sharing([job(int(sharer * 0.6))], overlap_s=3.0, gpu_memory=80 * GIB)
    assert ok.passed, ok.line()
    assert "state fraction" in ok.detail and "predicted" in ok.detail
    over = gpu_check.judge_sharing([job(int(sharer * 1.2))], overlap_s=3.0, gpu_memory=80 * GIB)
    assert not over.passed and "above the prediction: resnet" in over.detail
    apart = gpu_check.judge_sharing([job(sharer)], overlap_s=-1.0, gpu_memory=80 * GIB)
    assert not apart.passed and "did not run at the same time" in apart.detail


def test_throughput_rows_and_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    """Every workload needs a positive rate on the checked type; the rows are printed as
    the master's throughput table would hold them."""
    from worker.workloads.registry import WORKLOADS

    rows = [
        gpu_check.ProfileRow(name, w.job_type(), "h100-80gb", 1, 100.0 + i)
        for i, (name, w) in enumerate(sorted(WORKLOADS.items()))
    ]
    result = gpu_check.judge_throughput(rows, "h100-80gb")
    assert result.passed, result.line()
    printed = capsys.readouterr().out
    assert "| Hadar ResNet-8 (batch size 32) | h100-80gb | 1 |" in printed
    missing = gpu_check.judge_throughput(rows[1:], "h100-80gb")
    assert not missing.passed and rows[0].workload in missing.detail


def test_profile_rows_come_from_the_worker_profiler_on_the_cpu() -> None:
    """The throughput step calls the worker's measure_node; a fake GPU (measured on the CPU
    and paced) exercises that path here."""
    from worker.gpus import FakeGpuProvider

    (gpu,) = FakeGpuProvider.from_spec("v100:1").discover()
    rows = gpu_check.profile_rows(gpu, 1)
    assert sorted(r.workload for r in rows) == gpu_check.workloads()
    assert all(r.gpu_type == "v100" and r.iterations_per_s > 0 for r in rows)


def test_a_failing_step_fails_without_ending_the_check() -> None:
    """An exception inside a step becomes that step's FAIL line."""

    def broken() -> gpu_check.StepResult:
        raise gpu_check.CheckFailedError("child exited 1")

    result = gpu_check.guarded("sharing", broken)
    assert result.line() == "FAIL sharing: CheckFailedError: child exited 1"
    outcome = gpu_check.Outcome()
    outcome.add(gpu_check.StepResult("discovery", True, "ok"))
    outcome.add(result)
    assert outcome.summary() == "gpu-check: 1 of 2 steps passed; failed: sharing"


def test_child_protocol_round_trips_a_training_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--child-train`` takes the request as JSON and answers one JSON report line, which
    the parent reads back (here in-process, on the CPU)."""
    import json
    from dataclasses import asdict

    request = gpu_check.TrainRequest(
        "recommendation", 2, str(tmp_path), "child", device="cpu", deterministic=False
    )
    assert gpu_check.main(["--child-train", json.dumps(asdict(request))]) == 0
    report = gpu_check.TrainReport(**json.loads(capsys.readouterr().out.splitlines()[-1]))
    assert (report.iterations_done, report.exit_reason, report.device) == (2, "completed", "cpu")
