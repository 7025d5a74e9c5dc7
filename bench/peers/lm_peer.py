#!/usr/bin/env python3
"""The PyTorch peer of `dtrain bench train` for language models: GPT-2 and
Llama (bench/peers/lm_models.py) trained the way a careful PyTorch user
trains them today, so that dtrain's speed is judged against a strong
baseline, not a naive one.

What one step is: next-token cross-entropy (on float32 logits) over one fixed
batch of random tokens per rank that lives on the device (no data loading is
measured), backward, AdamW (fused=True where this torch has it; lr 3e-4,
betas 0.9/0.95, weight decay 0.1), gradients set to None.

How it runs, per --parallel:
  none   one process, the plain model; bf16 autocast (fp32 parameters).
  ddp    DistributedDataParallel(gradient_as_bucket_view=True, static_graph=True
         unless --no-static-graph), bf16 autocast, fp32 parameters and fp32
         gradient all-reduce; torch.compile wraps the DDP module (Dynamo's
         DDPOptimizer splits the graph at bucket boundaries so all-reduce
         overlaps backward). At world size 1 the model is not wrapped: there is
         nothing to all-reduce and users do not pay DDP's hooks there.
  fsdp2  torchtitan's recipe: optional activation checkpointing per block,
         torch.compile per block, fully_shard per block then the root, with
         MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): bf16
         parameters in compute, fp32 sharded master weights and optimizer
         state, fp32 gradient reduce-scatter; no autocast.
TF32 is on for float32 matmuls. --compile picks torch.compile's mode
(default, or max-autotune-no-cudagraphs).

How it is timed: --warmup-steps untimed steps (torch.compile compiles in the
first), a barrier, then --steps timed steps between two device
synchronisations (wall clock, slowest rank), and CUDA events around each step
for the median. Rank 0 prints one line and, with --json FILE, writes one JSON
object on one line whose field names follow `dtrain bench train --json`'s
result rows where they mean the same thing (gpus, step_ms, samples_per_s,
tokens_per_s, mfu, peak_memory_bytes, flops_per_sample, loss, versions).

    torchrun --standalone --nproc-per-node 2 bench/peers/lm_peer.py \\
        --model gpt2-124m --seq-len 1024 --batch-size 16 --steps 50 --warmup-steps 10 \\
        --compile default --parallel ddp --json /tmp/peer.json
    python3 bench/peers/lm_peer.py --device cpu --compile none --parallel none \\
        --model gpt2-124m --layers 2 --dim 64 --heads 4 --vocab-size 512 --seq-len 64 \\
        --batch-size 2 --steps 3 --warmup-steps 1            # CPU smoke test, torch 1.13 too

Features this torch lacks (torch.compile, fused AdamW, SDPA) are left out with
a printed note, recorded in the JSON's "notes"; FSDP2 has no fallback.
"""
import argparse
import contextlib
import dataclasses
import gc
import inspect
import json
import os
import statistics
import sys
import time
from typing import Callable, List, Optional

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import float8_peer  # bench/peers/float8_peer.py: --float8
import lm_models  # bench/peers/lm_models.py, found beside this script

# Dense bf16 tensor-core peak per GPU, FLOP/s; the first name that occurs in
# torch.cuda.get_device_name() wins, so the more specific names come first.
PEAK_BF16_FLOPS = (
    ("H200", 989.4e12),
    ("H100 PCIe", 756.0e12),
    ("H100", 989.4e12),  # SXM
    ("A100", 312.0e12),
)

# The LMConfig fields a flag of the same name (--kv-heads for kv_heads) overrides.
SIZE_OVERRIDES = {
    "layers": "transformer blocks",
    "dim": "model width",
    "heads": "attention (query) heads",
    "kv_heads": "key/value heads (grouped-query attention)",
    "ffn_dim": "feed-forward hidden width",
    "vocab_size": "vocabulary size",
}

ADAMW = {"lr": 3e-4, "betas": (0.9, 0.95), "weight_decay": 0.1, "eps": 1e-8}


@dataclasses.dataclass
class Group:
    """This process's place in the job."""
    rank: int
    world: int
    local_rank: int
    device: torch.device
    initialized: bool  # a torch.distributed process group exists


@dataclasses.dataclass
class Timing:
    elapsed_s: float          # wall clock over the timed steps, this rank
    step_ms: List[float]      # per timed step, this rank


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gpt2-124m", help="a name lm_models.named_config knows (default gpt2-124m)")
    for field, meaning in SIZE_OVERRIDES.items():
        p.add_argument("--" + field.replace("_", "-"), type=int, default=None, help=f"{meaning} (default: the model's)")
    p.add_argument("--seq-len", type=int, default=1024, help="tokens per sequence")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per GPU per step")
    p.add_argument("--steps", type=int, default=50, help="timed steps")
    p.add_argument("--warmup-steps", "--warmup", dest="warmup_steps", type=int, default=10,
                   help="untimed steps first (torch.compile compiles in the first)")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp32"],
                   help="bf16: autocast (none, ddp) or bf16 parameters via MixedPrecisionPolicy (fsdp2)")
    p.add_argument("--compile", default="default", choices=["none", "default", "max-autotune-no-cudagraphs"],
                   help="torch.compile mode, or none (eager)")
    p.add_argument("--parallel", default="ddp", choices=["none", "ddp", "fsdp2"])
    p.add_argument("--activation-checkpointing", action="store_true", help="recompute each block in backward")
    p.add_argument("--float8", action="store_true",
                   help="the blocks' linear layers in float8 (torchao's tensorwise recipe, or float8_peer.py's own "
                        "Float8Linear over torch._scaled_mm where torchao is absent)")
    p.add_argument("--float8-recipe", default="tensorwise", choices=["tensorwise", "rowwise"],
                   help="with --float8: torchao's recipe of that name (rowwise: power-of-two scales per row of "
                        "each product's operands, e4m3 throughout), as dtrain's --fp8-recipe")
    p.add_argument("--no-static-graph", dest="static_graph", action="store_false",
                   help="DDP without static_graph=True")
    p.add_argument("--clip-grad-norm", type=float, default=0.0, help="clip gradients to this L2 norm (0: off)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="peak dense bf16 TFLOP/s per device for MFU (default: from the device name)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cuda-profiler-window", action="store_true",
                   help="cudaProfilerStart/Stop around the timed steps only (for ncu --profile-from-start off)")
    p.add_argument("--json", default="", metavar="FILE",
                   help="rank 0 writes the result here as one JSON line ('-': stdout)")
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup_steps < 0 or a.seq_len < 1 or a.batch_size < 1:
        p.error("--steps, --seq-len and --batch-size must be >= 1, --warmup-steps >= 0")
    return a


def add_run_flags(p: argparse.ArgumentParser) -> None:
    """The flags the parallel peers (lm_tp_peer.py, lm_pp_peer.py) share: device, MFU peak, seed, JSON file, --check."""
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    p.add_argument("--peak-tflops", type=float, default=None, help="peak bf16 TFLOP/s per GPU for MFU")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="", metavar="FILE", help="also write the JSON line here")
    p.add_argument("--check", action="store_true", help="2 steps, no warm-up, print each loss, no JSON")


def parse_run_flags(p: argparse.ArgumentParser, argv) -> argparse.Namespace:
    """Parses; --check means 2 steps and no warm-up."""
    a = p.parse_args(argv)
    if a.check:
        a.steps, a.warmup_steps = 2, 0
    return a


def note(notes: List[str], rank: int, text: str) -> None:
    notes.append(text)
    if rank == 0:
        print(f"lm_peer: note: {text}", file=sys.stderr, flush=True)


def init_group(a: argparse.Namespace) -> Group:
    """Joins the torchrun-style group (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR/PORT, as torchrun and `dtrain launch` set them); without
    them, one process, with a single-rank group where FSDP2 needs one."""
    launched = "WORLD_SIZE" in os.environ
    local = int(os.environ.get("LOCAL_RANK", 0))
    if a.device == "cuda":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    backend = "nccl" if device.type == "cuda" else "gloo"
    if launched:
        dist.init_process_group(backend)
    elif a.parallel == "fsdp2":
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    if not dist.is_initialized():
        return Group(0, 1, local, device, False)
    return Group(dist.get_rank(), dist.get_world_size(), local, device, True)


def configure_math(device: torch.device) -> str:
    """TF32 for float32 matmuls, as a careful user sets it; says how. Torch
    >= 2.9 has the fp32_precision API and Inductor raises when it finds it
    mixed with the legacy allow_tf32 flags, so the legacy ones are touched
    only where the new one is missing."""
    if device.type != "cuda":
        return "n/a"
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        matmul.fp32_precision = "tf32"
        return "matmul.fp32_precision=tf32"
    torch.set_float32_matmul_precision("high")
    return "set_float32_matmul_precision(high)"


def model_config(a: argparse.Namespace):
    """lm_models.named_config(--model) with the size flags and --seq-len applied."""
    overrides = {field: getattr(a, field) for field in SIZE_OVERRIDES if getattr(a, field) is not None}
    try:
        return lm_models.named_config(a.model, seq_len=a.seq_len, **overrides)
    except ValueError as e:
        raise SystemExit(f"lm_peer: {e}")


def transformer_blocks(model: nn.Module) -> nn.Module:
    """The container of the transformer blocks: model.transformer.h (GPT) or model.layers (Llama)."""
    transformer = getattr(model, "transformer", None)
    if transformer is not None and hasattr(transformer, "h"):
        return transformer.h
    if hasattr(model, "layers"):
        return model.layers
    raise AttributeError(f"{type(model).__name__}: no model.transformer.h or model.layers")


def replace_blocks(blocks: nn.Module, wrap: Callable[[nn.Module], nn.Module]) -> None:
    """Replaces every block by wrap(block) in place, keeping the container (ModuleList or ModuleDict)."""
    for name, block in list(blocks.named_children()):
        blocks.register_module(name, wrap(block))


def flops_params(model: nn.Module) -> int:
    """N of the FLOP count: the parameters that take part in matmuls. All
    parameters, less the embedding tables that are only looked up (GPT-2's
    token and position embeddings, Llama's token embeddings), plus the
    output head's weight, counted once, when it is the token embedding
    itself (tied: GPT-2, Llama 3.2 1B/3B). Norm gains and biases stay in (a
    rounding error next to the matmuls)."""
    params = {id(p): p.numel() for p in model.parameters()}
    for m in model.modules():
        if isinstance(m, nn.Embedding):
            params.pop(id(m.weight), None)
    head = model.output_weight()
    params[id(head)] = head.numel()
    return sum(params.values())


def training_flops_per_token(n_params: int, layers: int, dim: int, seq_len: int) -> float:
    """Training FLOPs per token, forward + backward: 6*N + 12*L*d*T.

    6*N: each of the N matmul parameters (see flops_params: embedding
    look-ups excluded, the output head included) does a multiply-add (2
    FLOPs) per token in forward and twice that in backward.
    12*L*d*T: attention's two T x T matmuls (scores Q K^T and their product
    with V) per layer, 2 FLOPs each per multiply-add, 3x for forward +
    backward: 2 * 2 * 3 * L * d * T, with d = heads * head_dim the model
    width and T the sequence length. Counted for the full T x T square (no
    halving for the causal mask), as PaLM (appendix B) and nanoGPT count it.
    Recomputation (activation checkpointing) is not counted: it is overhead,
    not model FLOPs.
    """
    return 6.0 * n_params + 12.0 * layers * dim * seq_len


def peak_flops(device: torch.device, override_tflops: Optional[float]) -> Optional[float]:
    """Peak dense bf16 FLOP/s of one device: --peak-tflops, else the table, else None (no MFU)."""
    if override_tflops:
        return override_tflops * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((flops for key, flops in PEAK_BF16_FLOPS if key in name), None)


def compile_available() -> bool:
    return hasattr(torch, "compile")


def apply_activation_checkpointing(blocks: nn.Module) -> None:
    """Full recomputation of each block in backward (torchtitan's "full" mode)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    replace_blocks(blocks, lambda b: checkpoint_wrapper(b, preserve_rng_state=False))


def compile_blocks(blocks: nn.Module, mode: str) -> None:
    replace_blocks(blocks, lambda b: torch.compile(b, mode=mode))


def fsdp2_api():
    """fully_shard and MixedPrecisionPolicy from where this torch keeps them."""
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except Exception:  # ImportError; torch 1.13's fsdp package does not even import on Python 3.11
        try:
            from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
        except Exception as e:
            raise SystemExit(f"lm_peer: --parallel fsdp2 needs torch.distributed.fsdp.fully_shard "
                             f"(PyTorch >= 2.4); torch {torch.__version__} has none ({e})")
    return fully_shard, MixedPrecisionPolicy


def apply_fsdp2(model: nn.Module, blocks: nn.Module, group: Group, precision: str) -> None:
    """fully_shard per block, then the root (embeddings, final norm, head),
    over a 1-D mesh of all ranks."""
    fully_shard, MixedPrecisionPolicy = fsdp2_api()
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh(group.device.type, (group.world,))
    if precision == "bf16":
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    else:
        mp = MixedPrecisionPolicy()
    for _, block in blocks.named_children():
        fully_shard(block, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over float32 logits, as torchtitan computes it."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))


class NextTokenLoss(nn.Module):
    """The model and its loss as one module, so that torch.compile (and DDP) see both."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return next_token_loss(self.model(tokens), targets)


def build_model(cfg, device: torch.device) -> nn.Module:
    """lm_models.build(cfg), made directly on the device where torch allows it."""
    make_here = hasattr(torch.device, "__enter__")  # torch >= 2.0: a device is a context manager
    with (device if make_here else contextlib.nullcontext()):
        model = lm_models.build(cfg)
    return model.to(device)


def parallelize(model: nn.Module, a: argparse.Namespace, group: Group, notes: List[str]) -> Callable:
    """Applies float8, activation checkpointing, compilation and data
    parallelism in the order the chosen recipe wants; returns
    forward(tokens, targets) -> loss (and sets a.after_step: what runs after
    each optimizer step, or None)."""
    blocks = transformer_blocks(model)
    a.after_step = None
    if getattr(a, "float8", False):
        a.after_step = float8_peer.apply_float8(model, blocks, a.parallel == "fsdp2",
                                                lambda text: note(notes, group.rank, text),
                                                recipe=getattr(a, "float8_recipe", "tensorwise"))
    if a.activation_checkpointing:
        apply_activation_checkpointing(blocks)
    compile_mode = None if a.compile == "none" else a.compile
    if a.parallel == "fsdp2":
        if compile_mode:
            compile_blocks(blocks, compile_mode)
        apply_fsdp2(model, blocks, group, a.precision)
        loss_fn = torch.compile(next_token_loss, mode=compile_mode) if compile_mode else next_token_loss

        def forward(tokens, targets):
            return loss_fn(model(tokens), targets)

        return forward
    module: nn.Module = NextTokenLoss(model)
    if a.parallel == "ddp" and group.world > 1:
        ids = [group.local_rank] if group.device.type == "cuda" else None
        module = nn.parallel.DistributedDataParallel(module, device_ids=ids, gradient_as_bucket_view=True,
                                                     static_graph=a.static_graph)
    elif a.parallel == "ddp":
        note(notes, group.rank, "ddp at world size 1: the plain model, no DDP wrapper (nothing to all-reduce)")
    return torch.compile(module, mode=compile_mode) if compile_mode else module


def make_optimizer(params, device: torch.device, notes: List[str], rank: int):
    """AdamW, fused where this torch and device have it, else foreach, else the for-loop kernels."""
    params = list(params)
    accepted = inspect.signature(torch.optim.AdamW).parameters
    for impl in ("fused", "foreach"):
        if impl not in accepted:
            note(notes, rank, f"AdamW({impl}=True) unavailable in torch {torch.__version__}")
            continue
        try:
            return torch.optim.AdamW(params, **ADAMW, **{impl: True}), impl
        except (RuntimeError, ValueError, TypeError) as e:
            note(notes, rank, f"AdamW({impl}=True) unavailable on {device.type} with torch {torch.__version__}: {e}")
    return torch.optim.AdamW(params, **ADAMW), "for-loop"


def autocast_context(a: argparse.Namespace, device: torch.device):
    """bf16 autocast for the fp32-parameter recipes; FSDP2 casts parameters instead."""
    if a.precision == "bf16" and a.parallel != "fsdp2":
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext


def synthetic_tokens(vocab: int, batch: int, seq_len: int, device: torch.device, seed: int):
    """One fixed batch of random tokens per rank, made on the device: inputs and next-token targets."""
    g = torch.Generator(device=device).manual_seed(seed)
    window = torch.randint(0, vocab, (batch, seq_len + 1), device=device, generator=g)
    return window[:, :-1].contiguous(), window[:, 1:].contiguous()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def barrier(group: Group) -> None:
    if group.initialized:
        if group.device.type == "cuda":
            dist.barrier(device_ids=[group.local_rank])
        else:
            dist.barrier()


def warm_up(step: Callable[[], None], steps: int, group: Group) -> float:
    """Runs the untimed steps (torch.compile compiles in the first); their wall-clock seconds."""
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(group.device)
    return time.perf_counter() - t0


def timed_steps(step: Callable[[], None], steps: int, group: Group) -> Timing:
    """The timed steps, after a barrier, between two synchronisations; CUDA
    events (the host clock on a CPU) around each step. Peak memory counts
    from here."""
    barrier(group)
    if group.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(group.device)
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
        start = time.perf_counter()
        marks[0].record()
        for i in range(steps):
            step()
            marks[i + 1].record()
        synchronize(group.device)
        elapsed = time.perf_counter() - start
        per_step = [marks[i].elapsed_time(marks[i + 1]) for i in range(steps)]
    else:
        stamps = [time.perf_counter()]
        for _ in range(steps):
            step()
            stamps.append(time.perf_counter())
        elapsed = stamps[-1] - stamps[0]
        per_step = [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])]
    return Timing(elapsed, per_step)


def max_over_ranks(values: List[float], group: Group) -> List[float]:
    """Element-wise maximum over the ranks (the values themselves on one process)."""
    if not group.initialized or group.world == 1:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=group.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def versions(device: torch.device) -> dict:
    v = {"torch": torch.__version__}
    if device.type == "cuda":
        v["device"] = torch.cuda.get_device_name(device)
        v["cuda_runtime"] = torch.version.cuda
        nccl = torch.cuda.nccl.version()
        v["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    else:
        v["device"] = "cpu"
    return v


@dataclasses.dataclass
class Measurement:
    """What one run measured; times and memory are the slowest (largest) rank's."""
    cfg: object               # the lm_models.LMConfig trained
    params: int               # all parameters
    params_flops: int         # N of the FLOP count (flops_params)
    optimizer_impl: str       # fused | foreach | for-loop
    elapsed_s: float          # the timed steps, wall clock
    warmup_s: float           # the warm-up steps, compilation included
    step_ms: List[float]      # each timed step
    peak_allocated: Optional[int]
    peak_reserved: Optional[int]
    loss: float               # mean over the timed steps, rank 0's batch


def feature_notes(a: argparse.Namespace, group: Group) -> List[str]:
    """Notes on what this torch lacks; drops --compile where there is no torch.compile."""
    notes: List[str] = []
    if a.compile != "none" and not compile_available():
        note(notes, group.rank, f"torch.compile unavailable in torch {torch.__version__}: running eagerly")
        a.compile = "none"
    if not hasattr(F, "scaled_dot_product_attention"):
        note(notes, group.rank, f"F.scaled_dot_product_attention unavailable in torch {torch.__version__}: "
                                "lm_models' own attention runs instead")
    return notes


def measure(a: argparse.Namespace, group: Group, notes: List[str]) -> Measurement:
    """Builds, parallelizes and trains the model; everything it built is gone when it returns."""
    cfg = model_config(a)
    model = build_model(cfg, group.device)
    params, params_flops = sum(p.numel() for p in model.parameters()), flops_params(model)
    forward = parallelize(model, a, group, notes)
    optimizer, optimizer_impl = make_optimizer(model.parameters(), group.device, notes, group.rank)
    autocast = autocast_context(a, group.device)
    tokens, targets = synthetic_tokens(cfg.vocab_size, a.batch_size, a.seq_len, group.device, a.seed + 1 + group.rank)
    loss_sum = torch.zeros((), device=group.device)
    trainable = [p for p in model.parameters() if p.requires_grad]

    def step():
        with autocast():
            loss = forward(tokens, targets)
        loss.backward()
        if a.clip_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(trainable, a.clip_grad_norm)
        optimizer.step()
        if a.after_step is not None:
            a.after_step()
        optimizer.zero_grad(set_to_none=True)
        loss_sum.add_(loss.detach())  # on the device: no synchronisation per step

    warmup_s = warm_up(step, a.warmup_steps, group)
    loss_sum.zero_()
    if getattr(a, "cuda_profiler_window", False) and group.device.type == "cuda":
        torch.cuda.cudart().cudaProfilerStart()
    timing = timed_steps(step, a.steps, group)
    if getattr(a, "cuda_profiler_window", False) and group.device.type == "cuda":
        torch.cuda.cudart().cudaProfilerStop()
    memory = [-1.0, -1.0]  # none on a CPU
    if group.device.type == "cuda":
        memory = [float(torch.cuda.max_memory_allocated(group.device)),
                  float(torch.cuda.max_memory_reserved(group.device))]
    elapsed, warmup_s, allocated, reserved = max_over_ranks([timing.elapsed_s, warmup_s] + memory, group)
    return Measurement(cfg, params, params_flops, optimizer_impl, elapsed, warmup_s,
                       max_over_ranks(timing.step_ms, group),
                       int(allocated) if allocated >= 0 else None, int(reserved) if reserved >= 0 else None,
                       loss_sum.item() / a.steps)


def result_record(a: argparse.Namespace, group: Group, m: Measurement, tf32: str, notes: List[str]) -> dict:
    """The JSON object: `dtrain bench train --json`'s row names where they mean the same, and the peer's extras."""
    cfg = m.cfg
    flops_per_token = training_flops_per_token(m.params_flops, cfg.layers, cfg.dim, a.seq_len)
    tokens_per_s = a.batch_size * a.seq_len * group.world * a.steps / m.elapsed_s
    peak = peak_flops(group.device, a.peak_tflops)
    return {
        "peer": "torch",
        "bench": "train",
        "model": a.model,
        "gpus": group.world,
        "device_type": group.device.type,
        "backend": dist.get_backend() if group.initialized else "none",
        "step_ms": m.elapsed_s * 1e3 / a.steps,
        "step_ms_p50": statistics.median(m.step_ms),
        "samples_per_s": a.batch_size * group.world * a.steps / m.elapsed_s,
        "tokens_per_s": tokens_per_s,
        "tokens_per_s_per_gpu": tokens_per_s / group.world,
        "flops_per_token": flops_per_token,
        "flops_per_sample": flops_per_token * a.seq_len,
        "peak_flops_per_gpu": peak,
        "mfu": tokens_per_s / group.world * flops_per_token / peak if peak else None,
        "peak_memory_bytes": m.peak_allocated,
        "peak_memory_reserved_bytes": m.peak_reserved,
        "params": m.params,
        "params_flops": m.params_flops,
        "loss": m.loss,
        "warmup_s": m.warmup_s,
        "config": {"model": a.model, "layers": cfg.layers, "dim": cfg.dim, "vocab_size": cfg.vocab_size,
                   "model_config": dataclasses.asdict(cfg),
                   "seq_len": a.seq_len, "batch_size": a.batch_size, "steps": a.steps, "warmup": a.warmup_steps,
                   "precision": ("fp8" if getattr(a, "float8", False) else a.precision), "compile": a.compile,
                   "parallel": a.parallel,
                   "activation_checkpointing": a.activation_checkpointing,
                   "static_graph": a.static_graph if a.parallel == "ddp" else None,
                   "optimizer": "adamw", "optimizer_impl": m.optimizer_impl, "clip_grad_norm": a.clip_grad_norm,
                   "tf32": tf32},
        "notes": notes,
        "versions": versions(group.device),
    }


def main(argv=None) -> None:
    a = parse_args(argv)
    group = init_group(a)
    if a.parallel == "none" and group.world > 1:
        raise SystemExit(f"lm_peer: --parallel none runs one process; this group has {group.world}")
    notes = feature_notes(a, group)
    tf32 = configure_math(group.device)
    torch.manual_seed(a.seed)
    m = measure(a, group, notes)
    gc.collect()  # DDP's reducer and the process group's other users go before the group does
    result = result_record(a, group, m, tf32, notes)
    if group.rank == 0:
        report(result)
        if a.json:
            write_json(result, a.json)
    if group.initialized:
        barrier(group)  # no rank tears down (or exits, taking the store with it) while another still talks
        dist.destroy_process_group()


def report(r: dict) -> None:
    c = r["config"]
    mfu = f"{100 * r['mfu']:.1f}% MFU" if r["mfu"] is not None else "MFU n/a (no peak FLOP/s; --peak-tflops)"
    mib = 1 << 20
    memory = (f"peak memory {r['peak_memory_bytes'] / mib:,.0f} MiB allocated, "
              f"{r['peak_memory_reserved_bytes'] / mib:,.0f} MiB reserved" if r["peak_memory_bytes"] is not None
              else "peak memory n/a")
    print(f"lm_peer {c['model']} (L={c['layers']} d={c['dim']} V={c['vocab_size']}, "
          f"{r['params'] / 1e6:.1f}M params) seq {c['seq_len']} batch {c['batch_size']}/GPU, {c['precision']}, "
          f"compile {c['compile']}, {c['parallel']}{' +AC' if c['activation_checkpointing'] else ''}, "
          f"AdamW {c['optimizer_impl']}, {r['gpus']} x {r['versions']['device']}: "
          f"{r['tokens_per_s']:,.0f} tokens/s ({r['tokens_per_s_per_gpu']:,.0f}/GPU), "
          f"step {r['step_ms']:.2f} ms mean, {r['step_ms_p50']:.2f} ms p50, {mfu}, "
          f"{memory}, loss {r['loss']:.4f} "
          f"({c['steps']} steps after {c['warmup']} warm-up taking {r['warmup_s']:.1f} s; "
          f"torch {r['versions']['torch']})", flush=True)


def write_json(result: dict, path: str) -> None:
    line = json.dumps(result)
    if path == "-":
        print(line, flush=True)
        return
    with open(path, "w") as f:
        f.write(line + "\n")


if __name__ == "__main__":
    main()
