"""A HadarE copy: trains the recommendation workload under the helper and saves, for the test,
its parameters just before the end-of-lease average and just after."""

from __future__ import annotations

import os
import sys

import torch

from worker.runtime import TrainingRun, contract
from worker.workloads.registry import get_workload
from worker.workloads.runner import build, train_step


def main(output: str) -> None:
    workload = get_workload("recommendation")
    model, optimizer = build(workload, seed=int(os.environ.get(contract.SEED, "0")))
    run = TrainingRun.from_env(model, optimizer)
    before: dict[str, torch.Tensor] = {}
    for step in run.steps():
        train_step(workload, run, step)
        before = {key: value.clone() for key, value in model.state_dict().items()}
    torch.save({"before": before, "after": model.state_dict()}, output)


if __name__ == "__main__":
    main(sys.argv[1])
