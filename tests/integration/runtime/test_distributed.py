"""A two-process job over gloo: preempted and resumed exactly; uneven shares stay exact."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from tests.integration.runtime.processes import (
    JobProcess,
    contract_env,
    final_model,
    free_port,
    start,
    stop_all,
    torchrun_env,
)
from tests.unit.runtime.conftest import assert_identical
from worker.runtime import contract
from worker.workloads.runner import train_managed

HERE = Path(__file__).parent
TOTAL = 16


def _start_pair(
    workload: str | Path,
    common: Mapping[str, object],
    cwd: Path,
    per_rank: Mapping[str, Sequence[object]] | None = None,
) -> list[JobProcess]:
    port = free_port()
    processes = []
    for rank in range(2):
        own = {name: values[rank] for name, values in (per_rank or {}).items()}
        env = contract_env(torchrun_env(2, rank, port), common, own)
        processes.append(start(workload, env, cwd, name=f"rank{rank}"))
    return processes


def test_preempted_two_process_job_resumes_and_matches(tmp_path: Path) -> None:
    """SIGTERM to one rank only: both ranks agree to stop after the same iteration, checkpoint
    once and exit 0; the resumed pair ends bit-identical to an uninterrupted pair."""
    common: dict[str, object] = {
        contract.JOB_ID: "21",
        contract.TOTAL_ITERATIONS: TOTAL,
        contract.GLOBAL_BATCH_SIZE: 6,
        contract.SEED: 4,
        contract.FAKE_GPU_SPEED: 0.3,
    }
    processes: list[JobProcess] = []
    try:
        straight = _start_pair(
            "lstm", {**common, contract.CHECKPOINT_DIR: tmp_path / "straight"}, tmp_path / "s"
        )
        processes += straight
        leased = {**common, contract.CHECKPOINT_DIR: tmp_path / "ckpt"}
        first = _start_pair("lstm", leased, tmp_path / "a")
        processes += first
        first[0].wait_for(lambda r: r.iterations_done >= 3)
        first[1].terminate()
        exits = [process.finish() for process in first]
        assert {(e.exit_reason, e.iterations_done) for e in exits} == {
            ("stopped", exits[0].iterations_done)
        }
        assert 3 <= exits[0].iterations_done < TOTAL
        assert exits[0].checkpoint_iterations == exits[0].iterations_done
        second = _start_pair("lstm", leased, tmp_path / "b")
        processes += second
        assert {process.finish().exit_reason for process in second} == {"completed"}
        assert {process.finish().iterations_done for process in straight} == {TOTAL}
    finally:
        stop_all(processes)
    assert_identical(final_model(tmp_path / "straight", "21"), final_model(tmp_path / "ckpt", "21"))


def test_uneven_rank_shares_give_the_global_batch_update(tmp_path: Path) -> None:
    """Ranks computing 5 and 3 of 8 samples (the first in 2 micro-batches), with the helper's
    all-reduce and with a DDP-wrapped model, update as one process on the whole batch does."""
    common: dict[str, object] = {
        contract.TOTAL_ITERATIONS: 2,
        contract.GLOBAL_BATCH_SIZE: 8,
        contract.SEED: 9,
    }
    processes: list[JobProcess] = []
    try:
        programs: list[tuple[str, str | Path]] = [
            ("own", "resnet"),
            ("ddp", HERE / "ddp_script.py"),
        ]
        for label, program in programs:
            processes += _start_pair(
                program,
                {**common, contract.JOB_ID: label, contract.CHECKPOINT_DIR: tmp_path},
                tmp_path / label,
                {contract.LOCAL_BATCH_SIZE: [5, 3], contract.ACCUMULATION_STEPS: [2, 1]},
            )
        for process in processes:
            assert process.finish().exit_reason == "completed"
    finally:
        stop_all(processes)
    single = train_managed(
        "resnet", {name: str(value) for name, value in common.items()}, handle_signals=False
    )
    expected = single.model.state_dict()
    for label in ("own", "ddp"):
        shared = final_model(tmp_path, label)
        for key, value in expected.items():
            torch.testing.assert_close(shared[key], value, rtol=1e-5, atol=1e-6)
