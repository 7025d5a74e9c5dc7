"""A small PyTorch DDP job (Gloo, CPU) for `dtrain launch` tests: trains a
linear model for a few steps on rank-dependent data and prints a checksum of
the final weights, which must agree across ranks."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(100 + rank)
for _ in range(5):
    x = torch.randn(16, 8, generator=gen)
    loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
checksum = sum(p.detach().double().sum().item() for p in model.parameters())
print(f"rank {rank}/{world} checksum {checksum:.10f}", flush=True)
dist.destroy_process_group()
