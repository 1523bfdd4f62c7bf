"""Synthetic data as a pure function of (seed, stream, iteration, sample range).

Samples come in fixed blocks, each drawn from its own generator seeded by the block's
coordinates, so samples [start, stop) of an iteration are the same however the global batch is
cut into ranks and micro-batches, and a resumed job sees exactly the data it would have seen.
"""

from __future__ import annotations

import torch

from worker.runtime.rng import derive_seed
from worker.workloads.registry import Batch, Workload

BLOCK = 16


def synthetic_batch(
    workload: Workload,
    *,
    seed: int,
    stream: int,
    iteration: int,
    start: int,
    stop: int,
    device: torch.device | None = None,
) -> Batch:
    if not 0 <= start < stop:
        raise ValueError(f"bad sample range [{start}, {stop})")
    first, last = start // BLOCK, (stop - 1) // BLOCK
    blocks = []
    for block in range(first, last + 1):
        generator = torch.Generator().manual_seed(
            derive_seed(workload.name, seed, stream, iteration, block)
        )
        blocks.append(workload.make_samples(generator, BLOCK))
    offset = start - first * BLOCK
    parts = []
    for column in zip(*blocks, strict=True):
        joined = torch.cat(column) if len(column) > 1 else column[0]
        part = joined[offset : offset + stop - start]
        parts.append(part.to(device, non_blocking=True) if device is not None else part)
    return tuple(parts)
