#!/usr/bin/env python3
"""Sum an Nsight Compute raw CSV (--metrics gpu__time_duration.sum --csv
--page raw) by kernel: calls and milliseconds per kernel name, largest first,
and by kind (torch.compile's Triton kernels, convolutions, matrix products
(cuDNN runs 1x1 convolutions as GEMMs), normalisation, max pool, attention,
our fused kernels, adds, elementwise, reductions, optimizer,
communication). The CSV may be mixed with other
output (ncu's own lines, the program's): rows are read from the header line
that starts with "ID" on.

  bench/gpu/kernel_table.py kernels.csv [ncu.log ...] [--steps 2] [--top 40]
  bench/gpu/kernel_table.py dtrain.ncu.log --second-half gather_kernel --steps 1

--second-half REGEX counts only the kernels from the first of the second
half of those whose names match REGEX (a kernel each step starts with, such
as the token embedding's gather): of a profile of a warm-up step and a timed
step, the timed one alone.
"""
import argparse
import csv
import io
import re
import sys
from collections import defaultdict

KINDS = [
    # torch.compile's kernels first: their names list every fused op
    # ("..._convolution_backward_native_batch_norm_backward...").
    ("Triton (torch.compile)", re.compile(r"^triton", re.I)),
    ("communication", re.compile(r"nccl|oneRankReduce", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|sdpa|efficient_attention", re.I)),
    ("max pool", re.compile(r"max_pool", re.I)),
    ("convolution", re.compile(r"conv|fprop|dgrad|wgrad|implicit_gemm|cudnn|nhwcAddPadding", re.I)),
    ("matmul", re.compile(r"gemm|cutlass|sm90_xmma|nvjet|cublas|wgmma|splitKreduce", re.I)),
    ("normalisation", re.compile(r"batch_norm|batchnorm|bn_(stats|apply|backward)|welford|reduce_column_partials",
                                 re.I)),
    ("dtrain fused", re.compile(r"dtrain|fused_(layer|rms|gelu|swiglu|rope|ce|cross|adam)", re.I)),
    ("add (residual gradients, gradient accumulation)", re.compile(r"CUDAFunctor_add", re.I)),
    ("optimizer", re.compile(r"adam|sgd|multi_tensor|foreach|addcmul", re.I)),
    ("reduction", re.compile(r"reduce|norm|softmax|sum", re.I)),
    ("copy / cast", re.compile(r"copy|cast|fill|cat|index", re.I)),
]


def kind_of(name):
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return "elementwise / other"


def rows(paths):
    for path in paths:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
        if start is None:
            continue
        body = [lines[start]] + [line for line in lines[start + 1:] if line.startswith('"')]
        for row in csv.DictReader(io.StringIO("\n".join(body))):
            yield row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--steps", type=float, default=2.0, help="steps the profile holds (per-step ms = total / steps)")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--second-half", metavar="REGEX", default="",
                    help="count from the first of the second half of the kernels matching REGEX")
    a = ap.parse_args()
    per_name = defaultdict(lambda: [0, 0.0])
    unit_scale = None
    table = list(rows(a.files))
    if a.second_half:
        marks = [i for i, row in enumerate(table) if re.search(a.second_half, row.get("Kernel Name", ""))]
        if len(marks) < 2:
            print(f"--second-half {a.second_half}: {len(marks)} matching kernels, need 2 or more")
            return 1
        # the units row (first) stays: it names the duration's unit
        table = table[:1] + table[marks[len(marks) // 2]:]
    for row in table:
        value = row.get("gpu__time_duration.sum", "")
        if unit_scale is None and not re.match(r"^[0-9.,]+$", value or ""):
            unit_scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0}.get(value.strip(), 1e-6)
            continue
        try:
            ms = float(value.replace(",", "")) * (unit_scale or 1e-6)
        except ValueError:
            continue
        name = row.get("Kernel Name", "?")
        entry = per_name[name]
        entry[0] += 1
        entry[1] += ms
    if not per_name:
        print("no kernel rows found in", ", ".join(a.files))
        return 1
    total = sum(ms for _, ms in per_name.values())
    per_kind = defaultdict(float)
    for name, (_, ms) in per_name.items():
        per_kind[kind_of(name)] += ms
    print(f"# {sum(c for c, _ in per_name.values())} kernels, {total:.1f} ms in all, {total / a.steps:.2f} ms per step")
    width = max(len(kind) for kind in per_kind)
    print(f"# {'kind':<{width}} {'ms/step':>9} {'share':>7}")
    for kind, ms in sorted(per_kind.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:<{width}} {ms / a.steps:9.2f} {100 * ms / total:6.1f}%")
    print(f"# {'calls':>6} {'ms/step':>9} {'us/call':>9}  kernel")
    for name, (count, ms) in sorted(per_name.items(), key=lambda kv: -kv[1][1])[: a.top]:
        print(f"  {count:6d} {ms / a.steps:9.3f} {1e3 * ms / count:9.1f}  {name[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
