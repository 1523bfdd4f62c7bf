"""Overhead of the runtime helper: a built-in workload under TrainingRun vs a plain loop.

Both loops train the same model on the same synthetic data in this process, and they run
*interleaved*: one plain iteration, one managed iteration, one plain, ... so that load from
other processes on the machine hits both alike. A managed iteration is timed from the end of
one plain iteration to the start of the next, so it includes everything the helper does
between iterations (stop checks, progress records every second, pacing checks). The managed
run writes progress records and checkpoints at the end of its lease like a job; the final
checkpoint and exit record are timed apart. Figures: medians of per-iteration times.

    .venv/bin/python bench/bench_runtime.py [--workloads resnet,lstm] [--iterations 200]
        [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from worker.runtime import TrainingRun, contract
from worker.workloads.registry import WORKLOADS, Workload, get_workload
from worker.workloads.runner import build, train_step
from worker.workloads.synthetic import synthetic_batch

WARMUP = 5


@dataclass
class Timings:
    plain: list[float]
    managed: list[float]
    closing: float


def interleaved(workload: Workload, iterations: int, directory: Path) -> Timings:
    plain_model, plain_optimizer = build(workload, seed=0)
    batch_size = workload.default_batch_size

    def plain_iteration(iteration: int) -> float:
        began = time.perf_counter()
        plain_optimizer.zero_grad(set_to_none=True)
        data = synthetic_batch(
            workload, seed=0, stream=0, iteration=iteration, start=0, stop=batch_size
        )
        torch.autograd.backward(workload.loss(plain_model, data))
        plain_optimizer.step()
        return time.perf_counter() - began

    model, optimizer = build(workload, seed=0)
    env = {
        contract.TOTAL_ITERATIONS: str(WARMUP + iterations),
        contract.GLOBAL_BATCH_SIZE: str(batch_size),
        contract.CHECKPOINT_DIR: str(directory),
        contract.PROGRESS_FILE: str(directory / "progress.jsonl"),
        contract.DEVICE: "cpu",
    }
    run = TrainingRun.from_env(model, optimizer, env=env, handle_signals=False)
    plain: list[float] = []
    managed: list[float] = []
    last_plain_end = time.perf_counter()
    for step in run.steps():
        train_step(workload, run, step)
        managed_took = time.perf_counter() - last_plain_end
        plain_took = plain_iteration(step.iteration)
        last_plain_end = time.perf_counter()
        if step.iteration >= WARMUP:
            managed.append(managed_took)
            plain.append(plain_took)
    closing = time.perf_counter() - last_plain_end
    # The two loops computed the same thing: a sanity check that the comparison is fair.
    for key, value in plain_model.state_dict().items():
        torch.testing.assert_close(model.state_dict()[key], value)
    return Timings(plain, managed, closing)


def fixed_cost(iterations: int) -> tuple[float, float]:
    """Median per-iteration seconds (plain, managed) of a 2-parameter model: what the helper
    adds to every iteration whatever the model."""
    plain_model = torch.nn.Linear(1, 1)
    plain_optimizer = torch.optim.SGD(plain_model.parameters(), lr=0.01)
    model = torch.nn.Linear(1, 1)
    x = torch.ones(4, 1)
    env = {contract.TOTAL_ITERATIONS: str(iterations), contract.GLOBAL_BATCH_SIZE: "4"}
    run = TrainingRun.from_env(
        model, torch.optim.SGD(model.parameters(), lr=0.01), env=env, handle_signals=False
    )
    plain: list[float] = []
    managed: list[float] = []
    last_plain_end = time.perf_counter()
    for step in run.steps():
        for micro in step.micro_batches():
            micro.backward(run.model(x).mean())
        managed.append(time.perf_counter() - last_plain_end)
        began = time.perf_counter()
        plain_optimizer.zero_grad(set_to_none=True)
        torch.autograd.backward(plain_model(x).mean())
        plain_optimizer.step()
        last_plain_end = time.perf_counter()
        plain.append(last_plain_end - began)
    return statistics.median(plain), statistics.median(managed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), CPU")
    print(
        f"{'workload':16} {'batch':>5} {'plain ms/it':>12} {'managed ms/it':>14} "
        f"{'overhead':>9} {'total overhead':>15} {'final ckpt ms':>14}"
    )
    for name in args.workloads.split(","):
        workload = get_workload(name)
        with tempfile.TemporaryDirectory() as directory:
            timings = interleaved(workload, args.iterations, Path(directory))
        p = statistics.median(timings.plain)
        m = statistics.median(timings.managed)
        total = sum(timings.managed) / sum(timings.plain) - 1
        print(
            f"{name:16} {workload.default_batch_size:>5} {p * 1e3:>12.2f} {m * 1e3:>14.2f} "
            f"{(m / p - 1) * 100:>8.1f}% {total * 100:>14.1f}% {timings.closing * 1e3:>14.1f}"
        )
    p, m = fixed_cost(20 * args.iterations)
    print(
        f"fixed cost per iteration (2-parameter model): plain {p * 1e6:.1f} us, "
        f"managed {m * 1e6:.1f} us, helper adds {(m - p) * 1e6:.1f} us"
    )


if __name__ == "__main__":
    main()
