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
from tests.unit.runtime.checks import assert_identical
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
    """Ranks computing 5 and 3 of 8 samples (the first in 2 micro-batches). SIGTERM to one rank
    only: both agree to stop after the same iteration, checkpoint once and exit 0; the resumed
    pair ends bit-identical to an uninterrupted pair, and that pair ends where one process
    computing the whole global batch ends (uneven shares weigh their gradients right)."""
    common: dict[str, object] = {
        contract.JOB_ID: "21",
        contract.TOTAL_ITERATIONS: TOTAL,
        contract.GLOBAL_BATCH_SIZE: 8,
        contract.SEED: 4,
        contract.FAKE_GPU_SPEED: 0.3,
    }
    shares = {contract.LOCAL_BATCH_SIZE: [5, 3], contract.ACCUMULATION_STEPS: [2, 1]}
    processes: list[JobProcess] = []
    try:
        straight = _start_pair(
            "resnet",
            {**common, contract.CHECKPOINT_DIR: tmp_path / "straight"},
            tmp_path / "s",
            shares,
        )
        processes += straight
        leased = {**common, contract.CHECKPOINT_DIR: tmp_path / "ckpt"}
        first = _start_pair("resnet", leased, tmp_path / "a", shares)
        processes += first
        first[0].wait_for(lambda r: r.iterations_done >= 3)
        first[1].terminate()
        exits = [process.finish() for process in first]
        assert {(e.exit_reason, e.iterations_done) for e in exits} == {
            ("stopped", exits[0].iterations_done)
        }
        assert 3 <= exits[0].iterations_done < TOTAL
        assert exits[0].checkpoint_iterations == exits[0].iterations_done
        second = _start_pair("resnet", leased, tmp_path / "b", shares)
        processes += second
        assert {process.finish().exit_reason for process in second} == {"completed"}
        assert {process.finish().iterations_done for process in straight} == {TOTAL}
    finally:
        stop_all(processes)
    shared = final_model(tmp_path / "straight", "21")
    assert_identical(shared, final_model(tmp_path / "ckpt", "21"))
    single = train_managed(
        "resnet",
        {name: str(value) for name, value in common.items() if name != contract.FAKE_GPU_SPEED},
        handle_signals=False,
    )
    # Sixteen float32 updates whose sums run in another order (two ranks, micro-batches)
    # drift from the single process by up to about 1e-5: a tenfold margin.
    for key, value in single.model.state_dict().items():
        torch.testing.assert_close(shared[key], value, rtol=1e-4, atol=1e-4)


def test_a_ddp_script_with_uneven_shares_gives_the_global_batch_update(tmp_path: Path) -> None:
    """The same layout with the model wrapped in DDP (the runtime lets DDP all-reduce only in
    the last micro-batch and pre-scales by its world size) updates as one process does."""
    common: dict[str, object] = {
        contract.TOTAL_ITERATIONS: 2,
        contract.GLOBAL_BATCH_SIZE: 8,
        contract.SEED: 9,
        contract.JOB_ID: "ddp",
        contract.CHECKPOINT_DIR: tmp_path,
    }
    processes = _start_pair(
        HERE / "ddp_script.py",
        common,
        tmp_path / "ddp",
        {contract.LOCAL_BATCH_SIZE: [5, 3], contract.ACCUMULATION_STEPS: [2, 1]},
    )
    try:
        for process in processes:
            assert process.finish().exit_reason == "completed"
    finally:
        stop_all(processes)
    single = train_managed(
        "resnet",
        {name: str(value) for name, value in common.items() if name != contract.CHECKPOINT_DIR},
        handle_signals=False,
    )
    shared = final_model(tmp_path, "ddp")
    for key, value in single.model.state_dict().items():
        torch.testing.assert_close(shared[key], value, rtol=1e-5, atol=1e-6)
