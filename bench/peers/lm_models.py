"""GPT-2 and Llama 3 in plain PyTorch: dtrain's reference for its language models.

The same architectures, sizes, parameter names and initialisation as
src/models/ (gpt2.h, llama.h, lm_config.h), so a state dict exported by dtrain
loads 1:1 and the logits agree. Importing this module has no side effects.

API
  LMConfig                        dataclass: family ("gpt2" | "llama"), layers, dim,
                                  heads, kv_heads, ffn_dim, max_seq_len, seq_len,
                                  vocab_size, tie_embeddings, rope_theta, norm_eps
  named_config(name, **overrides) gpt2 (= gpt2-124m), gpt2-350m, gpt2-774m, gpt2-1.5b,
                                  llama (= llama-1b), llama-3b, llama-8b; overrides
                                  layers, dim, heads, kv_heads, ffn_dim, seq_len,
                                  vocab_size, tie_embeddings, rope_theta
  GPT(cfg), Llama(cfg)            nn.Modules: forward(tokens) -> logits [B, T, vocab],
                                  loss(tokens, targets) -> float32 mean cross-entropy.
                                  Blocks: model.transformer.h[i] / model.layers[i]
                                  (the units to wrap with fully_shard)
  build(cfg)                      GPT or Llama, by cfg.family
  parameter_count(cfg)            parameters, from the config alone
  load_safetensors(path)          -> (dict name -> tensor, metadata dict)
  save_safetensors(path, tensors, metadata=None)
  config_from_metadata(metadata)  the LMConfig dtrain writes into __metadata__

Attention is F.scaled_dot_product_attention(is_causal=True) where torch has it
(2.x), else the same mathematics with the softmax in float32 (1.13). Rotary
embeddings rotate interleaved pairs (x[2i], x[2i+1]) as Meta's checkpoints do.

Command line (tests/models/lm_reference_test.cc runs it):
  python3 lm_models.py --weights W.safetensors --batch B.safetensors --out O.safetensors [--weights ...]
W holds a model's parameters with its config in __metadata__, B the int64
"tokens" and "targets" [batch, seq]; O receives "logits", "loss" and
"grad.<name>" for every parameter (the gradient of the loss). Repeat the
three flags for several models in one run (torch's import dominates).
"""

import argparse
import dataclasses
import json
import math
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass
class LMConfig:
    name: str = "gpt2-124m"
    family: str = "gpt2"
    layers: int = 12
    dim: int = 768
    heads: int = 12
    kv_heads: int = 12
    ffn_dim: int = 3072
    max_seq_len: int = 1024
    seq_len: int = 1024
    vocab_size: int = 50257
    tie_embeddings: bool = True
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self):
        return self.dim // self.heads


def _gpt2(name, layers, dim, heads):
    return LMConfig(name=name, family="gpt2", layers=layers, dim=dim, heads=heads, kv_heads=heads,
                    ffn_dim=4 * dim, max_seq_len=1024, seq_len=1024, vocab_size=50257, tie_embeddings=True)


def _llama(name, layers, dim, heads, ffn_dim, tied):
    return LMConfig(name=name, family="llama", layers=layers, dim=dim, heads=heads, kv_heads=8, ffn_dim=ffn_dim,
                    max_seq_len=8192, seq_len=8192, vocab_size=128256, tie_embeddings=tied, rope_theta=500000.0)


NAMED = {
    "gpt2-124m": _gpt2("gpt2-124m", 12, 768, 12),
    "gpt2-350m": _gpt2("gpt2-350m", 24, 1024, 16),
    "gpt2-774m": _gpt2("gpt2-774m", 36, 1280, 20),
    "gpt2-1.5b": _gpt2("gpt2-1.5b", 48, 1600, 25),
    "llama-1b": _llama("llama-1b", 16, 2048, 32, 8192, True),
    "llama-3b": _llama("llama-3b", 28, 3072, 24, 8192, True),
    "llama-8b": _llama("llama-8b", 32, 4096, 32, 14336, False),
}
ALIASES = {"gpt2": "gpt2-124m", "llama": "llama-1b"}


def _derived_ffn_dim(family, dim):
    if family == "gpt2":
        return 4 * dim
    return (2 * (4 * dim) // 3 + 255) // 256 * 256


def named_config(name, **overrides):
    """The named size with overrides applied, by dtrain's rules (lm_config.h)."""
    key = ALIASES.get(name, name)
    if key not in NAMED:
        raise ValueError(f"unknown language model '{name}' (valid: {', '.join(list(ALIASES) + list(NAMED))})")
    known = {"layers", "dim", "heads", "kv_heads", "ffn_dim", "seq_len", "vocab_size", "tie_embeddings", "rope_theta"}
    unknown = set(overrides) - known
    if unknown:
        raise ValueError(f"unknown override(s) {sorted(unknown)} (valid: {sorted(known)})")
    cfg = dataclasses.replace(NAMED[key])
    if "dim" in overrides and overrides["dim"] != cfg.dim:
        cfg.dim = overrides["dim"]
        cfg.ffn_dim = _derived_ffn_dim(cfg.family, cfg.dim)
    for field in ("layers", "heads", "ffn_dim", "seq_len", "vocab_size", "tie_embeddings", "rope_theta"):
        if field in overrides:
            setattr(cfg, field, overrides[field])
    cfg.kv_heads = overrides.get("kv_heads", cfg.heads if cfg.family == "gpt2" else cfg.kv_heads)
    if cfg.family == "llama":
        cfg.max_seq_len = max(cfg.max_seq_len, cfg.seq_len)
    _validate(cfg)
    return cfg


def _validate(cfg):
    for field in ("layers", "dim", "heads", "kv_heads", "ffn_dim", "seq_len", "max_seq_len", "vocab_size"):
        if getattr(cfg, field) <= 0:
            raise ValueError(f"{field} must be positive, got {getattr(cfg, field)}")
    if cfg.dim % cfg.heads:
        raise ValueError(f"heads {cfg.heads} must divide dim {cfg.dim}")
    if cfg.family == "gpt2" and cfg.kv_heads != cfg.heads:
        raise ValueError("gpt2 has one key/value head per query head")
    if cfg.heads % cfg.kv_heads:
        raise ValueError(f"kv_heads {cfg.kv_heads} must divide heads {cfg.heads}")
    if cfg.seq_len > cfg.max_seq_len:
        raise ValueError(f"seq_len {cfg.seq_len} exceeds the model's {cfg.max_seq_len} positions")
    if cfg.family == "llama" and cfg.head_dim % 2:
        raise ValueError(f"rotary embeddings need an even head dim, got {cfg.head_dim}")


def parameter_count(cfg):
    d, f = cfg.dim, cfg.ffn_dim
    if cfg.family == "gpt2":
        block = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d)
        fixed = cfg.max_seq_len * d + 2 * d
    else:
        block = 2 * d + 2 * d * d + 2 * d * cfg.kv_heads * cfg.head_dim + 3 * d * f
        fixed = d
    head = 0 if cfg.tie_embeddings else cfg.vocab_size * d
    return cfg.vocab_size * d + cfg.layers * block + fixed + head


def _wide(x):
    """The dtype reductions run in: float32, or float64 for double inputs."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def causal_attention(q, k, v):
    """softmax(q kᵀ / sqrt(head_dim), causal) v; q [B, H, T, hd], k and v [B, KV, T, hd]."""
    group = q.size(1) // k.size(1)
    if group > 1:  # each key/value head serves `group` consecutive query heads
        k, v = (t.unsqueeze(2).expand(t.size(0), t.size(1), group, t.size(2), t.size(3)).flatten(1, 2)
                for t in (k, v))
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    wide = _wide(q)
    scores = q.to(wide) @ k.to(wide).transpose(-2, -1) / math.sqrt(q.size(-1))
    future = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(future, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v.to(wide)).to(q.dtype)


def _init_weights(model, residual_names, layers):
    residual_std = 0.02 / math.sqrt(2 * layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.zero_()
            elif "norm" in name or ".ln_" in name:
                p.fill_(1.0)
            else:
                p.normal_(0.0, residual_std if name.endswith(residual_names) else 0.02)


def _cross_entropy(logits, targets):
    return F.cross_entropy(logits.to(_wide(logits)).reshape(-1, logits.size(-1)), targets.reshape(-1))


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.heads = cfg.heads
        self.c_attn = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.c_proj = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        return self.c_proj(causal_attention(q, k, v).transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.dim, cfg.ffn_dim)
        self.c_proj = nn.Linear(cfg.ffn_dim, cfg.dim)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.dim, eps=cfg.norm_eps)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.dim, eps=cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-2 as nanoGPT: learned positions, pre-LayerNorm, GELU (tanh), biases, tied head by default."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, cfg.dim),
            wpe=nn.Embedding(cfg.max_seq_len, cfg.dim),
            h=nn.ModuleList(Block(cfg) for _ in range(cfg.layers)),
            ln_f=nn.LayerNorm(cfg.dim, eps=cfg.norm_eps),
        ))
        # A tied head is wte itself: no second parameter (dtrain's names exactly).
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        _init_weights(self, ("c_proj.weight",), cfg.layers)

    def output_weight(self):
        return self.transformer.wte.weight if self.lm_head is None else self.lm_head.weight

    def hidden(self, tokens):
        positions = torch.arange(tokens.size(1), device=tokens.device)
        x = self.transformer.wte(tokens) + self.transformer.wpe(positions)
        for block in self.transformer.h:
            x = block(x)
        return self.transformer.ln_f(x)

    def forward(self, tokens):
        return F.linear(self.hidden(tokens), self.output_weight())

    def loss(self, tokens, targets):
        return _cross_entropy(self(tokens), targets)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        wide = x.to(_wide(x))
        return (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rotary_table(seq_len, head_dim, theta):
    """cos and sin [seq_len, head_dim / 2], computed in float64, returned as float32."""
    frequencies = theta ** -(torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), frequencies)
    return angles.cos().float(), angles.sin().float()


def apply_rotary(x, cos, sin):
    """Rotates interleaved pairs of x [B, T, H, hd] by the tables' first T rows."""
    B, T, H, hd = x.shape
    wide = _wide(x)
    pairs = x.to(wide).reshape(B, T, H, hd // 2, 2)
    even, odd = pairs[..., 0], pairs[..., 1]
    cos, sin = cos[:T].to(wide).unsqueeze(1), sin[:T].to(wide).unsqueeze(1)
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.heads, cfg.kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.heads * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.kv_heads * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.heads * cfg.head_dim, cfg.dim, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = apply_rotary(self.wq(x).view(B, T, self.heads, self.head_dim), cos, sin)
        k = apply_rotary(self.wk(x).view(B, T, self.kv_heads, self.head_dim), cos, sin)
        v = self.wv(x).view(B, T, self.kv_heads, self.head_dim)
        y = causal_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    """Llama 3 as Meta/torchtitan: RMSNorm, rotary positions, SwiGLU, grouped-query attention, no biases."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = None if cfg.tie_embeddings else nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        # Not in the state dict; keep the model in float32 (autocast or an FSDP
        # mixed-precision policy lowers the matmuls) so the tables stay float32.
        cos, sin = rotary_table(cfg.max_seq_len, cfg.head_dim, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        _init_weights(self, ("attention.wo.weight", "feed_forward.w2.weight"), cfg.layers)

    def output_weight(self):
        return self.tok_embeddings.weight if self.output is None else self.output.weight

    def hidden(self, tokens):
        x = self.tok_embeddings(tokens)
        for block in self.layers:
            x = block(x, self.rope_cos, self.rope_sin)
        return self.norm(x)

    def forward(self, tokens):
        return F.linear(self.hidden(tokens), self.output_weight())

    def loss(self, tokens, targets):
        return _cross_entropy(self(tokens), targets)


def build(cfg):
    return GPT(cfg) if cfg.family == "gpt2" else Llama(cfg)


# safetensors: 8-byte little-endian header length, a JSON header, raw data.
_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool}
_NAMES = {dtype: name for name, dtype in _DTYPES.items()}


def load_safetensors(path):
    """(tensors by name, metadata) of a safetensors file, checked like dtrain's reader."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: {len(blob)} bytes, fewer than the 8-byte header length")
    (header_len,) = struct.unpack("<Q", blob[:8])
    if header_len > len(blob) - 8:
        raise ValueError(f"{path}: header length {header_len} exceeds the {len(blob) - 8} bytes after it")
    header = json.loads(blob[8:8 + header_len])
    data = memoryview(blob)[8 + header_len:]
    metadata = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, entry in header.items():
        if entry.get("dtype") not in _DTYPES:
            raise ValueError(f"{path}: tensor '{name}' has unknown dtype {entry.get('dtype')!r}")
        dtype, shape = _DTYPES[entry["dtype"]], entry["shape"]
        begin, end = entry["data_offsets"]
        size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        if not 0 <= begin <= end <= len(data) or end - begin != size:
            raise ValueError(f"{path}: tensor '{name}' data_offsets {[begin, end]} do not fit its "
                             f"{size} bytes within the {len(data)} data bytes")
        if size == 0:
            tensors[name] = torch.empty(shape, dtype=dtype)
        else:
            tensors[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype).reshape(shape)
    return tensors, metadata


def save_safetensors(path, tensors, metadata=None):
    header, chunks, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, tensor in tensors.items():
        t = tensor.detach().cpu().contiguous()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)


def config_from_metadata(metadata):
    ints = ("layers", "dim", "heads", "kv_heads", "ffn_dim", "max_seq_len", "seq_len", "vocab_size")
    cfg = LMConfig(name=metadata["name"], family=metadata["family"], **{k: int(metadata[k]) for k in ints},
                   tie_embeddings=metadata["tie_embeddings"] == "true", rope_theta=float(metadata["rope_theta"]),
                   norm_eps=float(metadata["norm_eps"]))
    _validate(cfg)
    return cfg


def reference_outputs(weights_path, batch_path, out_path):
    """Logits, loss and gradients of the model in weights_path on the batch (see the module's docstring)."""
    weights, metadata = load_safetensors(weights_path)
    model = build(config_from_metadata(metadata))
    model.load_state_dict(weights, strict=True)
    batch, _ = load_safetensors(batch_path)
    logits = model(batch["tokens"])
    loss = model.loss(batch["tokens"], batch["targets"])
    loss.backward()
    out = {"logits": logits, "loss": loss}
    out.update({"grad." + name: p.grad for name, p in model.named_parameters()})
    save_safetensors(out_path, out, {"torch": torch.__version__})


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weights", action="append", required=True, help="safetensors of a dtrain language model")
    parser.add_argument("--batch", action="append", required=True,
                        help="safetensors with int64 'tokens' and 'targets'")
    parser.add_argument("--out", action="append", required=True, help="where to write logits, loss and gradients")
    args = parser.parse_args()
    if not len(args.weights) == len(args.batch) == len(args.out):
        parser.error("give --weights, --batch and --out the same number of times")
    torch.manual_seed(0)
    for weights, batch, out in zip(args.weights, args.batch, args.out):
        reference_outputs(weights, batch, out)


if __name__ == "__main__":
    main()
