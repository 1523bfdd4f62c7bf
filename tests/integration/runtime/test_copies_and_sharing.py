"""HadarE copies average their parameters; two jobs share one fake GPU by accumulation."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.integration.runtime.processes import (
    JobProcess,
    contract_env,
    free_port,
    start,
    stop_all,
    torchrun_env,
)
from worker.runtime import contract
from worker.runtime.checkpoint import CheckpointStore, job_directory
from worker.runtime.contract import ProgressRecord
from worker.runtime.progress import read_progress

HERE = Path(__file__).parent


def _run_copies(tmp_path: Path, lease: int, budgets: list[int]) -> list[ProgressRecord]:
    port = free_port()
    common = {
        contract.JOB_ID: "30",
        contract.TOTAL_ITERATIONS: 11,
        contract.GLOBAL_BATCH_SIZE: 8,
        contract.NUM_COPIES: 2,
        contract.CHECKPOINT_DIR: tmp_path / "ckpt",
        contract.SEED: 2,
    }
    processes: list[JobProcess] = []
    try:
        for copy, budget in enumerate(budgets):
            env = contract_env(
                torchrun_env(2, copy, port),
                common,
                {contract.COPY_INDEX: copy, contract.ITERATION_BUDGET: budget},
            )
            processes.append(
                start(
                    HERE / "copies_script.py",
                    env,
                    tmp_path / f"lease{lease}",
                    name=f"copy{copy}",
                    args=[str(tmp_path / f"lease{lease}" / f"copy{copy}.pt")],
                )
            )
        return [process.finish() for process in processes]
    finally:
        stop_all(processes)


def test_two_copies_continue_from_the_mean_of_their_parameters(tmp_path: Path) -> None:
    """Copies train apart (own data streams, budgets 3 and 5), then both hold exactly the mean
    of their parameters; the job's checkpoint has it, with 3 + 5 iterations done. The next
    lease starts both copies from it and, with no budget, splits the 3 iterations left 2 + 1,
    never running past the job's 11."""
    exits = _run_copies(tmp_path, 0, [3, 5])
    assert {(e.exit_reason, e.iterations_done, e.checkpoint_iterations) for e in exits} == {
        ("lease_done", 8, 8)
    }
    copies = [torch.load(tmp_path / "lease0" / f"copy{c}.pt", weights_only=True) for c in (0, 1)]
    store = CheckpointStore(job_directory(tmp_path / "ckpt", "30"))
    latest = store.load_latest()
    assert latest is not None and latest.iterations == 8
    for key, first in copies[0]["before"].items():
        second = copies[1]["before"][key]
        assert not torch.equal(first, second), "copies must have trained apart"
        mean = (first + second) / 2
        assert torch.equal(copies[0]["after"][key], mean)
        assert torch.equal(copies[1]["after"][key], mean)
        assert torch.equal(latest.state["model"][key], mean)

    exits = _run_copies(tmp_path, 1, [0, 0])
    assert {(e.exit_reason, e.iterations_done) for e in exits} == {("completed", 11)}
    assert store.iterations_on_disk() == [11, 8]
    for copy, share in [(0, 2), (1, 1)]:
        records = read_progress(tmp_path / "lease1" / f"copy{copy}.jsonl")
        progress = [r.iterations_done for r in records if r.event == "progress"]
        # Progress records count the copy's own iterations on top of the 8 it started from.
        assert progress[0] == 8 and max(progress) <= 8 + share


def test_two_jobs_sharing_a_fake_gpu_finish_exactly_their_iterations(tmp_path: Path) -> None:
    """Two concurrent jobs, each on half of a slow fake GPU with 2 accumulation steps."""
    processes: list[JobProcess] = []
    try:
        for job, total in [("41", 9), ("42", 13)]:
            env = contract_env(
                {
                    contract.JOB_ID: job,
                    contract.TOTAL_ITERATIONS: total,
                    contract.GLOBAL_BATCH_SIZE: 4,
                    contract.ACCUMULATION_STEPS: 2,
                    contract.FAKE_GPU_SPEED: 0.5,
                    contract.CHECKPOINT_DIR: tmp_path / "ckpt",
                    contract.GPU_TYPE: "v100",
                }
            )
            processes.append(start("lstm", env, tmp_path / job))
        exits = [process.finish() for process in processes]
    finally:
        stop_all(processes)
    assert [(e.exit_reason, e.iterations_done) for e in exits] == [
        ("completed", 9),
        ("completed", 13),
    ]
    for process, total in zip(processes, [9, 13], strict=True):
        done = [r.iterations_done for r in process.records()]
        assert max(done) == total and done == sorted(done)
    for job, total in [("41", 9), ("42", 13)]:
        assert CheckpointStore(job_directory(tmp_path / "ckpt", job)).iterations_on_disk() == [
            total
        ]
