#!/usr/bin/env python3
"""The PyTorch pipeline-parallel peer of dtrain's --pp (issue 31): Llama
(bench/peers/lm_models.py) cut into stages as torchtitan's manual split does
it, run by torch.distributed.pipelining's schedules on PyTorch 2.11.

  stages   pp x virtual-stages stages of contiguous blocks, as --pp-split lists them (give the
           split dtrain's --pp-print-schedule shows, so both sides do the same work) or evenly;
           the embedding with the first, the final norm, head and loss with the last. Stage s
           on rank s % pp (the pipelining library's interleaved placement, Megatron's too).
  schedule --pp-schedule 1f1b: Schedule1F1B; interleaved-1f1b: ScheduleInterleaved1F1B;
           gpipe: ScheduleGPipe; --microbatches per step, the batch split along its rows.
  tp       --tp N: each stage tensor-parallel as torchtitan's apply_tp with sequence parallelism
           (lm_tp_peer's plans: the blocks, the embedding with the first stage, the norm and the
           head with the last, loss_parallel unless --no-loss-parallel), before the pipeline, as
           torchtitan composes them; the mesh is (pp, dp 1, tp), tp innermost as dtrain's. Stages
           send their sequence shard.
  compile  torch.compile(block, fullgraph=True) per block (--no-compile: eager).
  fsdp     fully_shard per block and per stage over a dp mesh of one rank with
           MixedPrecisionPolicy(bf16 params, fp32 reduce), as torchtitan makes its compute bf16.
  else     each stage built on the meta device, then on its GPU, initialized as lm_models does;
           AdamW fused; SDPA (cuDNN, flash, math); the loss torchtitan's (float32
           cross-entropy of the logits), scaled by 1 / microbatches.
Timing is lm_peer.py's: one fixed random batch; tokens/s counts batch x seq per step. Rank 0
prints lm_peer's JSON fields (plus pp, microbatches, schedule) on stdout; --json FILE too.

    torchrun --standalone --nproc-per-node 2 bench/peers/lm_pp_peer.py --model llama-8b \\
        --seq-len 4096 --batch-size 8 --pp 2 --microbatches 8 --pp-schedule 1f1b --pp-split 17,15
"""
import argparse
import contextlib
import dataclasses
import json
import os
import statistics
from typing import List, NoReturn

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel, loss_parallel,
                                               parallelize_module)
from torch.nn.attention import SDPBackend, sdpa_kernel

import lm_models  # beside this script
import lm_peer    # its flags' meanings, timing, optimizer and FLOP accounting are reused
import lm_tp_peer  # torchtitan's tensor-parallel block plan

SCHEDULES = {"1f1b": Schedule1F1B, "gpipe": ScheduleGPipe, "interleaved-1f1b": ScheduleInterleaved1F1B}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama-8b", help="a Llama lm_models.named_config knows")
    for field, meaning in lm_peer.SIZE_OVERRIDES.items():
        p.add_argument("--" + field.replace("_", "-"), type=int, default=None, help=f"{meaning} (default: the model's)")
    p.add_argument("--seq-len", type=int, default=4096, help="tokens per sequence")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per step (all micro-batches)")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup-steps", "--warmup", dest="warmup_steps", type=int, default=5)
    p.add_argument("--pp", type=int, default=2, help="pipeline ranks (the world over --tp)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks per stage (innermost)")
    p.add_argument("--no-loss-parallel", dest="loss_parallel", action="store_false",
                   help="with --tp: gather the logits instead of loss_parallel's vocab-sharded cross-entropy")
    p.add_argument("--microbatches", type=int, default=0, help="micro-batches per step (default: pp)")
    p.add_argument("--pp-schedule", default="1f1b", choices=sorted(SCHEDULES))
    p.add_argument("--virtual-stages", type=int, default=1, help="stages per rank (interleaved-1f1b)")
    p.add_argument("--pp-split", default="", help="blocks per stage, first to last (default: even)")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--compile", default="default", choices=["none", "default", "max-autotune-no-cudagraphs"])
    p.add_argument("--no-compile", dest="compile", action="store_const", const="none", help="= --compile none")
    p.add_argument("--activation-checkpointing", action="store_true", help="recompute each block in backward")
    lm_peer.add_run_flags(p)
    a = lm_peer.parse_run_flags(p, argv)
    a.microbatches = a.microbatches or a.pp
    if a.steps < 1 or a.warmup_steps < 0 or a.pp < 2 or a.tp < 1 or a.batch_size % a.microbatches:
        p.error("--steps >= 1, --warmup-steps >= 0, --pp >= 2, --tp >= 1 and a --batch-size that --microbatches "
                "divides")
    a.loss_parallel = a.loss_parallel and a.tp > 1
    if a.virtual_stages > 1 and a.pp_schedule != "interleaved-1f1b":
        p.error("--virtual-stages > 1 needs --pp-schedule interleaved-1f1b")
    return a


def fail(message: str) -> NoReturn:
    raise SystemExit(f"lm_pp_peer: {message}")


class Stage(nn.Module):
    """Blocks first .. end-1 of a Llama; the embedding when first, the final norm and head when last."""

    def __init__(self, cfg, first: int, end: int, is_first: bool, is_last: bool):
        super().__init__()
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim) if is_first else None
        self.layers = nn.ModuleDict({str(i): lm_models.TransformerBlock(cfg) for i in range(first, end)})
        self.norm = lm_models.RMSNorm(cfg.dim, cfg.norm_eps) if is_last else None
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False) if is_last else None
        cos, sin = lm_models.rotary_table(cfg.max_seq_len, cfg.head_dim, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, x):
        if self.tok_embeddings is not None:
            x = self.tok_embeddings(x)
        for block in self.layers.values():
            x = block(x, self.rope_cos, self.rope_sin)
        if self.norm is not None:
            x = self.output(self.norm(x))
        return x


def stage_blocks(a: argparse.Namespace, layers: int) -> List[range]:
    stages = a.pp * a.virtual_stages
    if a.pp_split:
        counts = [int(c) for c in a.pp_split.split(",")]
        if len(counts) != stages or sum(counts) != layers or min(counts) < 1:
            fail(f"--pp-split {a.pp_split}: expected {stages} counts of at least 1 adding up to {layers} blocks")
    else:
        if layers % stages:
            fail(f"{layers} blocks do not split evenly into {stages} stages; give --pp-split")
        counts = [layers // stages] * stages
    starts = [sum(counts[:s]) for s in range(stages)]
    return [range(starts[s], starts[s] + counts[s]) for s in range(stages)]


def apply_stage_tp(stage: Stage, tp_mesh, use_loss_parallel: bool) -> None:
    """torchtitan's apply_tp on the modules this stage holds."""
    plan = {}
    if stage.tok_embeddings is not None:
        plan["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
    if stage.norm is not None:
        plan["norm"] = SequenceParallel()
        plan["output"] = ColwiseParallel(input_layouts=Shard(1), use_local_output=not use_loss_parallel,
                                         output_layouts=Shard(-1) if use_loss_parallel else Replicate())
    if plan:
        parallelize_module(stage, tp_mesh, plan)
    for block in stage.layers.values():
        lm_tp_peer.localize_heads(block, "llama", tp_mesh.size())
        parallelize_module(block, tp_mesh, lm_tp_peer.block_plan("llama"))


def build_stage(cfg, blocks: range, s: int, stages: int, a, device, mesh) -> nn.Module:
    with torch.device("meta"):
        stage = Stage(cfg, blocks.start, blocks.stop, s == 0, s == stages - 1)
    if a.tp > 1:
        apply_stage_tp(stage, mesh["tp"], a.loss_parallel)
    dp_mesh = mesh["dp"]
    if a.activation_checkpointing:
        lm_peer.apply_activation_checkpointing(stage.layers)
    if a.compile != "none":
        lm_peer.replace_blocks(stage.layers, lambda b: torch.compile(b, mode=a.compile, fullgraph=True))
    bf16 = a.precision == "bf16"
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else None,
                              reduce_dtype=torch.float32 if bf16 else None, cast_forward_inputs=False)
    for block in stage.layers.values():
        fully_shard(block, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=False)
    fully_shard(stage, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=False)
    stage.to_empty(device=device)
    lm_models._init_weights(stage, ("attention.wo.weight", "feed_forward.w2.weight"), cfg.layers)
    cos, sin = lm_models.rotary_table(cfg.max_seq_len, cfg.head_dim, cfg.rope_theta)
    with torch.no_grad():
        stage.rope_cos.copy_(cos)
        stage.rope_sin.copy_(sin)
    return stage


def main(argv=None) -> None:
    a = parse_args(argv)
    local = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local) if a.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    if world != a.pp * a.tp:
        fail(f"--pp {a.pp} x --tp {a.tp} must equal the world size {world}")
    mesh = init_device_mesh(device.type, (a.pp, 1, a.tp), mesh_dim_names=("pp", "dp", "tp"))
    pp_rank = mesh["pp"].get_local_rank()
    group = lm_peer.Group(rank, world, local, device, True)
    overrides = {f: getattr(a, f) for f in lm_peer.SIZE_OVERRIDES if getattr(a, f) is not None}
    cfg = lm_models.named_config(a.model, seq_len=a.seq_len, **overrides)
    if cfg.family != "llama" or cfg.tie_embeddings:
        fail("the peer cuts untied Llamas (llama-8b and its slices)")
    for what, n in (("heads", cfg.heads), ("kv_heads", cfg.kv_heads), ("ffn_dim", cfg.ffn_dim),
                    ("vocab_size", cfg.vocab_size), ("seq_len", cfg.seq_len)):
        if n % a.tp:
            fail(f"--tp {a.tp} must divide {what} {n}")
    tf32 = lm_peer.configure_math(device)
    notes: List[str] = []
    torch.manual_seed(a.seed + rank)
    stages = a.pp * a.virtual_stages
    blocks = stage_blocks(a, cfg.layers)
    mine = list(range(pp_rank, stages, a.pp))  # stage s on pipeline rank s % pp
    modules = [build_stage(cfg, blocks[s], s, stages, a, device, mesh) for s in mine]
    pipeline_stages = [PipelineStage(m, s, stages, device, group=mesh["pp"].get_group()) for m, s in zip(modules, mine)]
    trainable = [p for m in modules for p in m.parameters() if p.requires_grad]
    optimizer, optimizer_impl = lm_peer.make_optimizer(trainable, device, notes, rank)

    def loss_fn(logits, targets):  # torchtitan's, rescaled as its accumulated loss
        return lm_peer.next_token_loss(logits, targets) / a.microbatches

    kind = SCHEDULES[a.pp_schedule]
    held = pipeline_stages if a.pp_schedule == "interleaved-1f1b" else pipeline_stages[0]
    try:  # the loss is scaled above; newer schedules would also divide the gradients by M
        schedule = kind(held, n_microbatches=a.microbatches, loss_fn=loss_fn, scale_grads=False)
    except TypeError:
        schedule = kind(held, n_microbatches=a.microbatches, loss_fn=loss_fn)
    has_first, has_last = 0 in mine, stages - 1 in mine
    tokens, targets = lm_peer.synthetic_tokens(cfg.vocab_size, a.batch_size, a.seq_len, device, a.seed + 1)
    backends = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]
    attention = (lambda: sdpa_kernel(backends, set_priority=True)) if device.type == "cuda" else contextlib.nullcontext
    vocab_sharded_loss = loss_parallel if a.loss_parallel else contextlib.nullcontext  # torchtitan's train context
    loss_sum = torch.zeros((), device=device)

    def step():
        losses: List[torch.Tensor] = []
        with vocab_sharded_loss(), attention():
            if has_first:
                schedule.step(tokens, target=targets if has_last else None, losses=losses if has_last else None)
            elif has_last:
                schedule.step(target=targets, losses=losses)
            else:
                schedule.step()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if losses:
            loss_sum.add_(torch.stack([lm_tp_peer.local(l.detach()).float() for l in losses]).sum())
        return losses

    if a.check:
        for i in range(a.steps):
            loss_sum.zero_()
            step()
            if has_last:
                print(f"lm_pp_peer: check step {i + 1} loss {loss_sum.item():.6f} (pp {a.pp}, tp {a.tp})",
                      flush=True)
        dist.destroy_process_group()
        return
    warmup_s = lm_peer.warm_up(step, a.warmup_steps, group)
    loss_sum.zero_()
    timing = lm_peer.timed_steps(step, a.steps, group)
    memory = [float(torch.cuda.max_memory_allocated(device)), float(torch.cuda.max_memory_reserved(device))] \
        if device.type == "cuda" else [-1.0, -1.0]
    # The loss lives on the last stage's rank: its sum joins the maxima as a broadcast would.
    loss_mean = loss_sum.item() / a.steps if has_last else -1e30
    elapsed, warmup_s, allocated, reserved, loss = lm_peer.max_over_ranks(
        [timing.elapsed_s, warmup_s] + memory + [loss_mean], group)
    params = sum(p.numel() for p in trainable)
    with torch.device("meta"):
        whole = lm_models.Llama(cfg)
    params_flops = lm_peer.flops_params(whole)
    flops_per_token = lm_peer.training_flops_per_token(params_flops, cfg.layers, cfg.dim, a.seq_len)
    tokens_per_s = a.batch_size * a.seq_len * a.steps / elapsed
    peak = lm_peer.peak_flops(device, a.peak_tflops)
    result = {
        "peer": "torch-pp", "bench": "train", "model": a.model, "gpus": world, "pp": a.pp, "tp": a.tp,
        "microbatches": a.microbatches, "pp_schedule": a.pp_schedule, "virtual_stages": a.virtual_stages,
        "pp_stages": " | ".join(f"{b.start}-{b.stop - 1}" for b in blocks),
        "device_type": device.type, "backend": dist.get_backend(),
        "step_ms": elapsed * 1e3 / a.steps,
        "step_ms_p50": statistics.median(lm_peer.max_over_ranks(timing.step_ms, group)),
        "samples_per_s": a.batch_size * a.steps / elapsed, "tokens_per_s": tokens_per_s,
        "tokens_per_s_per_gpu": tokens_per_s / world, "flops_per_token": flops_per_token,
        "flops_per_sample": flops_per_token * a.seq_len, "peak_flops_per_gpu": peak,
        "mfu": tokens_per_s / world * flops_per_token / peak if peak else None,
        "peak_memory_bytes": int(allocated) if allocated >= 0 else None,
        "peak_memory_reserved_bytes": int(reserved) if reserved >= 0 else None,
        "params_this_rank": params, "params_flops": params_flops, "loss": loss, "warmup_s": warmup_s,
        "config": {**vars(a), "layers": cfg.layers, "dim": cfg.dim, "vocab_size": cfg.vocab_size,
                   "model_config": dataclasses.asdict(cfg),
                   "parallel": "pipelining+fsdp2(dp 1)" + (f"+tp {a.tp} (sp)" if a.tp > 1 else ""),
                   "optimizer": "adamw", "optimizer_impl": optimizer_impl, "tf32": tf32},
        "notes": notes, "versions": lm_peer.versions(device),
    }
    if rank == 0:
        print(json.dumps(result), flush=True)
        if a.json:
            lm_peer.write_json(result, a.json)
    lm_peer.barrier(group)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
