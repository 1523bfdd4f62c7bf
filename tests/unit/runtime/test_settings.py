"""Parsing the contract's environment: defaults, and precise errors for bad values."""

from __future__ import annotations

import pytest

from worker.runtime import contract
from worker.runtime.settings import ContractError, RuntimeSettings


def test_defaults_for_a_script_run_by_hand() -> None:
    """With no contract variables, the script's defaults apply and nothing is distributed."""
    settings = RuntimeSettings.from_env({}, default_batch_size=32, default_iterations=10)
    assert settings.total_iterations == 10
    assert settings.global_batch_size == 32
    assert settings.local_batch_size is None
    assert settings.accumulation_steps == 1
    assert settings.iteration_budget == 0
    assert settings.fake_gpu_speed == 1.0
    assert settings.num_copies == 1
    assert settings.distributed is None
    assert settings.checkpoint_dir is None


def test_full_environment() -> None:
    env = {
        contract.JOB_ID: "12",
        contract.TOTAL_ITERATIONS: "500",
        contract.ITERATIONS_DONE: "100",
        contract.ITERATION_BUDGET: "50",
        contract.GLOBAL_BATCH_SIZE: "0",
        contract.LOCAL_BATCH_SIZE: "20",
        contract.ACCUMULATION_STEPS: "2",
        contract.CHECKPOINT_DIR: "/ckpt",
        contract.FAKE_GPU_SPEED: "0.5",
        contract.NUM_COPIES: "2",
        contract.COPY_INDEX: "1",
        "WORLD_SIZE": "2",
        "RANK": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
    }
    settings = RuntimeSettings.from_env(env, default_batch_size=64)
    assert settings.job_id == "12"
    assert settings.global_batch_size == 64  # 0 means the workload's default
    assert settings.local_batch_size == 20
    assert settings.iterations_done_hint == 100
    assert settings.fake_gpu_speed == 0.5
    assert settings.distributed is not None
    assert settings.distributed.rank == 1
    assert settings.distributed.master_port == 29500


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "HADAR_ITERATIONS is not set"),
        ({contract.TOTAL_ITERATIONS: "ten"}, "HADAR_ITERATIONS must be an integer"),
        ({contract.TOTAL_ITERATIONS: "0"}, "HADAR_ITERATIONS must be >= 1"),
        ({contract.TOTAL_ITERATIONS: "5", contract.FAKE_GPU_SPEED: "2"}, "HADAR_FAKE_GPU_SPEED"),
        ({contract.TOTAL_ITERATIONS: "5", contract.LOCAL_BATCH_SIZE: "99"}, "exceeds"),
        (
            {contract.TOTAL_ITERATIONS: "5", contract.NUM_COPIES: "2", contract.COPY_INDEX: "2"},
            "HADAR_COPY_INDEX=2",
        ),
        (
            {contract.TOTAL_ITERATIONS: "5", contract.NUM_COPIES: "2"},
            "spanning the processes of all copies",
        ),
        ({contract.TOTAL_ITERATIONS: "5", "WORLD_SIZE": "2", "RANK": "0"}, "MASTER_ADDR"),
        ({contract.TOTAL_ITERATIONS: "5", contract.DEVICE: "tpu"}, "HADAR_DEVICE"),
        ({contract.TOTAL_ITERATIONS: "5", contract.CHECKPOINT_INTERVAL_S: "nan"}, "non-negative"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ContractError, match=message):
        RuntimeSettings.from_env(env, default_batch_size=8)
