"""A toy data-parallel training script: runs as every replica of a PyTorchJob (or locally, one process
per replica), with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set by the operator."""

import argparse

import torch
import torch.distributed as dist
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.05)
args = parser.parse_args()

dist.init_process_group("gloo")  # "nccl" on GPUs
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(rank)  # different data per rank; DDP keeps the parameters in step
model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
true_weights = torch.arange(8, dtype=torch.float32) / 8

for epoch in range(args.epochs):
    for _ in range(50):
        x = torch.randn(64, 8)
        noisy_targets = x @ true_weights + 0.1 * torch.randn(64)  # the best reachable loss is 0.01
        loss = nn.functional.mse_loss(model(x).squeeze(1), noisy_targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    # Katib's StdOut collector reads `name=value` lines.
    print(f"epoch={epoch} loss={loss.item():.4f}", flush=True)

print(f"rank {rank} of {world} done", flush=True)
dist.destroy_process_group()
