"""Measuring the built-in workloads on this node's devices (for ``hadar-worker profile``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from worker.workloads.registry import get_workload
from worker.workloads.runner import train_plain

WARMUP_ITERATIONS = 3


class ProfileResult(NamedTuple):
    workload: str
    job_type: str
    iterations_per_s: float


def profile(
    workload_names: Sequence[str],
    device: torch.device | str,
    iterations: int,
    *,
    batch_size: int | None = None,
) -> list[ProfileResult]:
    """Iterations per second of each workload training alone on ``device`` (one process).

    Each runs a few untimed warm-up iterations first (allocator, kernel selection), then
    ``iterations`` timed ones at its default batch size unless ``batch_size`` is given.
    Unknown names raise :class:`worker.workloads.registry.UnknownWorkloadError` before any
    measurement starts.
    """
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    workloads = [get_workload(name) for name in workload_names]
    results = []
    for workload in workloads:
        measured = train_plain(
            workload,
            iterations=iterations,
            batch_size=batch_size,
            device=device,
            warmup=WARMUP_ITERATIONS,
        )
        results.append(
            ProfileResult(
                workload=workload.name,
                job_type=workload.job_type(batch_size),
                iterations_per_s=iterations / measured.seconds,
            )
        )
    return results
