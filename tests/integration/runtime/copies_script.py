"""A HadarE copy: trains the recommendation workload under the helper and saves, for the test,
its parameters just before the end-of-lease average and just after."""

from __future__ import annotations

import os
import sys

import torch

from worker.runtime import TrainingRun, contract
from worker.workloads.registry import get_workload
from worker.workloads.runner import build
from worker.workloads.synthetic import synthetic_batch


def main(output: str) -> None:
    workload = get_workload("recommendation")
    model, optimizer = build(workload, seed=int(os.environ.get(contract.SEED, "0")))
    run = TrainingRun.from_env(model, optimizer)
    before: dict[str, torch.Tensor] = {}
    for step in run.steps():
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
        before = {key: value.clone() for key, value in model.state_dict().items()}
    torch.save({"before": before, "after": model.state_dict()}, output)


if __name__ == "__main__":
    main(sys.argv[1])
