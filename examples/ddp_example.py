"""A small PyTorch DDP job to try `dtrain launch` (or torchrun) with:

    dtrain launch --nproc-per-node 2 examples/ddp_example.py

Each worker reads its place in the job from the environment the launcher
gives it (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), joins the
process group (NCCL when it has a GPU of its own, else Gloo on the CPU),
trains a tiny model for a few steps on data of its own, and prints its loss.
At the end every rank prints a checksum of its weights: DDP keeps the
replicas equal, so the checksums agree.
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main():
    parser = argparse.ArgumentParser(description="a tiny DDP job for dtrain launch")
    parser.add_argument("--steps", type=int, default=10, help="training steps (default 10)")
    args = parser.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    # Every rank must pick the same backend: NCCL only when each worker of
    # this node has a GPU of its own.
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    use_cuda = torch.cuda.is_available() and torch.cuda.device_count() >= local_world
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if use_cuda else "gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)

    # Every rank learns the same linear target from samples of its own.
    weights = torch.linspace(-1.0, 1.0, 16).unsqueeze(1)
    generator = torch.Generator().manual_seed(1000 + rank)
    for step in range(args.steps):
        x = torch.randn(32, 16, generator=generator)
        y = x @ weights
        loss = torch.nn.functional.mse_loss(ddp(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()  # DDP averages the gradients over the ranks here
        optimizer.step()
        print(f"rank {rank}/{world} step {step} loss {loss.item():.4f}", flush=True)

    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    print(f"rank {rank}/{world} done, weights checksum {checksum:.8f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
