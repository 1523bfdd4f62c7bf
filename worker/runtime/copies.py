"""HadarE: averaging the parameters of a job's copies at the end of a lease."""

from __future__ import annotations

import torch
from torch import nn

from worker.runtime.distributed import DistContext


def average_copies(module: nn.Module, context: DistContext) -> None:
    """Replaces parameters and floating buffers by their mean over copies, in place.

    Every process of the world takes part. The processes of one copy hold the same values, so
    each contributes ``1 / (num_copies * copy_size)`` of its tensors to one world-wide sum and
    every copy weighs the same whatever its size. Integer buffers (counters) come from rank 0.
    """
    if not context.distributed:
        return
    weight = 1.0 / (context.num_copies * context.copy_size)
    floating = [p.data for p in module.parameters()]
    floating += [b for b in module.buffers() if b.is_floating_point()]
    integral = [b for b in module.buffers() if not b.is_floating_point()]
    with torch.no_grad():
        for dtype in sorted({t.dtype for t in floating}, key=str):
            group = [t for t in floating if t.dtype == dtype]
            flat = torch.cat([t.reshape(-1) for t in group]) * weight
            context.all_reduce_world(flat)
            _scatter(flat, group)
        for buffer in integral:
            context.broadcast_world(buffer, source=0)


def _scatter(flat: torch.Tensor, targets: list[torch.Tensor]) -> None:
    offset = 0
    for target in targets:
        count = target.numel()
        target.copy_(flat[offset : offset + count].view_as(target))
        offset += count
