#!/usr/bin/env python3
"""The PyTorch tensor-parallel peer of dtrain's --tp (issue 30): GPT-2 and Llama
(bench/peers/lm_models.py) trained as torchtitan's llama3 parallelize.py does it
on PyTorch 2.11, in its order: TP, activation checkpointing, compile, FSDP.

  mesh     init_device_mesh(device, (dp, tp), ("dp", "tp")); tp innermost (one node's GPUs).
  tp       parallelize_module with torchtitan's apply_tp plan and sequence parallelism: the
           embedding rowwise (vocab-parallel, output sequence-sharded), q/k/v and w1/w3 colwise,
           wo and w2 rowwise (reduce-scatter to sequence shards), norms SequenceParallel, the
           head colwise with loss_parallel (--no-loss-parallel: logits gathered); attention
           modules keep heads / tp heads.
  compile  torch.compile(block, fullgraph=True) per block (--no-compile: eager).
  fsdp     fully_shard over "dp" (embeddings, each block, [norm, head], root) with
           MixedPrecisionPolicy(bf16 params, fp32 reduce). Applied at dp 1 too, as torchtitan
           does since it dropped AMP: there it shards nothing and makes the compute bf16.
  else     built on the meta device, initialized after sharding; AdamW fused; SDPA with
           torchtitan's backend priority (cuDNN, flash, math); --async-tp: Inductor's async TP.
Step and timing are lm_peer.py's: one fixed random batch per dp rank (shared by its tp
ranks); tokens/s counts batch x seq x dp per step. Rank 0 prints lm_peer's JSON fields (plus
tp, dp) as one line on stdout; --json FILE writes it too.

    torchrun --standalone --nproc-per-node 2 bench/peers/lm_tp_peer.py --model llama-8b \\
        --seq-len 4096 --batch-size 1 --tp 2 --activation-checkpointing --steps 20 --warmup-steps 5
    torchrun --standalone --nproc-per-node 4 bench/peers/lm_tp_peer.py --model llama-8b \\
        --seq-len 4096 --batch-size 1 --tp 2 --dp-shard 2 --activation-checkpointing
    python3 bench/peers/lm_tp_peer.py --check --device cpu --tp 1 --no-compile --model llama \\
        --layers 2 --dim 64 --heads 4 --kv-heads 2 --vocab-size 512 --seq-len 64 --batch-size 2
"""
import argparse
import contextlib
import dataclasses
import json
import os
import statistics
from typing import NoReturn

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, loss_parallel, parallelize_module)
from torch.nn.attention import SDPBackend, sdpa_kernel

import lm_models  # beside this script
import lm_peer    # its flags' meanings, timing, optimizer and FLOP accounting are reused


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama-8b", help="a name lm_models.named_config knows")
    for field, meaning in lm_peer.SIZE_OVERRIDES.items():  # --vocab-size pads the vocabulary (50304)
        p.add_argument("--" + field.replace("_", "-"), type=int, default=None, help=f"{meaning} (default: the model's)")
    p.add_argument("--seq-len", type=int, default=4096, help="tokens per sequence")
    p.add_argument("--batch-size", type=int, default=1, help="sequences per dp rank per step")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup-steps", "--warmup", dest="warmup_steps", type=int, default=5)
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel ranks (innermost mesh dimension)")
    p.add_argument("--dp-shard", type=int, default=-1, help="FSDP ranks (default: world / tp)")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--compile", default="default", choices=["none", "default", "max-autotune-no-cudagraphs"])
    p.add_argument("--no-compile", dest="compile", action="store_const", const="none", help="= --compile none")
    p.add_argument("--no-loss-parallel", dest="loss_parallel", action="store_false",
                   help="gather the logits instead of loss_parallel's vocab-sharded cross-entropy")
    p.add_argument("--async-tp", action="store_true", help="Inductor's micro-pipelined TP (needs compile)")
    p.add_argument("--activation-checkpointing", action="store_true", help="recompute each block in backward")
    p.add_argument("--clip-grad-norm", type=float, default=0.0, help="clip to this global L2 norm (0: off)")
    lm_peer.add_run_flags(p)
    a = lm_peer.parse_run_flags(p, argv)
    if a.steps < 1 or a.warmup_steps < 0 or a.seq_len < 1 or a.batch_size < 1 or a.tp < 1:
        p.error("--steps, --seq-len, --batch-size and --tp must be >= 1, --warmup-steps >= 0")
    if a.async_tp and a.compile == "none":
        p.error("--async-tp is an Inductor pass: it needs --compile")
    return a


def fail(message: str) -> NoReturn:
    raise SystemExit(f"lm_tp_peer: {message}")


def init_mesh(a: argparse.Namespace):
    """Joins the torchrun group (one rank without it) and builds the (dp, tp) mesh."""
    local = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local) if a.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group(backend)
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    world = dist.get_world_size()
    dp = a.dp_shard if a.dp_shard > 0 else world // a.tp
    if dp * a.tp != world:
        fail(f"--tp {a.tp} x --dp-shard {dp} must equal the world size {world}")
    mesh = init_device_mesh(device.type, (dp, a.tp), mesh_dim_names=("dp", "tp"))
    return lm_peer.Group(dist.get_rank(), world, local, device, True), mesh


def model_config(a: argparse.Namespace):
    overrides = {f: getattr(a, f) for f in lm_peer.SIZE_OVERRIDES if getattr(a, f) is not None}
    try:
        cfg = lm_models.named_config(a.model, seq_len=a.seq_len, **overrides)
    except ValueError as e:
        fail(str(e))
    # torchtitan's checks, plus the vocabulary and sequence: uneven DTensor shards
    # would make use_local_output's plain tensors differ in shape across ranks.
    for what, n in (("heads", cfg.heads), ("kv_heads", cfg.kv_heads), ("ffn_dim", cfg.ffn_dim),
                    ("vocab_size (pad it with --vocab-size)", cfg.vocab_size), ("seq_len", cfg.seq_len),
                    ("max_seq_len", cfg.max_seq_len)):
        if n % a.tp:
            fail(f"--tp {a.tp} must divide {what} {n}")
    return cfg


# lm_models' forward applies F.linear to output_weight(); calling the head module lets its TP hooks run.
class TPLlama(lm_models.Llama):
    def forward(self, tokens):
        return self.output(self.hidden(tokens))


class TPGPT(lm_models.GPT):
    def forward(self, tokens):
        return self.lm_head(self.hidden(tokens))


class GPTAttentionShard(nn.Module):
    """lm_models.CausalSelfAttention on one tp rank's heads. Its c_attn is one
    fused [3*dim, dim] Linear and ColwiseParallel hands each rank a contiguous
    block of rows, so the peer reads the rows rank-major, [tp][q|k|v][dim/tp]:
    rank r's block is its own q, k and v heads (torchtitan's FusedQKVLinear
    groups its rows for the same reason). That is a permutation of lm_models'
    [q|k|v][dim] layout; weights are initialized after sharding, so no rows
    move here, but a loaded checkpoint would need them permuted."""

    def __init__(self, attention: nn.Module, tp: int):
        super().__init__()
        self.c_attn, self.c_proj, self.heads = attention.c_attn, attention.c_proj, attention.heads // tp

    def forward(self, x):
        q, k, v = (t.unflatten(-1, (self.heads, -1)).transpose(1, 2) for t in self.c_attn(x).chunk(3, dim=-1))
        return self.c_proj(lm_models.causal_attention(q, k, v).transpose(1, 2).flatten(2))


# Per family, the modules the plans name: (token embedding, position embedding
# or None, blocks, final norm, head).
LAYOUT = {"llama": ("tok_embeddings", None, "layers", "norm", "output"),
          "gpt2": ("transformer.wte", "transformer.wpe", "transformer.h", "transformer.ln_f", "lm_head")}


def build_on_meta(cfg) -> nn.Module:
    """The model on the meta device; a tied head becomes a Linear sharing the
    embedding's weight (torchtitan's weight tying) so the TP plan can name it."""
    embedding, _, _, _, head = LAYOUT[cfg.family]
    with torch.device("meta"):
        model = (TPGPT if cfg.family == "gpt2" else TPLlama)(cfg)
        if getattr(model, head) is None:
            setattr(model, head, nn.Linear(cfg.dim, cfg.vocab_size, bias=False))
            getattr(model, head).weight = model.get_submodule(embedding).weight
    return model


def gathered(extra_inputs: int = 0) -> PrepareModuleInput:
    """A block's sequence-sharded input all-gathered for its column-parallel products."""
    return PrepareModuleInput(input_layouts=(Shard(1),) + (None,) * extra_inputs,
                              desired_input_layouts=(Replicate(),) + (None,) * extra_inputs)


def localize_heads(block: nn.Module, family: str, tp: int) -> None:
    """Leaves a block's attention with this rank's heads, as torchtitan's apply_tp did."""
    if family == "llama":
        block.attention.heads //= tp
        block.attention.kv_heads //= tp
    else:
        block.attn = GPTAttentionShard(block.attn, tp)


def block_plan(family: str) -> dict:
    """torchtitan's per-block plan (GPT-2's by analogy)."""
    if family == "llama":
        return {"attention_norm": SequenceParallel(),
                "attention": gathered(2),  # the rotary tables pass unsharded
                "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
                "attention.wv": ColwiseParallel(), "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
                "ffn_norm": SequenceParallel(),
                "feed_forward": gathered(),
                "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
                "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1))}
    return {"ln_1": SequenceParallel(),
            "attn": gathered(),
            "attn.c_attn": ColwiseParallel(), "attn.c_proj": RowwiseParallel(output_layouts=Shard(1)),
            "ln_2": SequenceParallel(),
            "mlp": gathered(),
            "mlp.c_fc": ColwiseParallel(), "mlp.c_proj": RowwiseParallel(output_layouts=Shard(1))}


def apply_tp(model: nn.Module, cfg, tp_mesh, use_loss_parallel: bool) -> None:
    """torchtitan's apply_tp with sequence parallelism, for both families."""
    embedding, positions, blocks, norm, head = LAYOUT[cfg.family]
    plan = {embedding: RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            norm: SequenceParallel(),
            head: ColwiseParallel(input_layouts=Shard(1), use_local_output=not use_loss_parallel,
                                  output_layouts=Shard(-1) if use_loss_parallel else Replicate())}
    if positions:  # GPT-2's [T, dim] positions, reduce-scattered to the token embeddings' sequence shard
        plan[positions] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0))
    parallelize_module(model, tp_mesh, plan)
    if cfg.tie_embeddings:  # parallelize_module gave each module its own DTensor; re-tie them as torchtitan does
        model.get_submodule(head).weight = model.get_submodule(embedding).weight
    for block in model.get_submodule(blocks):
        localize_heads(block, cfg.family, tp_mesh.size())
        parallelize_module(block, tp_mesh, block_plan(cfg.family))


def apply_fsdp(model: nn.Module, cfg, dp_mesh, precision: str) -> None:
    """torchtitan's apply_fsdp with the default reshard policy: reshard after
    forward except [norm, head], which backward needs first; a tied embedding
    joins that group."""
    bf16 = precision == "bf16"
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else None,
                              reduce_dtype=torch.float32 if bf16 else None, cast_forward_inputs=False)
    embedding, positions, blocks, norm, head = LAYOUT[cfg.family]
    embeddings = [model.get_submodule(n) for n in (embedding, positions) if n]
    last = [model.get_submodule(norm), model.get_submodule(head)]
    if cfg.tie_embeddings:
        last = embeddings + last
    else:
        fully_shard(embeddings, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=True)
    fully_shard(last, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=False)
    for block in model.get_submodule(blocks):
        fully_shard(block, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=True)
    fully_shard(model, mesh=dp_mesh, mp_policy=mp)


def materialize(model: nn.Module, cfg, device: torch.device) -> None:
    """Allocates the sharded parameters and initializes them as lm_models does
    (DTensor's RNG keeps shards of one tensor distinct and ranks consistent)."""
    model.to_empty(device=device)
    residual = ("c_proj.weight",) if cfg.family == "gpt2" else ("attention.wo.weight", "feed_forward.w2.weight")
    lm_models._init_weights(model, residual, cfg.layers)  # matches through the _orig_mod/_checkpoint prefixes
    if cfg.family == "llama":
        cos, sin = lm_models.rotary_table(cfg.max_seq_len, cfg.head_dim, cfg.rope_theta)
        with torch.no_grad():
            model.rope_cos.copy_(cos)
            model.rope_sin.copy_(sin)


def parallelize(model: nn.Module, cfg, a: argparse.Namespace, mesh, device: torch.device) -> None:
    """torchtitan's parallelize_llama order: TP, activation checkpointing, compile per block, FSDP."""
    apply_tp(model, cfg, mesh["tp"], a.loss_parallel)
    blocks = model.get_submodule(LAYOUT[cfg.family][2])
    if a.activation_checkpointing:
        lm_peer.apply_activation_checkpointing(blocks)
    if a.compile != "none":
        if a.async_tp:  # as torchtitan's apply_compile sets it up
            import torch._inductor.config as inductor_config  # a plain `import torch...` here would make
            from torch.distributed._symmetric_memory import enable_symm_mem_for_group  # torch a local name
            enable_symm_mem_for_group(mesh["tp"].get_group().group_name)
            inductor_config._micro_pipeline_tp = True
        lm_peer.replace_blocks(blocks, lambda b: torch.compile(b, mode=a.compile, fullgraph=True))
    apply_fsdp(model, cfg, mesh["dp"], a.precision)
    materialize(model, cfg, device)


def local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t  # loss_parallel's loss is a replicated DTensor


def make_step(model: nn.Module, trainable, optimizer, tokens, targets, a: argparse.Namespace, device: torch.device):
    """One training step as torchtitan's train_step runs it; returns the loss, accumulated on the device too."""
    vocab_sharded_loss = loss_parallel if a.loss_parallel else contextlib.nullcontext
    backends = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]  # torchtitan's SDPA order
    attention = (lambda: sdpa_kernel(backends, set_priority=True)) if device.type == "cuda" else contextlib.nullcontext
    loss_sum = torch.zeros((), device=device)

    def step():
        with vocab_sharded_loss(), attention():
            loss = lm_peer.next_token_loss(model(tokens), targets)
            loss.backward()  # inside loss_parallel: its backward is vocab-sharded too
        if a.clip_grad_norm > 0:  # torchtitan's clip: the norm DTensor reduced over the whole mesh first
            norm = torch.nn.utils.get_total_norm([p.grad for p in trainable if p.grad is not None], foreach=True)
            norm = norm.full_tensor() if isinstance(norm, DTensor) else norm
            torch.nn.utils.clip_grads_with_norm_(trainable, a.clip_grad_norm, norm, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss_sum.add_(local(loss.detach()))  # no synchronisation per step
        return loss

    return step, loss_sum


def result_record(a, cfg, group, dp: int, m: "lm_peer.Measurement", tf32: str, notes) -> dict:
    """lm_peer's JSON fields, with tokens counted once per tp group (its ranks share them)."""
    flops_per_token = lm_peer.training_flops_per_token(m.params_flops, cfg.layers, cfg.dim, a.seq_len)
    tokens_per_s = a.batch_size * a.seq_len * dp * a.steps / m.elapsed_s
    peak = lm_peer.peak_flops(group.device, a.peak_tflops)
    return {
        "peer": "torch-tp", "bench": "train", "model": a.model, "gpus": group.world, "tp": a.tp, "dp": dp,
        "device_type": group.device.type, "backend": dist.get_backend(),
        "step_ms": m.elapsed_s * 1e3 / a.steps, "step_ms_p50": statistics.median(m.step_ms),
        "samples_per_s": a.batch_size * dp * a.steps / m.elapsed_s,
        "tokens_per_s": tokens_per_s, "tokens_per_s_per_gpu": tokens_per_s / group.world,
        "flops_per_token": flops_per_token, "flops_per_sample": flops_per_token * a.seq_len,
        "peak_flops_per_gpu": peak, "mfu": tokens_per_s / group.world * flops_per_token / peak if peak else None,
        "peak_memory_bytes": m.peak_allocated, "peak_memory_reserved_bytes": m.peak_reserved,
        "params": m.params, "params_flops": m.params_flops, "loss": m.loss, "warmup_s": m.warmup_s,
        "config": {**vars(a), "layers": cfg.layers, "dim": cfg.dim, "vocab_size": cfg.vocab_size,
                   "warmup": a.warmup_steps, "dp_shard": dp, "model_config": dataclasses.asdict(cfg),
                   "parallel": "fsdp2+tp", "sequence_parallel": True, "optimizer": "adamw",
                   "optimizer_impl": m.optimizer_impl, "tf32": tf32},
        "notes": notes, "versions": lm_peer.versions(group.device),
    }


def main(argv=None) -> None:
    a = parse_args(argv)
    group, mesh = init_mesh(a)
    cfg, notes, dp = model_config(a), [], mesh["dp"].size()
    tf32 = lm_peer.configure_math(group.device)
    torch.manual_seed(a.seed)  # the same on every rank: DTensor's RNG derives each shard's stream from it
    model = build_on_meta(cfg)
    params, params_flops = sum(p.numel() for p in model.parameters()), lm_peer.flops_params(model)
    parallelize(model, cfg, a, mesh, group.device)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer, optimizer_impl = lm_peer.make_optimizer(trainable, group.device, notes, group.rank)
    # The tp ranks of one dp rank must see the same tokens.
    tokens, targets = lm_peer.synthetic_tokens(cfg.vocab_size, a.batch_size, a.seq_len, group.device,
                                               a.seed + 1 + mesh["dp"].get_local_rank())
    step, loss_sum = make_step(model, trainable, optimizer, tokens, targets, a, group.device)
    if a.check:
        for i in range(a.steps):
            loss = local(step().detach()).item()
            if group.rank == 0:
                print(f"lm_tp_peer: check step {i + 1} loss {loss:.6f} (tp {a.tp}, dp {dp})", flush=True)
        dist.destroy_process_group()
        return
    warmup_s = lm_peer.warm_up(step, a.warmup_steps, group)
    loss_sum.zero_()
    timing = lm_peer.timed_steps(step, a.steps, group)
    memory = [-1.0, -1.0]  # none on a CPU
    if group.device.type == "cuda":
        memory = [float(torch.cuda.max_memory_allocated(group.device)),
                  float(torch.cuda.max_memory_reserved(group.device))]
    elapsed, warmup_s, allocated, reserved = lm_peer.max_over_ranks([timing.elapsed_s, warmup_s] + memory, group)
    m = lm_peer.Measurement(cfg, params, params_flops, optimizer_impl, elapsed, warmup_s,
                            lm_peer.max_over_ranks(timing.step_ms, group),
                            int(allocated) if allocated >= 0 else None, int(reserved) if reserved >= 0 else None,
                            loss_sum.item() / a.steps)
    result = result_record(a, cfg, group, dp, m, tf32, notes)
    if group.rank == 0:
        print(json.dumps(result), flush=True)
        if a.json:
            lm_peer.write_json(result, a.json)
    lm_peer.barrier(group)  # no rank tears down while another still talks
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
