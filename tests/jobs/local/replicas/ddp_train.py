"""A toy DDP job (gloo): every rank starts from its own random weights and trains on its own data;
DDP's broadcast and gradient all-reduce must leave all ranks with the same parameters.

Writes `{out}/rank-{RANK}.json`: digests of the initial and final parameters, the losses, and the
samples per second this rank processed (the benchmark reads that).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from toy_model import make_batch, make_model


def digest(model: torch.nn.Module) -> str:
    return hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE from the runner
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1000 + rank)  # different initial weights on every rank
    model = make_model()
    initial = digest(model)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(rank)  # different data on every rank
    losses = []
    started = time.perf_counter()
    for _ in range(args.steps):
        x, y = make_batch(args.batch, generator)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    seconds = time.perf_counter() - started
    report = {
        "rank": rank,
        "world_size": world,
        "env_rank": int(os.environ["RANK"]),
        "initial": initial,
        "final": digest(model),
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "samples": args.steps * args.batch,
        "seconds": seconds,
    }
    with open(os.path.join(args.out, f"rank-{rank}.json"), "w") as out:
        json.dump(report, out)
    dist.barrier()  # nobody exits (and gets its peers stopped) before every report is written
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
