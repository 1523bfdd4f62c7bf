"""What runs inside a job's process: the training-loop helper and its contract with the agent.

``from worker.runtime import TrainingRun`` is all a managed script needs; see docs/runtime.md.
The names below load lazily so that the agent, which imports only ``worker.runtime.contract``,
does not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker.runtime.checkpoint import CheckpointError, CheckpointStore
    from worker.runtime.distributed import DistContext, init_distributed
    from worker.runtime.rng import derive_seed, seed_everything
    from worker.runtime.settings import ContractError, RuntimeSettings
    from worker.runtime.training import MicroBatch, Step, TrainingRun

_HOMES = {
    "CheckpointError": "checkpoint",
    "CheckpointStore": "checkpoint",
    "ContractError": "settings",
    "DistContext": "distributed",
    "MicroBatch": "training",
    "RuntimeSettings": "settings",
    "Step": "training",
    "TrainingRun": "training",
    "derive_seed": "rng",
    "init_distributed": "distributed",
    "seed_everything": "rng",
}

__all__ = [
    "CheckpointError",
    "CheckpointStore",
    "ContractError",
    "DistContext",
    "MicroBatch",
    "RuntimeSettings",
    "Step",
    "TrainingRun",
    "derive_seed",
    "init_distributed",
    "seed_everything",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'worker.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(f"worker.runtime.{home}"), name)
