"""The peer of kernels_bench: the same operations in PyTorch, eager and
torch.compile'd, bf16, at the same shapes (rows = 16 * 1024), so dtrain's
fused kernels (src/models/kernels/) can be held against what torch.compile
generates for them.

Times forward alone (no autograd) and forward + backward (autograd, the
gradients of every input), replayed from a CUDA graph (triton's
do_bench_cudagraph, median, microseconds), so launch overhead does not count.
kernels_bench prints forward and backward apart: add them for the
forward + backward column.

  python3 bench/peers/torch_fused_ops.py [--rows N] [--no-compile]
"""
import argparse

import torch
import torch.nn.functional as F
import triton.testing


def timed(fn):
    """Median microseconds of fn replayed from a CUDA graph (no launch
    overhead, as dtrain's CUDA-graph step), else launched eagerly."""
    try:
        return triton.testing.do_bench_cudagraph(fn, rep=200, return_mode="median") * 1e3
    except Exception as e:  # some steps cannot be captured
        print(f"  (not capturable: {type(e).__name__}; timed eagerly)", flush=True)
        torch.cuda.synchronize()
        return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3


def residual_layernorm(x, res, w, b):
    h = x + res
    return h, F.layer_norm(h, (h.shape[-1],), w, b, 1e-5)


def residual_rmsnorm(x, res, w):
    h = x + res
    hf = h.float()
    y = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(h.dtype) * w
    return h, y


def bias_gelu(x, b):
    return F.gelu(x + b, approximate="tanh")


def swiglu(ab):
    a, b = ab.chunk(2, dim=-1)
    return F.silu(a) * b


def rope(q, k, freqs_cis):
    # Meta's apply_rotary_emb: adjacent pairs as complex numbers.
    qc = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
    kc = torch.view_as_complex(k.float().reshape(*k.shape[:-1], -1, 2))
    f = freqs_cis.view(1, q.shape[1], 1, -1)
    return (torch.view_as_real(qc * f).flatten(3).type_as(q), torch.view_as_real(kc * f).flatten(3).type_as(k))


def cross_entropy(logits, targets):
    return F.cross_entropy(logits.float(), targets, ignore_index=-100)


def run(name, shape, fn, inputs, grad_inputs, compile_):
    f = torch.compile(fn) if compile_ else fn
    with torch.no_grad():
        fwd = timed(lambda: f(*inputs))

    with torch.no_grad():
        sample = f(*inputs)
    grads = [torch.ones_like(o) if o.dim() == 0 else torch.full_like(o, 1e-3)
             for o in (sample if isinstance(sample, tuple) else (sample,))]
    del sample

    def step():
        for t in grad_inputs:
            t.grad = None
        out = f(*inputs)
        torch.autograd.backward(list(out) if isinstance(out, tuple) else [out], grads)

    both = timed(step)
    print(f"| {name:<28} | {shape:<22} | {'compile' if compile_ else 'eager':<7} | {fwd:9.1f} | {both:9.1f} |", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=16 * 1024)
    p.add_argument("--no-compile", action="store_true")
    args = p.parse_args()
    n = args.rows
    dev, bf = "cuda", torch.bfloat16
    torch.manual_seed(0)

    def r(*shape, grad=True):
        return torch.randn(*shape, device=dev, dtype=bf, requires_grad=grad)

    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, rows {n}, bf16")
    print("| op                           | shape                  | mode    |  fwd (us) | fwd+bwd (us) |")
    print("|------------------------------|------------------------|---------|----------:|----------:|")
    modes = [False] if args.no_compile else [False, True]
    for c in modes:
        x, res, w, b = r(n, 768), r(n, 768), r(768), r(768)
        run("gpt2 residual+layernorm", f"{n}x768", residual_layernorm, (x, res, w, b), (x, res, w, b), c)
        x, b = r(n, 3072), r(3072)
        run("gpt2 bias+gelu", f"{n}x3072", bias_gelu, (x, b), (x, b), c)
        logits = r(n, 50304)
        t = torch.randint(0, 50257, (n,), device=dev)
        run("gpt2 cross-entropy", f"{n}x50304", cross_entropy, (logits, t), (logits,), c)
        del logits
        x, res, w = r(n, 2048), r(n, 2048), r(2048)
        run("llama residual+rmsnorm", f"{n}x2048", residual_rmsnorm, (x, res, w), (x, res, w), c)
        ab = r(n, 2 * 8192)
        run("llama swiglu (packed)", f"{n}x8192", swiglu, (ab,), (ab,), c)
        del ab
        q, k = r(16, 1024, 32, 64), r(16, 1024, 8, 64)
        inv = 1.0 / (500000.0 ** (torch.arange(0, 64, 2, device=dev).float() / 64))
        freqs = torch.polar(torch.ones(1024, 32, device=dev), torch.outer(torch.arange(1024, device=dev).float(), inv))
        run("llama rope q+k", f"{n}x(32+8)x64", rope, (q, k, freqs), (q, k), c)
        logits = r(n, 128256)
        t = torch.randint(0, 128256, (n,), device=dev)
        run("llama cross-entropy", f"{n}x128256", cross_entropy, (logits, t), (logits,), c)
        del logits
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
