"""What one move costs a job: stop with a checkpoint, then start again from it.

Each built-in workload runs as the agent runs it (``python -m worker.workloads NAME``, one
process, a checkpoint directory, the fake-GPU CPU device) until it has trained a few
iterations; then it gets SIGTERM and the time to its exit (finish the iteration, write the
checkpoint) is the *stop* figure. A new process of the same job is started at once; the
time until it reports progress past the checkpoint (interpreter and torch start, model
build, checkpoint load, first iteration) is the *start* figure. Their sum is the restart
cost the scheduler weighs a move against (``restart_cost_s``). Figures: medians over
``--repeats`` runs.

    .venv/bin/python bench/bench_restart.py [--workloads resnet,lstm] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from worker.runtime import contract
from worker.workloads.registry import WORKLOADS

REPO = Path(__file__).resolve().parents[1]
DEADLINE_S = 120.0


def _records(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line being written
    return out


def _wait(condition: object, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.005)
    raise RuntimeError(f"timed out waiting for {what}")


def _start(name: str, root: Path, lease: int, done: int) -> tuple[subprocess.Popen[bytes], Path]:
    progress = root / f"lease{lease}.jsonl"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        contract.JOB_ID: "1",
        contract.TOTAL_ITERATIONS: "1000000",
        contract.ITERATIONS_DONE: str(done),
        contract.CHECKPOINT_DIR: str(root / "ckpt"),
        contract.PROGRESS_FILE: str(progress),
        contract.PROGRESS_INTERVAL_S: "0.05",
        contract.DEVICE: "cpu",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "worker.workloads", name],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return process, progress


def measure(name: str) -> tuple[float, float]:
    """(stop seconds, start seconds) of one move of workload ``name``."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        first, progress = _start(name, root, 0, 0)
        try:
            _wait(
                lambda: any(int(r["iterations_done"]) >= 5 for r in _records(progress)),  # type: ignore[call-overload]
                f"{name} to train",
            )
            stopped_at = time.monotonic()
            first.send_signal(signal.SIGTERM)
            first.wait(DEADLINE_S)
            stop_s = time.monotonic() - stopped_at
        finally:
            first.kill()
        exit_record = _records(progress)[-1]
        done = int(exit_record["checkpoint_iterations"])  # type: ignore[call-overload]
        started_at = time.monotonic()
        second, resumed = _start(name, root, 1, done)
        try:
            _wait(
                lambda: any(int(r["iterations_done"]) > done for r in _records(resumed)),  # type: ignore[call-overload]
                f"{name} to resume",
            )
            start_s = time.monotonic() - started_at
        finally:
            second.kill()
            second.wait()
    return stop_s, start_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(sorted(WORKLOADS)))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'workload':<16} {'stop s':>8} {'start s':>8} {'restart s':>10}")
    totals = []
    for name in args.workloads.split(","):
        runs = [measure(name) for _ in range(args.repeats)]
        stop = statistics.median(r[0] for r in runs)
        start = statistics.median(r[1] for r in runs)
        totals.append(stop + start)
        print(f"{name:<16} {stop:8.2f} {start:8.2f} {stop + start:10.2f}")
    print(f"{'median':<16} {'':>8} {'':>8} {statistics.median(totals):10.2f}")


if __name__ == "__main__":
    main()
