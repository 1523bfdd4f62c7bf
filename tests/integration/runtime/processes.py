"""Starting ``python -m worker.workloads`` processes the way the agent does, for tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from worker.runtime import contract
from worker.runtime.checkpoint import CheckpointStore, job_directory
from worker.runtime.contract import ProgressRecord
from worker.runtime.progress import read_progress

REPO = Path(__file__).resolve().parents[3]
DEADLINE_S = 60.0


def contract_env(*layers: Mapping[str, object]) -> dict[str, str]:
    """The parent's environment, one CPU thread (determinism, shared cores), then ``layers``."""
    env = dict(os.environ)
    env.update(
        {
            "PYTHONPATH": str(REPO),
            "OMP_NUM_THREADS": "1",
            contract.DETERMINISTIC: "1",
            contract.DEVICE: "cpu",
            contract.PROGRESS_INTERVAL_S: "0.02",
        }
    )
    for layer in layers:
        env.update({name: str(value) for name, value in layer.items()})
    return env


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port free now and not handed out before in this process: the kernel may offer a
    just-released port again before the previous job's rank 0 has bound it."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port: int = probe.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def torchrun_env(world_size: int, rank: int, port: int) -> dict[str, str]:
    return {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(world_size),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world_size),
    }


@dataclass
class JobProcess:
    popen: subprocess.Popen[bytes]
    progress_file: Path
    log_file: Path

    def records(self) -> list[ProgressRecord]:
        return read_progress(self.progress_file)

    def wait_for(
        self, condition: Callable[[ProgressRecord], bool], timeout: float = DEADLINE_S
    ) -> ProgressRecord:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for record in reversed(self.records()):
                if condition(record):
                    return record
            if self.popen.poll() is not None:
                raise AssertionError(f"process exited ({self.popen.returncode}): {self.log()}")
            time.sleep(0.01)
        raise AssertionError(f"condition not reached in {timeout} s: {self.log()}")

    def terminate(self) -> None:
        self.popen.send_signal(signal.SIGTERM)

    def finish(self, timeout: float = DEADLINE_S) -> ProgressRecord:
        """Waits for a clean exit and returns the final ``exit`` record."""
        try:
            code = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
            raise AssertionError(f"no exit in {timeout} s: {self.log()}") from None
        assert code == 0, f"exit code {code}: {self.log()}"
        last = self.records()[-1]
        assert last.event == "exit", last
        return last

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")[-3000:]


def start(
    workload: str | Path,
    env: Mapping[str, str],
    cwd: Path,
    name: str = "rank0",
    args: Sequence[str] = (),
) -> JobProcess:
    """Runs ``python -m worker.workloads WORKLOAD``, or the script at path ``workload``."""
    cwd.mkdir(parents=True, exist_ok=True)
    progress = Path(env.get(contract.PROGRESS_FILE) or cwd / f"{name}.jsonl")
    log_file = cwd / f"{name}.log"
    with log_file.open("wb") as log:
        popen = subprocess.Popen(
            (
                [sys.executable, str(workload), *args]
                if isinstance(workload, Path)
                else [sys.executable, "-m", "worker.workloads", workload, *args]
            ),
            env={**env, contract.PROGRESS_FILE: str(progress)},
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return JobProcess(popen, progress, log_file)


def stop_all(processes: list[JobProcess]) -> None:
    """Cleanup for failed tests: no process outlives its test."""
    for process in processes:
        if process.popen.poll() is None:
            process.popen.kill()
            process.popen.wait()


def final_model(checkpoint_root: Path, job_id: str) -> dict[str, torch.Tensor]:
    latest = CheckpointStore(job_directory(checkpoint_root, job_id)).load_latest()
    assert latest is not None, f"no checkpoint for job {job_id} under {checkpoint_root}"
    model: dict[str, torch.Tensor] = latest.state["model"]
    return model
