#!/usr/bin/env python3
"""The PyTorch DDP peer of `dtrain bench train`: the same training step
(ResNet with the ImageNet stem, SGD lr 0.1 momentum 0.9 weight decay 5e-4,
cross-entropy on float32 logits, bf16 autocast or fp32, optional
channels_last) on one fixed random batch per rank that lives on the GPU, so
that no host work happens per step. DDP over NCCL, one process per GPU,
default bucket_cap_mb (25). PyTorch's default TF32 and cudnn.benchmark
settings are left alone; --cudnn-benchmark turns cudnn.benchmark on for an
extra comparison.

--compile MODE runs the same step through torch.compile the way a user
would: on one GPU without DDP, the model, its autocast and the loss in one
compiled function (MODE reduce-overhead: CUDA graphs); on several GPUs the
DDP-wrapped model compiled (MODE max-autotune-no-cudagraphs, since CUDA
graphs do not work under DDP), the loss eager. A compiled peer steps a fused
SGD (fused=True) where this PyTorch has one; the eager peer keeps the
default (foreach) SGD.

    torchrun --standalone --nproc-per-node 4 bench/peers/torch_ddp_bench.py \
        --model resnet50 --image-size 32 --batch-size 64 --precision fp32 \
        --steps 100 --warmup 20 --json

The model is torchvision.models.<model>(num_classes=--classes) when
torchvision imports ("model_impl": "torchvision"), else the same network
built here from the blocks of bench/peers/torch_ddp_train.py
("model_impl": "local"). --steps counts the timed steps, after --warmup
untimed ones. Rank 0 prints one JSON object (--json) or one line:
step_ms is the mean step time of the slowest rank, samples_per_s is
world * batch * steps / (the slowest rank's elapsed time).
"""
import os

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS = {"resnet18": [2, 2, 2, 2], "resnet34": [3, 4, 6, 3], "resnet50": [3, 4, 6, 3]}


def local_resnet(name, classes):
    """torchvision's ResNet (ImageNet stem: 7x7/2 conv, 3x3/2 max-pool) from
    the BasicBlock/Bottleneck of torch_ddp_train.py, whose ResNet has only
    the CIFAR stem."""
    spec = importlib.util.spec_from_file_location("torch_ddp_train", os.path.join(HERE, "torch_ddp_train.py"))
    peer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peer)
    block = peer.Bottleneck if name == "resnet50" else peer.BasicBlock

    class ImageNetResNet(peer.ResNet):
        def __init__(self):
            super().__init__(block, LAYERS[name], 3, classes)
            # Replacing conv1 keeps its place in the module (and parameter) order.
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            for m in self.modules():  # torchvision's init
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)

        def forward(self, x):
            x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    return ImageNetResNet()


def build_model(name, classes):
    try:
        import torchvision
    except Exception:  # not installed, or built against another torch
        return local_resnet(name, classes), "local"
    return getattr(torchvision.models, name)(num_classes=classes), "torchvision"


def nccl_version():
    v = torch.cuda.nccl.version()
    if isinstance(v, int):  # old PyTorch: 2708 or 21903
        return f"{v // 1000}.{v % 1000 // 100}.{v % 100}" if v < 10000 else f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    return ".".join(map(str, v))


def tf32_settings():
    try:
        return {"tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "tf32_cudnn": torch.backends.cudnn.allow_tf32}
    except Exception:
        return {}


def write_kernel_csv(path, step, steps=2):
    """Every GPU kernel of `steps` steps, one row each: "ID", "Kernel Name",
    "gpu__time_duration.sum" (a unit row, then nanoseconds), as ncu --csv
    --page raw writes them."""
    import csv
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    with open(path, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(["ID", "Kernel Name", "gpu__time_duration.sum"])
        w.writerow(["", "", "nsecond"])
        n = 0
        for evt in prof.events():
            if getattr(evt, "device_type", None) != torch.autograd.DeviceType.CUDA:
                continue
            if evt.name.startswith(("Memcpy", "Memset", "cudaGraph")):
                continue
            w.writerow([n, evt.name, int(evt.time_range.elapsed_us() * 1000)])
            n += 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet50", choices=sorted(LAYERS))
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=64, help="per GPU")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--steps", type=int, default=100, help="timed steps, after --warmup")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--cudnn-benchmark", action="store_true",
                   help="set torch.backends.cudnn.benchmark = True (default: PyTorch's default)")
    p.add_argument("--compile", default="none",
                   choices=["none", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"],
                   help="torch.compile mode of the step (default none: eager)")
    p.add_argument("--profile-range", action="store_true",
                   help="cudaProfilerStart/Stop around the timed steps (for ncu --profile-from-start off, "
                        "nsys --capture-range=cudaProfilerApi)")
    p.add_argument("--kernel-csv", metavar="PATH",
                   help="after timing, two more steps under torch.profiler (CUPTI: kernels replayed from CUDA "
                        "graphs included); each kernel's name and duration to PATH in Nsight Compute's raw CSV "
                        "columns, for bench/gpu/kernel_table.py")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.steps < 1 or a.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")

    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.cudnn_benchmark:
        torch.backends.cudnn.benchmark = True

    torch.manual_seed(0)
    model, impl = build_model(a.model, a.classes)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(device).to(memory_format=fmt)
    compiled = a.compile != "none"
    # One GPU and compiled: no DDP wrapper (a single-GPU user has none).
    ddp = model if compiled and world == 1 else nn.parallel.DistributedDataParallel(model, device_ids=[local])
    optimizer = "foreach"
    opt = None
    if compiled:
        try:
            opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4, fused=True)
            optimizer = "fused"
        except (TypeError, RuntimeError):
            opt = None
    if opt is None:
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)

    # One fixed batch per rank, made on the GPU once.
    g = torch.Generator(device=device).manual_seed(1 + rank)
    images = torch.randn(a.batch_size, 3, a.image_size, a.image_size, device=device, generator=g)
    images = images.contiguous(memory_format=fmt)
    labels = torch.randint(0, a.classes, (a.batch_size,), device=device, generator=g)

    def autocast():
        if a.precision == "bf16":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def forward_loss(x, y):
        with autocast():
            logits = ddp(x)
        return F.cross_entropy(logits.float(), y)

    if compiled and world == 1:
        forward_loss = torch.compile(forward_loss, mode=a.compile)
    elif compiled:
        net = torch.compile(ddp, mode=a.compile)

        def forward_loss(x, y):  # noqa: F811
            with autocast():
                logits = net(x)
            return F.cross_entropy(logits.float(), y)

    mark_step = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
    graphs = compiled and "cudagraphs" not in a.compile and a.compile in ("reduce-overhead", "max-autotune")

    def step():
        if graphs and mark_step is not None:
            mark_step()
        opt.zero_grad(set_to_none=True)
        loss = forward_loss(images, labels)
        loss.backward()
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    dist.barrier(device_ids=[local])
    if a.profile_range:
        torch.cuda.cudart().cudaProfilerStart()
    start = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    if a.profile_range:
        torch.cuda.cudart().cudaProfilerStop()

    if a.kernel_csv and rank == 0:
        write_kernel_csv(a.kernel_csv, step)

    per_rank = [torch.zeros(1, dtype=torch.float64, device=device) for _ in range(world)]
    dist.all_gather(per_rank, torch.tensor([elapsed], dtype=torch.float64, device=device))
    per_rank = [t.item() for t in per_rank]
    slowest = max(per_rank)
    final_loss = loss.item()
    if rank == 0:
        out = {"peer": "torch-ddp" if not compiled else f"torch-compile-{a.compile}", "compile": a.compile,
               "ddp": ddp is not model, "optimizer": optimizer, "model": a.model, "model_impl": impl, "image_size": a.image_size,
               "batch_size": a.batch_size, "precision": a.precision, "channels_last": a.channels_last,
               "gpus": world, "steps": a.steps, "warmup": a.warmup,
               "step_ms": slowest / a.steps * 1e3,
               "samples_per_s": world * a.batch_size * a.steps / slowest,
               "rank_step_ms": [s / a.steps * 1e3 for s in per_rank],
               "elapsed_s": slowest, "final_loss": final_loss,
               "torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl_version(),
               "device": torch.cuda.get_device_name(),
               "cudnn_benchmark": torch.backends.cudnn.benchmark, **tf32_settings()}
        if a.json:
            print(json.dumps(out), flush=True)
        else:
            print(f"{out['peer']} {a.model} ({impl}) {a.image_size}x{a.image_size} batch {a.batch_size}/GPU "
                  f"{a.precision}{' channels-last' if a.channels_last else ''} on {world} GPU(s): "
                  f"{out['step_ms']:.2f} ms/step, {out['samples_per_s']:,.0f} samples/s "
                  f"({a.steps} steps after {a.warmup} warm-up; torch {torch.__version__}, "
                  f"NCCL {out['nccl']}, {out['device']})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
