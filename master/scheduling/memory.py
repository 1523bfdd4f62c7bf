"""GPU memory: how much a GPU has, and which GPU types can hold a job's per-GPU request.

A job that asks for ``memory_bytes_per_gpu`` may use a GPU type only when every usable GPU
of that type has at least that much (a type counts with its smallest GPU, so a placement
on any GPU of the type is safe). A GPU that reports no memory counts with the figure for
its type below; a type with neither is not judged (it stays usable).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

GIB = 1 << 30

#: Memory per GPU where the cluster does not report it (bytes).
DEFAULT_GPU_MEMORY: Mapping[str, int] = MappingProxyType(
    {
        "k80": 12 * GIB,
        "m60": 8 * GIB,
        "p40": 24 * GIB,
        "p100": 16 * GIB,
        "t4": 16 * GIB,
        "v100": 16 * GIB,
        "rtx2080ti": 11 * GIB,
        "rtx3090": 24 * GIB,
        "a10": 24 * GIB,
        "a40": 48 * GIB,
        "a100-40gb": 40 * GIB,
        "a100-80gb": 80 * GIB,
        "l40s": 48 * GIB,
        "h100": 80 * GIB,
    }
)


def gpu_memory(gpu_type: str, memory_bytes: int) -> int:
    """A GPU's memory: as reported, else its type's figure, else 0 (unknown)."""
    return memory_bytes or DEFAULT_GPU_MEMORY.get(gpu_type, 0)


def memory_by_type(gpus: Iterable[tuple[str, int]]) -> dict[str, int]:
    """type -> memory of its smallest GPU (0: unknown), from ``(type, memory_bytes)`` pairs."""
    out: dict[str, int] = {}
    for gpu_type, reported in gpus:
        memory = gpu_memory(gpu_type, reported)
        out[gpu_type] = min(out.get(gpu_type, memory), memory)
    return out


def fits(need: int, memory: int) -> bool:
    """Whether a GPU (type) with ``memory`` can hold a per-GPU request of ``need`` bytes."""
    return need <= 0 or memory <= 0 or memory >= need


def fitting_types(need: int, by_type: Mapping[str, int]) -> frozenset[str]:
    """The types in ``by_type`` (type -> memory) that can hold ``need`` bytes per GPU."""
    return frozenset(t for t, memory in by_type.items() if fits(need, memory))


def format_memory(size: int) -> str:
    """Binary units, as ``hctl`` prints them: ``12GiB``, ``1.5TiB``, ``512MiB``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.1f}".removesuffix(".0") + unit
        value /= 1024
    return f"{value:.1f}".removesuffix(".0") + "TiB"


def memory_wait_reason(
    need: int,
    num_gpus: int,
    allowed: Callable[[str], bool],
    capacity: Mapping[str, int],
    by_type: Mapping[str, int],
) -> tuple[str, bool] | None:
    """Why a job asking for ``need`` bytes per GPU waits, as far as memory is concerned.

    ``allowed`` says whether the job's allow-list admits a type; ``capacity`` and
    ``by_type`` are the usable GPUs and their memory per type. None when memory excludes no
    usable type; else the reason and whether it alone keeps the job waiting (fewer than
    ``num_gpus`` usable GPUs are large enough).
    """
    if need <= 0:
        return None
    types = [t for t in sorted(capacity) if allowed(t)]
    large = [t for t in types if fits(need, by_type.get(t, 0))]
    if len(large) == len(types):
        return None
    wanted = format_memory(need)
    count = sum(capacity[t] for t in large)
    if count >= num_gpus:
        return f"only GPUs with at least {wanted} of memory fit it ({', '.join(large)})", False
    if not large:
        biggest = max((by_type.get(t, 0) for t in types), default=0)
        return (
            f"waiting: needs {wanted} of GPU memory; the largest usable GPUs have "
            f"{format_memory(biggest)}"
        ), True
    return (
        f"waiting: needs {num_gpus} GPUs with at least {wanted} of memory; "
        f"{count} usable ({', '.join(large)})"
    ), True
