"""Preemption and migration are invisible to training (real processes, real SIGTERM)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.runtime.processes import (
    contract_env,
    final_model,
    start,
    stop_all,
)
from tests.unit.runtime.checks import assert_identical
from worker.runtime import contract
from worker.runtime.contract import ProgressRecord

TOTAL = 40


def test_two_sigterms_and_a_migration_end_identical_to_a_straight_run(tmp_path: Path) -> None:
    """SIGTERM twice mid-lease (each exits 0 with a checkpoint and a "stopped" record), then a
    process in another working directory finishes from the shared checkpoint directory: the
    parameters equal, bit for bit, those of one uninterrupted run."""
    common: dict[str, object] = {
        contract.JOB_ID: "7",
        contract.TOTAL_ITERATIONS: TOTAL,
        contract.GLOBAL_BATCH_SIZE: 4,
        contract.SEED: 3,
        # Paced so that a signal surely lands mid-run.
        contract.FAKE_GPU_SPEED: 0.3,
    }
    processes = []
    try:
        straight = start(
            "transformer",
            contract_env(common, {contract.CHECKPOINT_DIR: tmp_path / "straight-ckpt"}),
            tmp_path / "straight",
        )
        processes.append(straight)
        shared = contract_env(common, {contract.CHECKPOINT_DIR: tmp_path / "ckpt"})
        done = 0
        for lease in range(2):
            process = start("transformer", shared, tmp_path / "node-a", name=f"lease{lease}")
            processes.append(process)
            target = done + 3

            def reached(record: ProgressRecord, at: int = target) -> bool:
                return record.iterations_done >= at

            process.wait_for(reached)
            process.terminate()
            exit_record = process.finish()
            assert exit_record.exit_reason == "stopped"
            assert done + 3 <= exit_record.iterations_done < TOTAL
            assert exit_record.checkpoint_iterations == exit_record.iterations_done
            done = exit_record.iterations_done
        migrated = start("transformer", shared, tmp_path / "node-b", name="lease2")
        processes.append(migrated)
        first = migrated.wait_for(lambda r: True)
        assert first.iterations_done == done  # resumed, not restarted
        final = migrated.finish()
        assert (final.exit_reason, final.iterations_done) == ("completed", TOTAL)
        assert straight.finish().exit_reason == "completed"
    finally:
        stop_all(processes)
    assert_identical(
        final_model(tmp_path / "straight-ckpt", "7"), final_model(tmp_path / "ckpt", "7")
    )
