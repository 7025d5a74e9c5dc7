#!/usr/bin/env python3
"""PyTorch peer of `dtrain train` for throughput comparisons: DDP over NCCL,
the same ResNet (CIFAR stem) as dtrain's models/, SGD (momentum 0.9, weight
decay 5e-4), cross-entropy, autocast bf16/fp16 (with GradScaler) or fp32,
optional channels_last, on a synthetic uint8 data set fed like dtrain's
loader (background workers assemble normalised batches in pinned memory;
non-blocking copies to the GPU).

    torchrun --nproc-per-node 4 bench/peers/torch_ddp_train.py \
        --model resnet18 --batch-size 256 --precision bf16 --steps 120 --warmup 20

Rank 0 prints one JSON object: samples/s over the steps after --warmup
(all ranks, CUDA-synchronised at both ends).
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = None
        if stride != 1 or inplanes != planes * 4:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + identity)


class ResNet(nn.Module):
    """CIFAR stem: 3x3 stride-1 conv, no max-pool (as dtrain's models/)."""

    def __init__(self, block, layers, in_channels, classes):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.layer1 = self._stage(block, 64, layers[0], 1)
        self.layer2 = self._stage(block, 128, layers[1], 2)
        self.layer3 = self._stage(block, 256, layers[2], 2)
        self.layer4 = self._stage(block, 512, layers[3], 2)
        self.fc = nn.Linear(512 * block.expansion, classes)

    def _stage(self, block, planes, blocks, stride):
        layers = []
        for i in range(blocks):
            layers.append(block(self.inplanes, planes, stride if i == 0 else 1))
            self.inplanes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


MODELS = {"resnet18": (BasicBlock, [2, 2, 2, 2]), "resnet34": (BasicBlock, [3, 4, 6, 3]),
          "resnet50": (Bottleneck, [3, 4, 6, 3])}


class SyntheticBatches(torch.utils.data.Dataset):
    """Indexed by a list of sample indices; returns a whole normalised batch."""

    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def __len__(self):
        return self.images.shape[0]

    def __getitem__(self, indices):
        idx = torch.as_tensor(indices)
        x = self.images.index_select(0, idx).float().div_(255).sub_(0.5).div_(0.25)
        return x, self.labels.index_select(0, idx)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet18", choices=sorted(MODELS))
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--precision", default="bf16", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--samples", type=int, default=50000)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    torch.manual_seed(0)
    block, layers = MODELS[a.model]
    model = ResNet(block, layers, 3, 10).to(device)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[local], bucket_cap_mb=25)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    scaler = torch.amp.GradScaler("cuda", enabled=a.precision == "fp16")
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[a.precision]

    g = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (a.samples, 3, a.image_size, a.image_size), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (a.samples,), generator=g)
    sampler = torch.utils.data.DistributedSampler(range(a.samples), num_replicas=world, rank=rank, seed=0)
    batches = torch.utils.data.BatchSampler(sampler, a.batch_size, drop_last=True)
    loader = torch.utils.data.DataLoader(SyntheticBatches(images, labels), sampler=batches, batch_size=None,
                                         num_workers=a.workers, pin_memory=True, persistent_workers=True,
                                         prefetch_factor=4)
    step, epoch, start = 0, 0, None
    while step < a.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            if step == a.warmup:
                torch.cuda.synchronize()
                start = time.perf_counter()
            x = x.to(device, non_blocking=True).contiguous(memory_format=fmt)
            y = y.to(device, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
                loss = F.cross_entropy(ddp(x).float(), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            step += 1
            if step == a.steps:
                break
        epoch += 1
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    rate = (a.steps - a.warmup) * a.batch_size * world / seconds
    if rank == 0:
        print(json.dumps({"peer": "torch-ddp", "model": a.model, "world_size": world, "batch_size": a.batch_size,
                          "precision": a.precision, "channels_last": a.channels_last,
                          "steps": a.steps - a.warmup, "seconds": seconds, "samples_per_s": rate,
                          "torch": torch.__version__}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
