"""Logits of a Hugging Face model directory (LlamaForCausalLM or
GPT2LMHeadModel: config.json, model.safetensors or an index of shards),
computed as transformers computes them, in plain float32 PyTorch: Llama's
rotary embedding on split halves (rotate_half), grouped-query heads
repeated, RMSNorm, SwiGLU; GPT-2's Conv1D weights ([in, out]), learned
positions, LayerNorm, tanh GELU. dtrain's import (models/hf_checkpoint.h)
is checked against it without transformers installed
(tests/models/hf_checkpoint_test.cc); on the GPU machine transformers
itself is the check.

    python3 hf_reference.py --model DIR --batch B.safetensors --out O.safetensors
"""
import argparse
import json
import math
import os

import torch
import torch.nn.functional as F

from lm_models import load_safetensors, save_safetensors


def load_dir(path):
    index = os.path.join(path, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    weights = {}
    for f in files:
        tensors, _ = load_safetensors(os.path.join(path, f))
        weights.update({k: v.float() for k, v in tensors.items()})
    return json.load(open(os.path.join(path, "config.json"))), weights


def causal(q, k, v):
    t = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def llama_logits(cfg, w, tokens):
    d, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    hd, eps = d // heads, cfg.get("rms_norm_eps", 1e-6)
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}  # transformers 5's, 4's
    theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
    b, t = tokens.shape
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    if rope.get("rope_type", rope.get("type")) == "llama3":  # Llama 3.1's long-context frequencies
        factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        old = rope["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - low) / (high - low)
        blended = (1 - smooth) * inv / factor + smooth * inv
        inv = torch.where(wavelen > old / low, inv / factor, torch.where(wavelen < old / high, inv, blended))
    angles = torch.outer(torch.arange(t, dtype=torch.float64), inv)
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos().float(), emb.sin().float()

    def norm(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g

    x = w["model.embed_tokens.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = norm(x, w[p + "input_layernorm.weight"])
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(b, t, heads, hd).transpose(1, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(b, t, kv, hd).transpose(1, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(b, t, kv, hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(heads // kv, dim=1), v.repeat_interleave(heads // kv, dim=1)
        y = causal(q, k, v).transpose(1, 2).reshape(b, t, d)
        x = x + y @ w[p + "self_attn.o_proj.weight"].T
        h = norm(x, w[p + "post_attention_layernorm.weight"])
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (F.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    x = norm(x, w["model.norm.weight"])
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T


def gpt2_logits(cfg, w, tokens):
    d, heads, eps = cfg["n_embd"], cfg["n_head"], cfg.get("layer_norm_epsilon", 1e-5)
    w = {(k if k.startswith("transformer.") or k == "lm_head.weight" else "transformer." + k): v for k, v in w.items()}
    b, t = tokens.shape
    x = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][:t]
    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}."
        h = F.layer_norm(x, (d,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: x W + b
        q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in qkv.split(d, dim=-1))
        y = causal(q, k, v).transpose(1, 2).reshape(b, t, d)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (d,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        h = F.gelu(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (d,), w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    return x @ w.get("lm_head.weight", w["transformer.wte.weight"]).T


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", action="append", required=True, help="a Hugging Face model directory")
    p.add_argument("--batch", action="append", required=True, help="safetensors with 'tokens' [B, T] int64")
    p.add_argument("--out", action="append", required=True, help="where to write 'logits'")
    a = p.parse_args()
    if not len(a.model) == len(a.batch) == len(a.out):
        p.error("give --model, --batch and --out the same number of times")
    torch.set_grad_enabled(False)
    for model, batch, out in zip(a.model, a.batch, a.out):
        cfg, w = load_dir(model)
        tokens = load_safetensors(batch)[0]["tokens"].long()
        arch = cfg["architectures"][0]
        logits = llama_logits(cfg, w, tokens) if arch == "LlamaForCausalLM" else gpt2_logits(cfg, w, tokens)
        save_safetensors(out, {"logits": logits.contiguous()})


if __name__ == "__main__":
    main()
