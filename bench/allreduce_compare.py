#!/usr/bin/env python3
"""Side-by-side table of `dtrain bench <collective> --json` and the PyTorch
peer's `--json` (bench/peers/torch_allreduce.py), with busbw ratios.

    bench/allreduce_compare.py dtrain.json torch.json [--min-bytes 64M] [--max-bytes 1G]

Prints a Markdown table: size, dtrain and torch out-of-place/in-place time
and busbw, and dtrain/torch busbw; then the mean ratio over sizes from
--min-bytes to --max-bytes.
"""
import argparse
import json
import sys

SUFFIX = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size_arg(text):
    t = text.upper()
    return int(t[:-1]) * SUFFIX[t[-1]] if t[-1] in SUFFIX else int(t)


def fmt_size(n):
    for unit, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult} {unit}"
    return f"{n} B"


def load(path):
    with open(path) as f:
        text = f.read()
    # The JSON document may follow log lines; start at the first "{" line.
    start = text.find("\n{")
    start = 0 if text.startswith("{") else start + 1
    if start < 0:
        sys.exit(f"{path}: no JSON document found")
    return json.loads(text[start:])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dtrain")
    p.add_argument("torch")
    p.add_argument("--min-bytes", type=size_arg, default=64 << 20)
    p.add_argument("--max-bytes", type=size_arg, default=None)
    a = p.parse_args()
    d, t = load(a.dtrain), load(a.torch)
    trows = {r["size"]: r for r in t["rows"]}
    print("| size | dtrain time out / in (us) | torch time out / in (us) "
          "| dtrain busbw out / in (GB/s) | torch busbw out / in (GB/s) | ratio out / in |")
    print("|---:|---:|---:|---:|---:|---:|")
    ratios = []
    for r in d["rows"]:
        q = trows.get(r["size"])
        if not q:
            continue
        do, di = r["out_of_place"]["busbw_gbps"], r["in_place"]["busbw_gbps"]
        to, ti = q["out_of_place"]["busbw_gbps"], q["in_place"]["busbw_gbps"]
        ro = do / to if to else float("nan")
        ri = di / ti if ti else float("nan")
        if r["size"] >= a.min_bytes and (a.max_bytes is None or r["size"] <= a.max_bytes):
            ratios += [ro, ri]
        times = (f"{r['out_of_place']['time_us']:.1f} / {r['in_place']['time_us']:.1f} | "
                 f"{q['out_of_place']['time_us']:.1f} / {q['in_place']['time_us']:.1f}")
        print(f"| {fmt_size(r['size'])} | {times} | {do:.2f} / {di:.2f} | {to:.2f} / {ti:.2f} | {ro:.3f} / {ri:.3f} |")
    if ratios:
        mean = sum(ratios) / len(ratios)
        span = f">= {fmt_size(a.min_bytes)}" if a.max_bytes is None else \
            f"{fmt_size(a.min_bytes)} - {fmt_size(a.max_bytes)}"
        print(f"\nmean dtrain/torch busbw ratio at {span}: {mean:.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {len(ratios)} measurements)")


if __name__ == "__main__":
    main()
