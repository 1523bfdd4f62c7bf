"""docs/runtime.md's DDP script runs as the agent starts a job submitted without
--batch-size (no HADAR_GLOBAL_BATCH_SIZE), over two gloo processes; and an uncaught
ContractError reaches the agent's error file with its fix."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.integration.runtime.processes import (
    REPO,
    JobProcess,
    contract_env,
    free_port,
    start,
    stop_all,
    torchrun_env,
)
from worker.runtime import contract

GUIDE = REPO / "docs" / "runtime.md"


def ddp_snippet() -> str:
    section = GUIDE.read_text(encoding="utf-8").split("### DDP scripts", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, "docs/runtime.md's DDP section has no python block"
    return match.group(1)


def test_the_runtime_guides_ddp_script_runs_without_a_submitted_batch_size(
    tmp_path: Path,
) -> None:
    """Two ranks run the guide's script to the end of a 4-iteration job and exit 0."""
    script = tmp_path / "train.py"
    script.write_text(ddp_snippet(), encoding="utf-8")
    port = free_port()
    processes: list[JobProcess] = []
    try:
        for rank in range(2):
            env = contract_env(
                torchrun_env(2, rank, port),
                {contract.TOTAL_ITERATIONS: 4, contract.CHECKPOINT_DIR: tmp_path / "ckpt"},
            )
            env.pop(contract.GLOBAL_BATCH_SIZE, None)
            processes.append(start(script, env, tmp_path / "run", name=f"rank{rank}"))
        for process in processes:
            assert process.finish().exit_reason == "completed"
    finally:
        stop_all(processes)


def test_an_uncaught_contract_error_is_written_for_the_agent(tmp_path: Path) -> None:
    """A script that reads the settings without a default batch size, under an agent
    (HADAR_ERROR_FILE set), exits non-zero and leaves the error and its fix in the file."""
    error_file = tmp_path / "contract-error-rank0.txt"
    env = contract_env({contract.TOTAL_ITERATIONS: 4, contract.ERROR_FILE: error_file})
    env.pop(contract.GLOBAL_BATCH_SIZE, None)
    code = (
        "import os\n"
        "from worker.runtime import RuntimeSettings\n"
        "RuntimeSettings.from_env(os.environ)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "ContractError" in done.stderr
    written = error_file.read_text()
    assert written.startswith(
        "HADAR_GLOBAL_BATCH_SIZE is not set: submit the job with --batch-size"
    )
