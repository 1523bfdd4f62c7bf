"""Train a small classifier on a synthetic data set."""

import argparse
import os

import torch
from torch import nn
from torch.nn import functional as F

from worker.runtime import RuntimeSettings, TrainingRun, seed_everything

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--iterations", type=int, default=500)
args = parser.parse_args()

seed_everything(0)  # the same data and initial weights in every process
features = torch.randn(10_000, 20)
labels = (features[:, 0] + features[:, 1] > 0).long()
order = torch.randperm(len(features))  # a fixed shuffle instead of random draws

# The job's iterations and batch size (hctl submit --iterations, --batch-size); the flags
# are the defaults for a run by hand.
settings = RuntimeSettings.from_env(
    os.environ, default_batch_size=args.batch_size, default_iterations=args.iterations
)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=settings.total_iterations)
run = TrainingRun(model, optimizer, settings, lr_scheduler=scheduler)

for step in run.steps():
    for micro in step.micro_batches():
        index = order[torch.tensor(micro.sample_indices) % len(features)]
        x, y = features[index].to(run.device), labels[index].to(run.device)
        micro.backward(F.cross_entropy(run.model(x), y))
    if run.is_main_process and step.iteration % 100 == 0:
        print(f"iteration {step.iteration}: loss {step.loss.item():.4f}")

if run.is_main_process and run.completed:
    torch.save(model.state_dict(), "model.pt")
