"""GPU discovery: the NVML name table, fake GPU specs, and the NVML provider behind its seam."""

from __future__ import annotations

import pytest

from worker.gpus import (
    DEFAULT_FAKE_GPU_MODELS,
    GIB,
    FakeGpuProvider,
    GpuError,
    GpuInfo,
    NvmlGpuProvider,
    cuda_device,
    fake_reference_speed,
    gpu_type_for_name,
    make_gpu_provider,
    parse_fake_gpus,
    slug_for_name,
)


@pytest.mark.parametrize(
    ("device_name", "gpu_type"),
    [
        ("Tesla V100-SXM2-16GB", "v100"),
        ("Tesla V100-PCIE-32GB", "v100"),
        ("Tesla P100-PCIE-16GB", "p100"),
        ("Tesla K80", "k80"),
        ("Tesla T4", "t4"),
        ("Tesla P40", "p40"),
        ("Tesla P4", "p4"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb"),
        ("NVIDIA A10", "a10"),
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA A40", "a40"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA H100 80GB HBM3", "h100-80gb"),
        ("NVIDIA H100 PCIe", "h100-80gb"),
        ("NVIDIA H100 NVL", "h100-94gb"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA GeForce RTX 3090", "rtx3090"),
        ("NVIDIA GeForce RTX 3090 Ti", "rtx3090ti"),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
        ("GeForce RTX 2080 Ti", "rtx2080ti"),
        ("NVIDIA RTX A6000", "a6000"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx6000-ada"),
        ("Quadro RTX 8000", "rtx8000"),
        ("NVIDIA TITAN RTX", "titan-rtx"),
        ("NVIDIA TITAN V", "titan-v"),
        ("GeForce GTX 1080 Ti", "gtx1080ti"),
    ],
)
def test_known_device_names_map_to_their_type(device_name: str, gpu_type: str) -> None:
    """Every common NVML name maps to its normalized type; specific entries win."""
    assert gpu_type_for_name(device_name) == gpu_type


def test_unknown_names_get_a_slug_without_vendor_words() -> None:
    """A device no entry knows gets a stable slug rather than an error."""
    assert gpu_type_for_name("NVIDIA Foo 9000 Pro") == "foo-9000-pro"
    assert slug_for_name("Tesla   X/1") == "x-1"
    assert slug_for_name("NVIDIA") == "unknown"


def test_admin_entries_come_first_and_may_use_groups() -> None:
    """The config's [gpu_names] entries are tried before the built-in table."""
    extra = {"V100-SXM2-32GB": "v100-32gb", r"Blackwell (\w+)": r"bw-\1"}
    assert gpu_type_for_name("Tesla V100-SXM2-32GB", extra) == "v100-32gb"
    assert gpu_type_for_name("Tesla V100-SXM2-16GB", extra) == "v100"
    assert gpu_type_for_name("NVIDIA Blackwell B200", extra) == "bw-b200"


def test_parse_fake_gpus_counts_speeds_and_overrides() -> None:
    """TYPE:COUNT entries take the table's speed; @SPEED and the config override it."""
    groups = parse_fake_gpus("v100:2, k80:4,a6000:1@1.7,p100", speeds={"k80": 0.3})
    assert [(g.type, g.count, g.speed) for g in groups] == [
        ("v100", 2, 1.0),
        ("k80", 4, 0.3),
        ("a6000", 1, 1.7),
        ("p100", 1, DEFAULT_FAKE_GPU_MODELS["p100"].speed),
    ]
    assert groups[0].memory_bytes == 16 * GIB


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty"),
        ("v100:two", "bad fake GPU entry 'v100:two'"),
        ("v100:0", "count must be at least 1"),
        ("v100:1,v100:2", "listed twice"),
        ("v010:2", "no speed known for fake GPU type 'v010'"),
        ("v100:1@0", "speed must be positive"),
        ("v100;k80", "bad fake GPU entry"),
    ],
)
def test_bad_fake_specs_are_refused_with_the_entry(spec: str, message: str) -> None:
    """A malformed spec names what is wrong instead of guessing."""
    with pytest.raises(GpuError, match=message):
        parse_fake_gpus(spec)


def test_fake_provider_numbers_gpus_and_paces_them_against_the_fastest() -> None:
    """Indices follow the spec; each GPU's pace is its speed over the reference speed."""
    provider = FakeGpuProvider.from_spec("v100:2,k80:1", reference_speed=2.0)
    gpus = provider.discover()
    assert [(g.index, g.type, g.fake, g.healthy) for g in gpus] == [
        (0, "v100", True, True),
        (1, "v100", True, True),
        (2, "k80", True, True),
    ]
    assert [g.fake_pace for g in gpus] == [0.5, 0.5, 0.125]
    assert provider.utilization() == {}
    provider.mark_unhealthy(1, "test")
    assert [g.healthy for g in provider.discover()] == [True, False, True]


def test_reference_speed_defaults_to_the_fastest_in_the_table() -> None:
    """Without a configured reference, the fastest known speed runs unpaced."""
    fastest = max(m.speed for m in DEFAULT_FAKE_GPU_MODELS.values())
    assert fake_reference_speed() == fastest
    assert fake_reference_speed({"b200": 9.0}) == 9.0
    (gpu,) = FakeGpuProvider.from_spec("x:1@9").discover()
    assert gpu.fake_pace == 1.0
    with pytest.raises(GpuError, match="above the reference speed"):
        FakeGpuProvider.from_spec("a100:1", reference_speed=1.0)


class FakeNvml:
    """The NVML seam with scripted devices: name, uuid, memory, utilization, problem."""

    def __init__(self, devices: list[dict[str, object]], init_error: str = "") -> None:
        self.devices = devices
        self.init_error = init_error
        self.initialized = False

    def _device(self, index: int) -> dict[str, object]:
        device = self.devices[index]
        if device.get("lost"):
            raise GpuError("NVML: GPU is lost")
        return device

    def init(self) -> None:
        if self.init_error:
            raise GpuError(self.init_error)
        self.initialized = True

    def device_count(self) -> int:
        return len(self.devices)

    def name(self, index: int) -> str:
        return str(self._device(index)["name"])

    def uuid(self, index: int) -> str:
        return f"GPU-{index:04d}"

    def memory_total(self, index: int) -> int:
        memory = self._device(index)["memory"]
        assert isinstance(memory, int)
        return memory

    def utilization_percent(self, index: int) -> int:
        util = self._device(index)["util"]
        assert isinstance(util, int)
        return util

    def health_problem(self, index: int) -> str | None:
        if self.devices[index].get("lost"):
            return "device unreachable: GPU is lost"
        problem = self.devices[index].get("problem")
        return str(problem) if problem else None


def test_nvml_provider_reports_types_memory_health_and_utilization() -> None:
    """Through the NVML seam: types from names, memory, UUIDs, unhealthy and lost GPUs."""
    nvml = FakeNvml(
        [
            {"name": "Tesla V100-SXM2-16GB", "memory": 16 * GIB, "util": 40},
            {"name": "NVIDIA A100-SXM4-80GB", "memory": 80 * GIB, "util": 0, "problem": "ECC"},
            {"name": "Tesla K80", "memory": 12 * GIB, "util": 0, "lost": True},
        ]
    )
    provider = NvmlGpuProvider(nvml, {"A100-SXM4-80GB": "a100-big"})
    assert nvml.initialized
    gpus = provider.discover()
    assert [(g.index, g.type, g.memory_bytes, g.healthy) for g in gpus] == [
        (0, "v100", 16 * GIB, True),
        (1, "a100-big", 80 * GIB, False),
        (2, "unknown", 0, False),
    ]
    assert gpus[0].device_name == "Tesla V100-SXM2-16GB"
    assert gpus[0].uuid == "GPU-0000"
    assert not gpus[0].fake
    assert gpus[1].problem == "ECC"
    assert "lost" in gpus[2].problem
    assert provider.utilization() == {0: 0.4, 1: 0.0}


def test_no_nvml_and_no_fake_spec_is_a_clear_error() -> None:
    """Without NVML the error tells the admin about --fake-gpus."""
    with pytest.raises(GpuError, match="--fake-gpus"):
        make_gpu_provider(None, library=FakeNvml([], init_error="NVML: library not found"))
    fake = make_gpu_provider("k80:2")
    assert [g.type for g in fake.discover()] == ["k80", "k80"]


class _NvmlError(Exception):
    pass


class _NotSupportedError(_NvmlError):
    pass


class FakePynvml:
    """A stand-in for the pynvml module (only what PynvmlLibrary calls)."""

    NVMLError = _NvmlError
    NVMLError_NotSupported = _NotSupportedError
    NVML_FEATURE_ENABLED = 1
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0

    def __init__(self) -> None:
        self.pending = {0: 0, 1: 1, 2: 0}
        self.ecc = {0: 0, 1: 0, 2: 5}

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 4

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index == 3:
            raise _NvmlError("GPU is lost")
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"Tesla V100-SXM2-16GB" if handle == 0 else b"NVIDIA A100-SXM4-40GB"

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle}"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> object:
        return type("Memory", (), {"total": 16 * GIB})()

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> object:
        return type("Rates", (), {"gpu": 25})()

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int:
        return self.pending[handle]

    def nvmlDeviceGetTotalEccErrors(self, handle: int, kind: int, counter: int) -> int:
        if handle == 0:
            raise _NotSupportedError("no ECC on this board")
        return self.ecc[handle]


def test_pynvml_adapter_decodes_names_and_maps_errors_and_health() -> None:
    """The adapter over pynvml: bytes names decoded, NVML errors become GpuError, pending
    page retirement and uncorrected ECC errors make a GPU unhealthy, unsupported is fine."""
    from worker.gpus import PynvmlLibrary

    provider = NvmlGpuProvider(PynvmlLibrary(FakePynvml()))
    gpus = provider.discover()
    assert [(g.type, g.healthy) for g in gpus] == [
        ("v100", True),
        ("a100-40gb", False),
        ("a100-40gb", False),
        ("unknown", False),
    ]
    assert "retired memory pages pending" in gpus[1].problem
    assert "5 uncorrected ECC errors" in gpus[2].problem
    assert "unreachable" in gpus[3].problem
    assert provider.utilization() == {0: 0.25, 1: 0.25, 2: 0.25}
    with pytest.raises(GpuError, match="NVML name of GPU 3"):
        PynvmlLibrary(FakePynvml()).name(3)


def test_cuda_device_is_nvml_index_without_cuda_visible_devices() -> None:
    """With CUDA_VISIBLE_DEVICES unset, CUDA (in PCI bus order) numbers GPUs as NVML does."""
    gpu = GpuInfo(index=3, type="a100", memory_bytes=1, uuid="GPU-abcd")
    assert cuda_device(gpu, None) == "cuda:3"


def test_cuda_device_is_the_position_in_cuda_visible_devices() -> None:
    """CUDA renumbers the devices CUDA_VISIBLE_DEVICES names from 0, by index or UUID."""
    gpu = GpuInfo(index=3, type="a100", memory_bytes=1, uuid="GPU-abcd-1234")
    assert cuda_device(gpu, "2,3") == "cuda:1"
    assert cuda_device(gpu, "GPU-ffff,GPU-abcd") == "cuda:1"
    assert cuda_device(gpu, "GPU-abcd-1234") == "cuda:0"


def test_cuda_device_refuses_a_gpu_cuda_visible_devices_hides() -> None:
    """A GPU the variable leaves out, or names only after an entry CUDA stops at, is hidden."""
    gpu = GpuInfo(index=3, type="a100", memory_bytes=1, uuid="GPU-abcd")
    with pytest.raises(GpuError, match="hidden by CUDA_VISIBLE_DEVICES"):
        cuda_device(gpu, "0,1")
    with pytest.raises(GpuError, match="hidden"):
        cuda_device(gpu, "0,-1,3")
    with pytest.raises(GpuError, match="hidden"):
        cuda_device(gpu, "")
