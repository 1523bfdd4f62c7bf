"""The user guide's PyTorch example: the managed script runs by hand, and under the runtime
contract it stops on SIGTERM and resumes to the same result as an uninterrupted run; the
guide's diff is the real difference between the two scripts."""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
from pathlib import Path

import torch

from tests.integration.runtime.processes import (
    REPO,
    contract_env,
    final_model,
    start,
    stop_all,
)
from tests.unit.runtime.checks import assert_identical
from worker.runtime import contract
from worker.runtime.contract import ProgressRecord

EXAMPLES = REPO / "clients" / "examples" / "pytorch"
PLAIN = EXAMPLES / "train_plain.py"
MANAGED = EXAMPLES / "train_managed.py"
GUIDE = REPO / "docs" / "user-guide.md"
TOTAL = 200


def test_the_guides_diff_is_the_difference_between_the_example_scripts() -> None:
    """The unified diff in docs/user-guide.md is what difflib makes of the two files."""
    blocks = re.findall(r"```diff\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) == 1, "the guide should hold exactly one diff block"
    expected = "".join(
        difflib.unified_diff(
            PLAIN.read_text(encoding="utf-8").splitlines(keepends=True),
            MANAGED.read_text(encoding="utf-8").splitlines(keepends=True),
            "a/train.py",
            "b/train.py",
        )
    )
    assert blocks[0] == expected


def test_the_managed_script_runs_by_hand(tmp_path: Path) -> None:
    """Without any HADAR_* variable it trains its --iterations in one process and saves."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("HADAR_") and k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")
    }
    env.update({"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})
    done = subprocess.run(
        [sys.executable, str(MANAGED), "--iterations", "120"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "iteration 100: loss" in done.stdout
    assert (tmp_path / "model.pt").is_file()


def test_the_managed_script_stops_and_resumes_exactly(tmp_path: Path) -> None:
    """SIGTERM mid-run: it checkpoints and exits 0 ("stopped"); started again (elsewhere,
    same checkpoint directory) it resumes where it stopped, completes, saves model.pt, and
    ends with the parameters of an uninterrupted run, learning-rate schedule included."""
    common: dict[str, object] = {
        contract.JOB_ID: "5",
        contract.TOTAL_ITERATIONS: TOTAL,
        contract.GLOBAL_BATCH_SIZE: 32,
        # Paced so that the signal surely lands mid-run.
        contract.FAKE_GPU_SPEED: 0.05,
    }
    processes = []
    try:
        straight = start(
            MANAGED,
            contract_env(common, {contract.CHECKPOINT_DIR: tmp_path / "straight-ckpt"}),
            tmp_path / "straight",
        )
        processes.append(straight)
        shared = contract_env(common, {contract.CHECKPOINT_DIR: tmp_path / "ckpt"})
        first = start(MANAGED, shared, tmp_path / "node-a", name="lease0")
        processes.append(first)

        def reached(record: ProgressRecord) -> bool:
            return record.iterations_done >= 5

        first.wait_for(reached)
        first.terminate()
        stopped = first.finish()
        assert stopped.exit_reason == "stopped"
        assert 5 <= stopped.iterations_done < TOTAL
        assert not (tmp_path / "node-a" / "model.pt").exists()

        second = start(MANAGED, shared, tmp_path / "node-b", name="lease1")
        processes.append(second)
        assert second.wait_for(lambda r: True).iterations_done == stopped.iterations_done
        final = second.finish()
        assert (final.exit_reason, final.iterations_done) == ("completed", TOTAL)
        assert straight.finish().exit_reason == "completed"
    finally:
        stop_all(processes)
    resumed = final_model(tmp_path / "ckpt", "5")
    assert_identical(final_model(tmp_path / "straight-ckpt", "5"), resumed)
    saved = torch.load(tmp_path / "node-b" / "model.pt", weights_only=True)
    assert_identical(resumed, saved)
