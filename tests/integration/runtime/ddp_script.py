"""A managed script in the ordinary DDP style: the model is wrapped in DistributedDataParallel
over the group the runtime set up, and the helper handles everything else."""

from __future__ import annotations

import os

from torch.nn.parallel import DistributedDataParallel

from worker.runtime import RuntimeSettings, TrainingRun, contract, init_distributed
from worker.workloads.registry import get_workload
from worker.workloads.runner import build, train_step


def main() -> None:
    workload = get_workload("resnet")
    context = init_distributed(RuntimeSettings.from_env(os.environ))
    model, optimizer = build(workload, seed=int(os.environ.get(contract.SEED, "0")))
    ddp = DistributedDataParallel(model.to(context.device), process_group=context.process_group)
    run = TrainingRun.from_env(ddp, optimizer)
    for step in run.steps():
        train_step(workload, run, step)


if __name__ == "__main__":
    main()
