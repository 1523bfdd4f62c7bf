"""What a job's process is told by its environment, parsed and checked once."""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from worker.runtime import contract


class ContractError(ValueError):
    """An environment variable of the contract is missing or malformed: the job's setup is
    wrong, so running it again fails the same way. Uncaught under the agent, it fails the
    job without a retry (see :func:`report_contract_errors`)."""


# How to supply a variable the runtime needs and did not get.
_FIXES = {
    contract.GLOBAL_BATCH_SIZE: "submit the job with --batch-size N (batch_size in a job "
    "file), or give the script a default: default_batch_size=N to TrainingRun.from_env and "
    "RuntimeSettings.from_env",
    contract.TOTAL_ITERATIONS: "submit the job with --iterations N, or give the script a "
    "default: default_iterations=N to TrainingRun.from_env and RuntimeSettings.from_env",
    "RANK": "the worker sets it for each process; run the script under the worker or "
    "torchrun, or leave WORLD_SIZE unset for a single process",
    "MASTER_ADDR": "the worker sets it for each process; run the script under the worker or "
    "torchrun, or leave WORLD_SIZE unset for a single process",
    "MASTER_PORT": "the worker sets it for each process; run the script under the worker or "
    "torchrun, or leave WORLD_SIZE unset for a single process",
}


def report_contract_errors(error_file: Path | None) -> None:
    """Once per process: an uncaught ContractError's message goes to `error_file` (the
    agent's HADAR_ERROR_FILE) before Python prints it and exits, so the agent can tell the
    master that retrying is pointless. Other exceptions are left as they were."""
    global _REPORTING
    if error_file is None or _REPORTING:
        return
    _REPORTING = True
    previous = sys.excepthook

    def hook(
        kind: type[BaseException], error: BaseException, traceback: TracebackType | None
    ) -> None:
        if isinstance(error, ContractError):
            record_contract_error(error_file, error)
        previous(kind, error, traceback)

    sys.excepthook = hook


def record_contract_error(error_file: Path | None, error: ContractError) -> None:
    """Writes `error` to the agent's error file (see :func:`report_contract_errors`)."""
    if error_file is None:
        return
    # Unwritable, the failure is still reported, as one a retry might pass.
    with contextlib.suppress(OSError):
        error_file.write_text(f"{error}\n", encoding="utf-8")


_REPORTING = False


@dataclass(frozen=True, slots=True)
class DistributedSettings:
    """torchrun's variables; absent (world size 1, no process group) when WORLD_SIZE is unset."""

    world_size: int
    rank: int
    local_rank: int
    master_addr: str
    master_port: int


@dataclass(frozen=True, slots=True)
class RuntimeSettings:
    job_id: str
    total_iterations: int
    iterations_done_hint: int
    iteration_budget: int  # 0: until the job is done or stopped
    global_batch_size: int
    local_batch_size: int | None  # None: an even split of the global batch
    accumulation_steps: int
    checkpoint_dir: Path | None
    progress_file: Path | None
    checkpoint_interval_s: float
    progress_interval_s: float
    lease_file: Path | None
    fake_gpu_speed: float
    gpu_type: str
    num_copies: int
    copy_index: int
    seed: int
    deterministic: bool
    device: str | None  # None: cuda when available, else cpu
    distributed: DistributedSettings | None

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str],
        *,
        default_batch_size: int | None = None,
        default_iterations: int | None = None,
    ) -> RuntimeSettings:
        reader = _Reader(env)
        report_contract_errors(reader.path(contract.ERROR_FILE))
        total = reader.integer(contract.TOTAL_ITERATIONS, default_iterations, minimum=1)
        global_batch = reader.integer(contract.GLOBAL_BATCH_SIZE, default_batch_size, minimum=0)
        if global_batch == 0:
            # The job spec's "0 means the workload's default".
            if default_batch_size is None:
                raise ContractError(
                    f"{contract.GLOBAL_BATCH_SIZE} is 0 and there is no default: "
                    + _FIXES[contract.GLOBAL_BATCH_SIZE]
                )
            global_batch = default_batch_size
        local_batch = reader.optional_integer(contract.LOCAL_BATCH_SIZE, minimum=1)
        if local_batch is not None and local_batch > global_batch:
            raise ContractError(
                f"{contract.LOCAL_BATCH_SIZE}={local_batch} exceeds the global batch {global_batch}"
            )
        num_copies = max(1, reader.integer(contract.NUM_COPIES, 1, minimum=0))
        copy_index = reader.integer(contract.COPY_INDEX, 0, minimum=0)
        if copy_index >= num_copies:
            raise ContractError(
                f"{contract.COPY_INDEX}={copy_index} is not below {contract.NUM_COPIES}="
                f"{num_copies}"
            )
        speed = reader.number(contract.FAKE_GPU_SPEED, 1.0)
        if not 0.0 < speed <= 1.0:
            raise ContractError(f"{contract.FAKE_GPU_SPEED} must be in (0, 1], got {speed}")
        device = env.get(contract.DEVICE) or None
        if device is not None and device not in {"cpu", "cuda"}:
            raise ContractError(f"{contract.DEVICE} must be 'cpu' or 'cuda', got {device!r}")
        distributed = _distributed(reader)
        if num_copies > 1 and (distributed is None or distributed.world_size < num_copies):
            raise ContractError(
                f"{contract.NUM_COPIES}={num_copies} needs WORLD_SIZE/RANK spanning the "
                "processes of all copies"
            )
        return cls(
            job_id=env.get(contract.JOB_ID) or "local",
            total_iterations=total,
            iterations_done_hint=reader.integer(contract.ITERATIONS_DONE, 0, minimum=0),
            iteration_budget=reader.integer(contract.ITERATION_BUDGET, 0, minimum=0),
            global_batch_size=global_batch,
            local_batch_size=local_batch,
            accumulation_steps=max(1, reader.integer(contract.ACCUMULATION_STEPS, 1, minimum=0)),
            checkpoint_dir=reader.path(contract.CHECKPOINT_DIR),
            progress_file=reader.path(contract.PROGRESS_FILE),
            checkpoint_interval_s=reader.number(contract.CHECKPOINT_INTERVAL_S, 0.0),
            progress_interval_s=reader.number(contract.PROGRESS_INTERVAL_S, 1.0),
            lease_file=reader.path(contract.LEASE_FILE),
            fake_gpu_speed=speed,
            gpu_type=env.get(contract.GPU_TYPE, ""),
            num_copies=num_copies,
            copy_index=copy_index,
            seed=reader.integer(contract.SEED, 0, minimum=0),
            deterministic=env.get(contract.DETERMINISTIC, "0") in {"1", "true", "yes"},
            device=device,
            distributed=distributed,
        )


def _distributed(reader: _Reader) -> DistributedSettings | None:
    world = reader.optional_integer("WORLD_SIZE", minimum=1)
    if world is None or world == 1:
        return None
    rank = reader.integer("RANK", None, minimum=0)
    if rank >= world:
        raise ContractError(f"RANK={rank} is not below WORLD_SIZE={world}")
    return DistributedSettings(
        world_size=world,
        rank=rank,
        local_rank=reader.integer("LOCAL_RANK", 0, minimum=0),
        master_addr=reader.text("MASTER_ADDR"),
        master_port=reader.integer("MASTER_PORT", None, minimum=1),
    )


def _not_set(name: str) -> str:
    fix = _FIXES.get(name)
    return f"{name} is not set" + (f": {fix}" if fix else "")


class _Reader:
    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env

    def text(self, name: str) -> str:
        value = self._env.get(name, "")
        if not value:
            raise ContractError(_not_set(name))
        return value

    def optional_integer(self, name: str, *, minimum: int) -> int | None:
        raw = self._env.get(name, "").strip()
        if not raw:
            return None
        try:
            value = int(raw)
        except ValueError:
            raise ContractError(f"{name} must be an integer, got {raw!r}") from None
        if value < minimum:
            raise ContractError(f"{name} must be >= {minimum}, got {value}")
        return value

    def integer(self, name: str, default: int | None, *, minimum: int) -> int:
        value = self.optional_integer(name, minimum=minimum)
        if value is not None:
            return value
        if default is None:
            raise ContractError(_not_set(name))
        return default

    def number(self, name: str, default: float) -> float:
        raw = self._env.get(name, "").strip()
        if not raw:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise ContractError(f"{name} must be a number, got {raw!r}") from None
        if math.isnan(value) or value < 0:
            raise ContractError(f"{name} must be a non-negative number, got {raw!r}")
        return value

    def path(self, name: str) -> Path | None:
        raw = self._env.get(name, "")
        return Path(raw) if raw else None
