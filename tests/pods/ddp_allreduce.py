"""Shipped to every replica of the DDP tests: real torch.distributed over gloo, with the env its
operator gives the pod (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK; or torchrun's from PET_*).

Each rank adds rank + 1 in an all_reduce, then takes one DistributedDataParallel step from its own
seed and data: DDP broadcasts rank 0's weights and averages the gradients, so every rank prints the
same weights, which differ from rank 0's own start."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
torch.manual_seed(rank)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
model(torch.randn(16, 4)).square().mean().backward()
optimizer.step()
weights = ",".join(f"{w:.6f}" for w in model.module.weight.flatten().tolist())
print(f"rank {rank} of {world}: all_reduce sum={value.item():g} weights={weights}", flush=True)
dist.destroy_process_group()
