"""The GPUs of this node: discovered through NVML, or faked on machines without one.

A :class:`GpuProvider` answers two questions: which GPUs the node has (:meth:`discover`) and
how busy they are now (:meth:`utilization`). :class:`NvmlGpuProvider` asks the NVIDIA driver
through an :class:`NvmlLibrary` seam (the real one wraps ``pynvml``); :class:`FakeGpuProvider`
serves a ``--fake-gpus v100:2,k80:4`` spec and carries a relative speed per type that the
agent hands to the job's processes (``HADAR_FAKE_GPU_SPEED``) so the runtime paces its steps
and heterogeneity is real on a laptop.

NVML names devices by marketing name (``Tesla V100-SXM2-16GB``); the scheduler needs a small
normalized type (``v100``). :func:`gpu_type_for_name` maps one to the other through an ordered
pattern table that an admin extends in the worker's config (``[gpu_names]``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol

GIB = 1024**3

_TYPE_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


class GpuError(RuntimeError):
    """GPUs could not be discovered or a GPU spec is malformed."""


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU of this node."""

    index: int
    type: str
    memory_bytes: int
    device_name: str = ""
    uuid: str = ""
    healthy: bool = True
    # Why it is unhealthy (NVML's answer); empty when healthy.
    problem: str = ""
    fake: bool = False
    # Relative speed of a fake GPU (1.0 = a V100); 0 for real GPUs, which need no pacing.
    fake_speed: float = 0.0
    # The fraction of this host's compute speed a fake GPU runs at, in (0, 1]: its speed over
    # the fastest speed in the table (the host stands in for the fastest GPU type, since
    # pacing can only slow steps down). Passed to jobs as HADAR_FAKE_GPU_SPEED.
    fake_pace: float = 0.0


def cuda_device(gpu: GpuInfo, visible: str | None) -> str:
    """The torch device for ``gpu`` in a process whose ``CUDA_VISIBLE_DEVICES`` is
    ``visible`` (None: unset). CUDA numbers only the devices that variable names, in its
    order, so NVML's index is CUDA's ordinal only when it is unset (and the order is
    PCI_BUS_ID). Raises GpuError when the variable hides the GPU."""
    if visible is None:
        return f"cuda:{gpu.index}"
    for ordinal, entry in enumerate(e.strip() for e in visible.split(",")):
        if entry.isdigit() and int(entry) == gpu.index:
            return f"cuda:{ordinal}"
        if entry.startswith("GPU-") and gpu.uuid and gpu.uuid.startswith(entry):
            return f"cuda:{ordinal}"
        if not entry.isdigit() and not entry.startswith("GPU-"):
            # CUDA stops at the first entry it cannot parse: later ones are hidden.
            break
    raise GpuError(
        f"GPU {gpu.index} ({gpu.uuid or gpu.device_name}) is hidden by "
        f"CUDA_VISIBLE_DEVICES={visible!r}"
    )


class GpuProvider(Protocol):
    """Where the agent learns about its GPUs."""

    def discover(self) -> list[GpuInfo]:
        """The node's GPUs with their current health, ordered by index."""
        ...

    def utilization(self) -> dict[int, float]:
        """Utilization in [0, 1] per GPU index (only GPUs that answered)."""
        ...


# --- GPU names -------------------------------------------------------------------------------

# Ordered (pattern, type): the first pattern found (case-insensitive regex search) in the NVML
# name wins, so specific entries (A100 80GB) come before general ones (A100).
DEFAULT_GPU_NAME_TABLE: tuple[tuple[str, str], ...] = (
    (r"h100.*(nvl|94\s?gb)", "h100-94gb"),
    (r"h100", "h100-80gb"),
    (r"gh200", "gh200"),
    (r"h200", "h200"),
    (r"a100.*80\s?gb", "a100-80gb"),
    (r"a100", "a100-40gb"),
    (r"a800.*80\s?gb", "a800-80gb"),
    (r"a30\b", "a30"),
    (r"a40\b", "a40"),
    (r"a10g\b", "a10g"),
    (r"a10\b", "a10"),
    (r"l40s\b", "l40s"),
    (r"l40\b", "l40"),
    (r"l4\b", "l4"),
    (r"rtx\s?a6000", "a6000"),
    (r"rtx\s?6000 ada", "rtx6000-ada"),
    (r"rtx\s?a5000", "a5000"),
    (r"rtx\s?a4000", "a4000"),
    (r"v100", "v100"),
    (r"p100", "p100"),
    (r"p40\b", "p40"),
    (r"p4\b", "p4"),
    (r"t4\b", "t4"),
    (r"k80\b", "k80"),
    (r"k40", "k40"),
    (r"titan\s?rtx", "titan-rtx"),
    (r"titan\s?v\b", "titan-v"),
    (r"titan\s?xp", "titan-xp"),
    (r"rtx\s?(\d{4})\s?ti", r"rtx\1ti"),
    (r"rtx\s?(\d{4})", r"rtx\1"),
    (r"gtx\s?(\d{3,4})\s?ti", r"gtx\1ti"),
    (r"gtx\s?(\d{3,4})", r"gtx\1"),
)

_VENDOR_WORDS = re.compile(r"\b(nvidia|tesla|geforce|quadro)\b", re.IGNORECASE)


def slug_for_name(device_name: str) -> str:
    """A type for a device no table entry knows: the name without vendor words, slugged.

    "NVIDIA Foo 9000 Pro" -> "foo-9000-pro".
    """
    stripped = _VENDOR_WORDS.sub(" ", device_name).lower()
    slug = re.sub(r"[^a-z0-9]+", "-", stripped).strip("-")
    return slug[:64] or "unknown"


def gpu_type_for_name(
    device_name: str, extra: Sequence[tuple[str, str]] | Mapping[str, str] = ()
) -> str:
    """The normalized GPU type for an NVML device name.

    ``extra`` entries (the admin's, from the worker config) are tried before the defaults;
    each is a (regex, type) pair where the type may use the regex's groups (``\\1``).
    An exact device name works as a pattern too. Unknown names get :func:`slug_for_name`.
    """
    entries = list(extra.items()) if isinstance(extra, Mapping) else list(extra)
    for pattern, gpu_type in (*entries, *DEFAULT_GPU_NAME_TABLE):
        match = re.search(pattern, device_name, re.IGNORECASE)
        if match:
            return match.expand(gpu_type).lower()
    return slug_for_name(device_name)


def validate_name_table(table: Mapping[str, str]) -> dict[str, str]:
    """Checks an admin's [gpu_names] table: each key compiles, each value is a valid type."""
    checked: dict[str, str] = {}
    for pattern, gpu_type in table.items():
        try:
            re.compile(pattern)
        except re.error as exc:
            raise GpuError(f"gpu_names: bad pattern {pattern!r}: {exc}") from exc
        if not isinstance(gpu_type, str) or not gpu_type:
            raise GpuError(f"gpu_names: pattern {pattern!r} needs a non-empty type")
        checked[pattern] = gpu_type
    return checked


# --- fake GPUs -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FakeGpuModel:
    """What a fake GPU of one type pretends to be."""

    speed: float
    memory_bytes: int


# Relative training speed (V100 = 1.0). K80 and P100: medians over the single-GPU models of
# Gavel's throughput tables (k80 0.245, p100 0.81). Newer types: ratios from public
# training benchmarks, rounded; an admin overrides any of them in [fake_gpu_speeds].
DEFAULT_FAKE_GPU_MODELS: dict[str, FakeGpuModel] = {
    "k80": FakeGpuModel(0.25, 12 * GIB),
    "p100": FakeGpuModel(0.8, 16 * GIB),
    "v100": FakeGpuModel(1.0, 16 * GIB),
    "t4": FakeGpuModel(0.45, 16 * GIB),
    "rtx2080ti": FakeGpuModel(0.9, 11 * GIB),
    "rtx3090": FakeGpuModel(1.3, 24 * GIB),
    "rtx4090": FakeGpuModel(2.0, 24 * GIB),
    "a6000": FakeGpuModel(1.5, 48 * GIB),
    "a40": FakeGpuModel(1.5, 48 * GIB),
    "a100": FakeGpuModel(2.0, 40 * GIB),
    "a100-40gb": FakeGpuModel(2.0, 40 * GIB),
    "a100-80gb": FakeGpuModel(2.2, 80 * GIB),
    "l40s": FakeGpuModel(2.2, 48 * GIB),
    "h100-80gb": FakeGpuModel(3.5, 80 * GIB),
}

_DEFAULT_FAKE_MEMORY = 16 * GIB


@dataclass(frozen=True, slots=True)
class FakeGpuGroup:
    """``count`` fake GPUs of one type, parsed from a spec entry."""

    type: str
    count: int
    speed: float
    memory_bytes: int


def parse_fake_gpus(spec: str, speeds: Mapping[str, float] | None = None) -> list[FakeGpuGroup]:
    """Parses ``v100:2,k80:4`` (optionally ``type:count@speed``) into groups.

    The speed comes from the entry's ``@speed``, else ``speeds`` (the config's
    [fake_gpu_speeds]), else :data:`DEFAULT_FAKE_GPU_MODELS`. A type with no known speed is
    an error, so a typo (``v010``) does not silently run at V100 speed.
    """
    overrides = dict(speeds or {})
    groups: list[FakeGpuGroup] = []
    seen: set[str] = set()
    if not spec.strip():
        raise GpuError("fake GPU spec is empty; expected e.g. 'v100:2,k80:4'")
    for raw_entry in spec.split(","):
        entry = raw_entry.strip()
        match = re.fullmatch(
            r"([A-Za-z0-9][A-Za-z0-9._-]*)(?::(\d+))?(?:@([0-9]*\.?[0-9]+))?", entry
        )
        if not match:
            raise GpuError(
                f"bad fake GPU entry {entry!r}: expected TYPE:COUNT or TYPE:COUNT@SPEED "
                "(e.g. 'v100:2' or 'a6000:1@1.5')"
            )
        gpu_type = match.group(1).lower()
        count = int(match.group(2)) if match.group(2) is not None else 1
        if count < 1:
            raise GpuError(f"bad fake GPU entry {entry!r}: count must be at least 1")
        if gpu_type in seen:
            raise GpuError(f"fake GPU type {gpu_type!r} listed twice")
        seen.add(gpu_type)
        model = DEFAULT_FAKE_GPU_MODELS.get(gpu_type)
        if match.group(3) is not None:
            speed = float(match.group(3))
        elif gpu_type in overrides:
            speed = float(overrides[gpu_type])
        elif model is not None:
            speed = model.speed
        else:
            known = ", ".join(sorted(DEFAULT_FAKE_GPU_MODELS))
            raise GpuError(
                f"no speed known for fake GPU type {gpu_type!r}: give one as "
                f"'{gpu_type}:{count}@SPEED' or in [fake_gpu_speeds] (known: {known})"
            )
        if not speed > 0:
            raise GpuError(f"fake GPU type {gpu_type!r}: speed must be positive, got {speed}")
        memory = model.memory_bytes if model is not None else _DEFAULT_FAKE_MEMORY
        groups.append(FakeGpuGroup(gpu_type, count, speed, memory))
    return groups


def fake_reference_speed(
    speeds: Mapping[str, float] | None = None, groups: Iterable[FakeGpuGroup] = ()
) -> float:
    """The speed that runs at the host's full compute speed: the fastest in the table (the
    defaults, the config's [fake_gpu_speeds] and any ``@speed`` of the spec). Workers of one
    cluster must share the table so that their fake GPUs compare."""
    candidates = [model.speed for model in DEFAULT_FAKE_GPU_MODELS.values()]
    candidates.extend(float(v) for v in (speeds or {}).values())
    candidates.extend(group.speed for group in groups)
    return max(candidates)


class FakeGpuProvider:
    """GPUs that exist only in a spec; indices count up in the order given."""

    def __init__(
        self, groups: Iterable[FakeGpuGroup], reference_speed: float | None = None
    ) -> None:
        groups = list(groups)
        reference = reference_speed or fake_reference_speed(groups=groups)
        gpus: list[GpuInfo] = []
        for group in groups:
            if group.speed > reference:
                raise GpuError(
                    f"fake GPU type {group.type!r} has speed {group.speed}, above the "
                    f"reference speed {reference}"
                )
            for _ in range(group.count):
                gpus.append(
                    GpuInfo(
                        index=len(gpus),
                        type=group.type,
                        memory_bytes=group.memory_bytes,
                        fake=True,
                        fake_speed=group.speed,
                        fake_pace=group.speed / reference,
                    )
                )
        self._gpus = gpus
        self._unhealthy: dict[int, str] = {}

    @classmethod
    def from_spec(
        cls,
        spec: str,
        speeds: Mapping[str, float] | None = None,
        reference_speed: float | None = None,
    ) -> FakeGpuProvider:
        groups = parse_fake_gpus(spec, speeds)
        return cls(groups, reference_speed or fake_reference_speed(speeds, groups))

    def mark_unhealthy(self, index: int, problem: str) -> None:
        """Lets tests and demos exercise the unhealthy-GPU path."""
        self._unhealthy[index] = problem

    def discover(self) -> list[GpuInfo]:
        return [
            replace(gpu, healthy=False, problem=self._unhealthy[gpu.index])
            if gpu.index in self._unhealthy
            else gpu
            for gpu in self._gpus
        ]

    def utilization(self) -> dict[int, float]:
        # Fake GPUs have no counters; the master learns speed from progress instead.
        return {}


# --- NVML ------------------------------------------------------------------------------------


class NvmlLibrary(Protocol):
    """The few NVML queries the agent makes, by device index. Errors raise GpuError."""

    def init(self) -> None: ...

    def device_count(self) -> int: ...

    def name(self, index: int) -> str: ...

    def uuid(self, index: int) -> str: ...

    def memory_total(self, index: int) -> int: ...

    def utilization_percent(self, index: int) -> int: ...

    def health_problem(self, index: int) -> str | None:
        """Why the device should not be used (lost, pending page retirement, ECC), or None."""
        ...


class PynvmlLibrary:
    """:class:`NvmlLibrary` over nvidia-ml-py (``pynvml``)."""

    def __init__(self, module: Any = None) -> None:
        # `module` stands in for pynvml in tests of this adapter.
        if module is None:
            try:
                import pynvml

                module = pynvml
            except ImportError as exc:
                raise GpuError(
                    "nvidia-ml-py is not installed (pip install 'hadar[worker]'); "
                    "or run with --fake-gpus"
                ) from exc
        self._nvml = module

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except self._nvml.NVMLError as exc:
            raise GpuError(f"NVML {what}: {exc}") from exc

    @staticmethod
    def _text(raw: object) -> str:
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    def init(self) -> None:
        with self._errors("init"):
            self._nvml.nvmlInit()

    def device_count(self) -> int:
        with self._errors("device count"):
            return int(self._nvml.nvmlDeviceGetCount())

    def name(self, index: int) -> str:
        with self._errors(f"name of GPU {index}"):
            handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
            return self._text(self._nvml.nvmlDeviceGetName(handle))

    def uuid(self, index: int) -> str:
        with self._errors(f"UUID of GPU {index}"):
            handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
            return self._text(self._nvml.nvmlDeviceGetUUID(handle))

    def memory_total(self, index: int) -> int:
        with self._errors(f"memory of GPU {index}"):
            handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
            return int(self._nvml.nvmlDeviceGetMemoryInfo(handle).total)

    def utilization_percent(self, index: int) -> int:
        with self._errors(f"utilization of GPU {index}"):
            handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
            return int(self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu)

    def health_problem(self, index: int) -> str | None:
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as exc:
            return f"device unreachable: {exc}"
        try:
            if nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle) == nvml.NVML_FEATURE_ENABLED:
                return "retired memory pages pending (reset the GPU)"
        except nvml.NVMLError_NotSupported:
            pass
        except nvml.NVMLError as exc:
            return f"retired pages query failed: {exc}"
        try:
            errors = nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
            )
            if int(errors) > 0:
                return f"{int(errors)} uncorrected ECC errors since the last driver load"
        except nvml.NVMLError_NotSupported:
            pass
        except nvml.NVMLError as exc:
            return f"ECC query failed: {exc}"
        return None


class NvmlGpuProvider:
    """Real GPUs, through NVML."""

    def __init__(
        self,
        library: NvmlLibrary,
        name_table: Sequence[tuple[str, str]] | Mapping[str, str] = (),
    ) -> None:
        self._lib = library
        self._table = name_table
        self._lib.init()

    def discover(self) -> list[GpuInfo]:
        gpus: list[GpuInfo] = []
        for index in range(self._lib.device_count()):
            problem = self._lib.health_problem(index)
            try:
                name = self._lib.name(index)
                uuid = self._lib.uuid(index)
                memory = self._lib.memory_total(index)
            except GpuError as exc:
                # A lost GPU still exists for the master (so its tasks are known to be gone),
                # but nothing is placed on it.
                gpus.append(
                    GpuInfo(index, "unknown", 0, healthy=False, problem=problem or str(exc))
                )
                continue
            gpus.append(
                GpuInfo(
                    index=index,
                    type=gpu_type_for_name(name, self._table),
                    memory_bytes=memory,
                    device_name=name,
                    uuid=uuid,
                    healthy=problem is None,
                    problem=problem or "",
                )
            )
        return gpus

    def utilization(self) -> dict[int, float]:
        result: dict[int, float] = {}
        for index in range(self._lib.device_count()):
            try:
                result[index] = self._lib.utilization_percent(index) / 100.0
            except GpuError:
                continue
        return result


def make_gpu_provider(
    fake_spec: str | None,
    fake_speeds: Mapping[str, float] | None = None,
    name_table: Mapping[str, str] | None = None,
    library: NvmlLibrary | None = None,
    fake_reference_speed: float | None = None,
) -> GpuProvider:
    """Fake GPUs when a spec is given, else NVML; no NVML and no spec is a clear error."""
    if fake_spec:
        return FakeGpuProvider.from_spec(fake_spec, fake_speeds, fake_reference_speed)
    try:
        lib = library if library is not None else PynvmlLibrary()
        return NvmlGpuProvider(lib, dict(name_table or {}))
    except GpuError as exc:
        raise GpuError(
            f"cannot use NVIDIA GPUs ({exc}); on a machine without GPUs start the worker "
            "with fake ones, e.g. --fake-gpus v100:2,k80:4"
        ) from exc


def known_fake_types() -> list[str]:
    return sorted(DEFAULT_FAKE_GPU_MODELS)


def is_valid_gpu_type(name: str) -> bool:
    return bool(_TYPE_RE.match(name))
