"""FP8 training for the PyTorch peer (lm_peer.py --float8): the transformer
blocks' nn.Linear layers swapped for float8 ones, the head, embeddings,
norms and attention left in bf16, as dtrain's --precision fp8 does.

torchao's float8 training where it is installed (convert_to_float8_training
with the tensorwise recipe; under FSDP2 its float8 all-gather and the
per-step scale precomputation, as torchtitan enables them). Where torchao is
absent, a Float8Linear of this file's own over torch._scaled_mm with the
same recipe: dynamic tensorwise scales from each tensor's absolute maximum,
e4m3 for inputs and weights, e5m2 for the output's gradient, fast
accumulation in forward only; torch.compile around each block fuses its
casts and amax reductions into neighbouring kernels. --float8-recipe
rowwise: torchao's rowwise recipe (power-of-two scales per row of each
product's operands, e4m3 throughout), as dtrain's --fp8-recipe rowwise.
"""
from typing import Callable, Optional, Tuple

import torch
import torch.nn as nn

E4M3_MAX = 448.0
E5M2_MAX = 57344.0


def torchao_float8():
    """(convert_to_float8_training, Float8LinearConfig, precompute) from torchao, or None."""
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp
    except Exception:  # ImportError, or a torchao built for another torch
        return None
    return convert_to_float8_training, Float8LinearConfig, precompute_float8_dynamic_scale_for_fsdp


def _cast(t: torch.Tensor, dtype: torch.dtype, limit: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """t in float8 and its scale (value = data / scale)."""
    wide = t.float()
    scale = limit / wide.abs().max().clamp(min=1e-12)
    return (wide * scale).clamp(-limit, limit).to(dtype), scale


class _Float8Mm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor):
        rows = x.reshape(-1, x.shape[-1])
        x8, sx = _cast(rows, torch.float8_e4m3fn, E4M3_MAX)
        w8, sw = _cast(w, torch.float8_e4m3fn, E4M3_MAX)
        out_dtype = torch.bfloat16 if torch.is_autocast_enabled() else x.dtype
        y = torch._scaled_mm(x8, w8.t(), scale_a=sx.reciprocal(), scale_b=sw.reciprocal(),
                             out_dtype=out_dtype, use_fast_accum=True)
        ctx.save_for_backward(x8, sx, w8, sw)
        ctx.w_dtype = w.dtype
        return y.view(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        x8, sx, w8, sw = ctx.saved_tensors
        rows = g.reshape(-1, g.shape[-1])
        g8, sg = _cast(rows, torch.float8_e5m2, E5M2_MAX)
        dx = torch._scaled_mm(g8, w8.t().contiguous().t(), scale_a=sg.reciprocal(), scale_b=sw.reciprocal(),
                              out_dtype=g.dtype)
        dw = torch._scaled_mm(g8.t().contiguous(), x8.t().contiguous().t(), scale_a=sg.reciprocal(),
                              scale_b=sx.reciprocal(), out_dtype=ctx.w_dtype)
        return dx.view(*g.shape[:-1], w8.shape[1]), dw


def _cast_axis(t: torch.Tensor, dim: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """t in e4m3 scaled per slice (the scale from the maximum along `dim`,
    rounded down to a power of two, as torchao's rowwise recipe), and the
    scales (keepdim)."""
    wide = t.float()
    scale = E4M3_MAX / wide.abs().amax(dim=dim, keepdim=True).clamp(min=1e-12)
    scale = torch.exp2(torch.floor(torch.log2(scale)))
    return (wide * scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), scale


class _Float8MmRowwise(torch.autograd.Function):
    """Rowwise (axiswise) scaling: each product's operands scaled along its
    outer dimensions, e4m3 throughout, bf16 out (what row-scaled
    torch._scaled_mm gives); x and W kept in their own dtype and cast again
    along the other axis in backward, as torchao does."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor):
        rows = x.reshape(-1, x.shape[-1])
        x8, sx = _cast_axis(rows, 1)  # [M, 1]
        w8, sw = _cast_axis(w, 1)  # [N, 1]
        y = torch._scaled_mm(x8, w8.t(), scale_a=sx.reciprocal(), scale_b=sw.reciprocal().t(),
                             out_dtype=torch.bfloat16, use_fast_accum=True)
        ctx.save_for_backward(rows, w)
        return y.view(*x.shape[:-1], w.shape[0]).to(x.dtype if not torch.is_autocast_enabled() else torch.bfloat16)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        rows, w = ctx.saved_tensors
        grows = g.reshape(-1, g.shape[-1])
        g8, sg = _cast_axis(grows, 1)  # [M, 1]
        wc8, swc = _cast_axis(w, 0)  # [1, K]
        dx = torch._scaled_mm(g8, wc8.t().contiguous().t(), scale_a=sg.reciprocal(), scale_b=swc.reciprocal(),
                              out_dtype=torch.bfloat16)
        gc8, sgc = _cast_axis(grows, 0)  # [1, N]
        xc8, sxc = _cast_axis(rows, 0)  # [1, K]
        dw = torch._scaled_mm(gc8.t().contiguous(), xc8.t().contiguous().t(), scale_a=sgc.reciprocal().t(),
                              scale_b=sxc.reciprocal(), out_dtype=torch.bfloat16)
        return dx.view(*g.shape[:-1], w.shape[1]).to(g.dtype), dw.to(w.dtype)


class Float8Linear(nn.Linear):
    """nn.Linear whose product runs in float8 (tensorwise dynamic scaling,
    or rowwise with rowwise=True)."""

    rowwise = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = (_Float8MmRowwise if self.rowwise else _Float8Mm).apply(x, self.weight)
        return y + self.bias.to(y.dtype) if self.bias is not None else y


def _fits(m: nn.Linear) -> bool:
    """cuBLASLt's float8 products want dimensions that are multiples of 16."""
    return m.in_features % 16 == 0 and m.out_features % 16 == 0


def swap_block_linears(blocks: nn.Module, rowwise: bool = False) -> int:
    """Every fitting nn.Linear inside the blocks becomes a Float8Linear
    sharing its parameters; the number swapped."""
    swapped = 0
    for block in blocks.children():
        for name, child in list(block.named_modules()):
            for attr, sub in list(child.named_children()):
                if type(sub) is nn.Linear and _fits(sub):
                    f8 = Float8Linear(sub.in_features, sub.out_features, bias=sub.bias is not None,
                                      device="meta")
                    f8.weight = sub.weight
                    f8.rowwise = rowwise
                    if sub.bias is not None:
                        f8.bias = sub.bias
                    setattr(child, attr, f8)
                    swapped += 1
    return swapped


def apply_float8(model: nn.Module, blocks: nn.Module, fsdp2: bool, note: Callable[[str], None],
                 recipe: str = "tensorwise") -> Optional[Callable]:
    """Float8 for the blocks' linear layers, before compilation and FSDP2.
    Returns a callable to run after each optimizer step (torchao's scale
    precomputation under FSDP2), or None."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        raise SystemExit(f"lm_peer: --float8 needs torch._scaled_mm and float8 types; torch {torch.__version__}")
    ao = torchao_float8()
    if ao is not None:
        convert, Config, precompute = ao
        if recipe == "rowwise":
            config = Config.from_recipe_name("rowwise")
            block_ids = {id(m) for b in blocks.children() for m in b.modules()}
            convert(model, config=config, module_filter_fn=lambda m, fqn: id(m) in block_ids and _fits(m))
            note("float8: torchao convert_to_float8_training (rowwise)")
            return None
        config = Config(enable_fsdp_float8_all_gather=fsdp2)
        block_ids = {id(m) for b in blocks.children() for m in b.modules()}
        convert(model, config=config, module_filter_fn=lambda m, fqn: id(m) in block_ids and _fits(m))
        note("float8: torchao convert_to_float8_training (tensorwise" +
             (", float8 all-gather, precomputed scales)" if fsdp2 else ")"))
        return (lambda: precompute(model)) if fsdp2 else None
    swapped = swap_block_linears(blocks, rowwise=recipe == "rowwise")
    note(f"float8: torchao absent; {swapped} block linears swapped for this peer's Float8Linear "
         f"(torch._scaled_mm, {recipe} dynamic scaling, bf16 all-gather under FSDP2)")
    return None
