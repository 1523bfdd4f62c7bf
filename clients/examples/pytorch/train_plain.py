"""Train a small classifier on a synthetic data set."""

import argparse

import torch
from torch import nn
from torch.nn import functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--iterations", type=int, default=500)
args = parser.parse_args()

torch.manual_seed(0)
features = torch.randn(10_000, 20)
labels = (features[:, 0] + features[:, 1] > 0).long()

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.iterations)

for iteration in range(args.iterations):
    index = torch.randint(len(features), (args.batch_size,))
    x, y = features[index].to(device), labels[index].to(device)
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    if iteration % 100 == 0:
        print(f"iteration {iteration}: loss {loss.item():.4f}")

torch.save(model.state_dict(), "model.pt")
