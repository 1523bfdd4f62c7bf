"""Overhead of the runtime helper: a built-in workload under TrainingRun vs a plain loop.

Both loops train the same model on the same synthetic data in this process; runs alternate
(plain, managed, plain, managed, ...) so drift in machine load hits both alike, and the median
of the repeats is reported. The managed run writes progress records (every second) and keeps
checkpointing for the end of the lease, as a job would; the final checkpoint is timed apart.

    .venv/bin/python bench/bench_runtime.py [--workloads resnet,lstm] [--iterations 60]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from worker.runtime import TrainingRun, contract
from worker.workloads.registry import WORKLOADS, get_workload
from worker.workloads.runner import build, train_plain
from worker.workloads.synthetic import synthetic_batch

WARMUP = 5


def managed_seconds(name: str, iterations: int, directory: Path) -> tuple[float, float]:
    """(seconds for the timed iterations, seconds from the last update to the exit record)."""
    workload = get_workload(name)
    model, optimizer = build(workload, seed=0)
    env = {
        contract.TOTAL_ITERATIONS: str(WARMUP + iterations),
        contract.GLOBAL_BATCH_SIZE: str(workload.default_batch_size),
        contract.CHECKPOINT_DIR: str(directory),
        contract.PROGRESS_FILE: str(directory / "progress.jsonl"),
        contract.DEVICE: "cpu",
    }
    run = TrainingRun.from_env(model, optimizer, env=env, handle_signals=False)
    began = ended = 0.0
    for step in run.steps():
        if step.iteration == WARMUP:
            began = time.perf_counter()
        for micro in step.micro_batches():
            batch = synthetic_batch(
                workload,
                seed=run.seed,
                stream=step.stream,
                iteration=step.iteration,
                start=micro.start,
                stop=micro.stop,
                device=run.device,
            )
            micro.backward(workload.loss(run.model, batch))
        ended = time.perf_counter()
    return ended - began, time.perf_counter() - ended


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU")
    print(
        f"{'workload':16} {'batch':>5} {'plain ms/it':>12} {'managed ms/it':>14} "
        f"{'overhead':>9} {'final ckpt ms':>14}"
    )
    for name in args.workloads.split(","):
        workload = get_workload(name)
        plain, managed, final = [], [], []
        for repeat in range(args.repeats):
            result = train_plain(workload, iterations=args.iterations, warmup=WARMUP)
            plain.append(result.seconds / args.iterations)
            with tempfile.TemporaryDirectory() as directory:
                seconds, closing = managed_seconds(
                    name, args.iterations, Path(directory) / str(repeat)
                )
            managed.append(seconds / args.iterations)
            final.append(closing)
        p, m = statistics.median(plain), statistics.median(managed)
        print(
            f"{name:16} {workload.default_batch_size:>5} {p * 1e3:>12.2f} {m * 1e3:>14.2f} "
            f"{(m / p - 1) * 100:>8.1f}% {statistics.median(final) * 1e3:>14.1f}"
        )


if __name__ == "__main__":
    main()
