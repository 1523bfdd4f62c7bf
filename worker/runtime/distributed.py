"""torch.distributed setup from torchrun's variables, and the collectives the runtime needs.

Backend: nccl when the job runs on CUDA, gloo on CPU. With world size 1 no process group is
created and every collective here is a no-op. For HadarE copies the world spans all copies;
each copy gets a subgroup for its gradient all-reduce (see :mod:`worker.runtime.contract`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from worker.runtime.settings import ContractError, RuntimeSettings

# Long enough for a HadarE copy to wait at the end-of-lease average for a slower copy; a peer
# that dies closes its connections (the others fail at once) and the agent reaps the task.
_TIMEOUT = timedelta(hours=1)


@dataclass
class DistContext:
    device: torch.device
    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    num_copies: int = 1
    copy_index: int = 0
    # Global ranks of every copy, by copy index.
    copy_ranks: list[list[int]] = field(default_factory=lambda: [[0]])
    # Group for this copy's gradient all-reduce; None means the default group.
    copy_group: Any = None
    owns_process_group: bool = False

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def my_copy_ranks(self) -> list[int]:
        return self.copy_ranks[self.copy_index]

    @property
    def copy_size(self) -> int:
        return len(self.my_copy_ranks)

    @property
    def copy_rank(self) -> int:
        return self.my_copy_ranks.index(self.rank)

    @property
    def process_group(self) -> Any:
        """The group a DDP wrapper of this process's model should use (its copy's)."""
        return self.copy_group

    def all_reduce_copy(self, tensor: torch.Tensor) -> None:
        """Sum over this copy's processes, in place."""
        if self.copy_size > 1:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self.copy_group)

    def all_reduce_world(self, tensor: torch.Tensor) -> None:
        if self.distributed:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)

    def broadcast_world(self, tensor: torch.Tensor, source: int = 0) -> None:
        if self.distributed:
            dist.broadcast(tensor, src=source)

    def all_gather_world(self, value: Any) -> list[Any]:
        if not self.distributed:
            return [value]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, value)
        return gathered

    def barrier(self) -> None:
        if self.distributed:
            if self.device.type == "cuda":
                dist.barrier(device_ids=[self.device.index or 0])
            else:
                dist.barrier()

    def shutdown(self) -> None:
        global _CONTEXT
        if self.owns_process_group and dist.is_initialized():
            dist.destroy_process_group()
        if _CONTEXT is self:
            _CONTEXT = None


_CONTEXT: DistContext | None = None


def choose_device(settings: RuntimeSettings) -> torch.device:
    wanted = settings.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if wanted == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ContractError("HADAR_DEVICE=cuda but CUDA is not available")
    local_rank = settings.distributed.local_rank if settings.distributed else 0
    # The agent makes only the task's GPUs visible; LOCAL_RANK indexes into them.
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    return device


def init_distributed(settings: RuntimeSettings) -> DistContext:
    """The process's distributed context; created once, then returned again."""
    global _CONTEXT
    if _CONTEXT is not None:
        return _CONTEXT
    device = choose_device(settings)
    spec = settings.distributed
    if spec is None:
        return DistContext(device=device)
    owns = False
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(
            backend=backend,
            init_method=f"tcp://{_host(spec.master_addr)}:{spec.master_port}",
            world_size=spec.world_size,
            rank=spec.rank,
            timeout=_TIMEOUT,
            device_id=device if device.type == "cuda" else None,
        )
        owns = True
    elif dist.get_world_size() != spec.world_size or dist.get_rank() != spec.rank:
        raise ContractError("an existing process group disagrees with WORLD_SIZE/RANK")
    gathered: list[Any] = [None] * spec.world_size
    dist.all_gather_object(gathered, settings.copy_index)
    copy_ranks = _ranks_by_copy([int(index) for index in gathered], settings.num_copies)
    copy_group: Any = None
    if settings.num_copies > 1:
        # Every rank must create every group, in the same order.
        for index, ranks in enumerate(copy_ranks):
            group = dist.new_group(ranks=ranks)
            if index == settings.copy_index:
                copy_group = group
    context = DistContext(
        device=device,
        world_size=spec.world_size,
        rank=spec.rank,
        local_rank=spec.local_rank,
        num_copies=settings.num_copies,
        copy_index=settings.copy_index,
        copy_ranks=copy_ranks,
        copy_group=copy_group,
        owns_process_group=owns,
    )
    _CONTEXT = context
    return context


def _ranks_by_copy(copy_of_rank: Sequence[int], num_copies: int) -> list[list[int]]:
    ranks: list[list[int]] = [[] for _ in range(num_copies)]
    for rank, index in enumerate(copy_of_rank):
        if not 0 <= index < num_copies:
            raise ContractError(f"rank {rank} says copy {index}, not below {num_copies}")
        ranks[index].append(rank)
    empty = [index for index, members in enumerate(ranks) if not members]
    if empty:
        raise ContractError(f"copies {empty} have no processes in the world")
    return ranks


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address
