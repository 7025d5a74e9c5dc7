#!/usr/bin/env python3
"""Language-model training throughput: `dtrain bench train --model <lm>`
against its PyTorch peer (bench/peers/lm_peer.py: torch.compile, SDPA, fused
AdamW, bf16, DDP or FSDP2, synthetic tokens resident on the GPU), the same
model, sequence length, per-GPU batch, precision and step counts, for each
GPU count, in one run on one machine.

    bench/lm_compare.py --dtrain build/dtrain --config gpt2-124m 1024 16 1,2 \\
        --config llama-1b 2048 4 1 --steps 40 --warmup 10 --rounds 2 --out lm.json

Each round runs, for every configuration and GPU count G,
`dtrain bench train --gpus G --model M --seq-len T --batch-size B ... --json`
and the peer under `python3 -m torch.distributed.run --standalone
--nproc_per_node G` (or `dtrain launch --standalone --nproc-per-node G` with
--peer-launcher dtrain), dtrain first in even rounds and the peer first in
odd ones, so that drift hits both. Round 1 covers every configuration before
round 2 starts; with --deadline-s a later round's pair is skipped when the
time left cannot hold what it took last round (torch.compile's first
compilation dominates round 1; later rounds hit Inductor's on-disk cache).

A failed command does not end the run: it is recorded (exit code, output
tail) and its cells read "failed", so one side's numbers still come out.
Prints the exact commands and versions as `#` lines, then a Markdown table of
medians over rounds:

| config | GPUs | dtrain tok/s | peer tok/s | dtrain/peer | dtrain MFU | peer MFU | dtrain step ms |
  peer step ms | dtrain mem GiB | peer mem GiB | dtrain scaling | peer scaling |

scaling = tokens/s(G) / (G * tokens/s(1)), when G=1 was measured; memory is
the peak allocated per GPU (the largest over rounds). JSON fields read:
dtrain's result row (results[] where gpus == G) tokens_per_s (else
samples_per_s * seq_len), step_ms, mfu, peak_memory_bytes, loss; the
peer's gpus, tokens_per_s, step_ms, step_ms_p50, mfu, peak_memory_bytes,
peak_memory_reserved_bytes, loss, warmup_s, notes, versions. Every raw
result goes to --out. NCCL_NVLS_ENABLE defaults to 0 for both sides.
"""
import argparse
import dataclasses
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

from train_bench_compare import find_json, joined_pass_through, shown_path, tail

HERE = os.path.dirname(os.path.abspath(__file__))
PEER = os.path.join(HERE, "peers", "lm_peer.py")
PEER_PP = os.path.join(HERE, "peers", "lm_pp_peer.py")  # --parallel pp: torch.distributed.pipelining
PEER_TP = os.path.join(HERE, "peers", "lm_tp_peer.py")  # --parallel tp: DTensor TP (+ FSDP2) as torchtitan
IMPLS = ("dtrain", "peer")


@dataclasses.dataclass
class Config:
    model: str
    seq_len: int
    batch_size: int
    gpus: List[int]

    @property
    def label(self) -> str:
        return f"{self.model} seq {self.seq_len} batch {self.batch_size}"


@dataclasses.dataclass
class Outcome:
    """One command's run: its result row, or why there is none."""
    ok: bool
    wall_s: float
    row: Optional[dict] = None
    error: str = ""


def parse_config(spec: List[str], p: argparse.ArgumentParser) -> Config:
    model, seq_len, batch, gpus = spec
    try:
        cfg = Config(model, int(seq_len), int(batch), [int(g) for g in gpus.split(",")])
    except ValueError:
        p.error(f"--config {' '.join(spec)}: expected MODEL SEQ_LEN BATCH GPUS, e.g. gpt2-124m 1024 16 1,2")
    if cfg.seq_len < 1 or cfg.batch_size < 1 or any(g < 1 for g in cfg.gpus):
        p.error(f"--config {' '.join(spec)}: sequence length, batch and GPU counts must be >= 1")
    return cfg


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtrain", default="build/dtrain", help="the dtrain binary (default build/dtrain)")
    p.add_argument("--python", default=sys.executable, help="the Python that runs the peer (default: this one)")
    p.add_argument("--peer-launcher", default="torchrun", choices=["torchrun", "dtrain"],
                   help="start the peer's processes with torch.distributed.run (default) or `dtrain launch`")
    p.add_argument("--config", action="append", nargs=4, metavar=("MODEL", "SEQ_LEN", "BATCH", "GPUS"),
                   help="a configuration, repeatable: model, tokens per sequence, sequences per GPU, GPU counts "
                        "(comma list); default gpt2-124m 1024 16 1,2")
    p.add_argument("--steps", type=int, default=40, help="timed steps, both sides (default 40)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first, both sides (default 10)")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp32", "fp8"],
                   help="fp8: dtrain --precision fp8, the peer bf16 with --float8 (the blocks' linear layers)")
    p.add_argument("--compile", default="default", choices=["none", "default", "max-autotune-no-cudagraphs"],
                   help="the peer's torch.compile mode (default: default)")
    p.add_argument("--parallel", default="ddp", choices=["ddp", "fsdp2", "tp", "pp"],
                   help="the peer's parallelism: DDP, FSDP2, tensor parallelism (bench/peers/lm_tp_peer.py; "
                        "give --tp N to both sides with --dtrain-args and --peer-args) or pipeline parallelism "
                        "(bench/peers/lm_pp_peer.py; --pp, --microbatches, --pp-schedule, --pp-split likewise)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--deadline-s", type=float, default=0,
                   help="seconds this run may take (0: no limit); later rounds skip what no longer fits")
    p.add_argument("--dtrain-args", default="", help="extra flags for `dtrain bench train`, one string")
    p.add_argument("--peer-args", default="", help="extra flags for the peer, one string")
    p.add_argument("--timeout", type=float, default=1200, help="seconds per command (default 1200)")
    p.add_argument("--out", default="", help="write every raw result, the commands and the versions here")
    a = p.parse_args(joined_pass_through(sys.argv[1:]))
    if a.rounds < 1 or a.steps < 1 or a.warmup < 0:
        p.error("--rounds and --steps must be >= 1, --warmup >= 0")
    a.configs = [parse_config(s, p) for s in (a.config or [["gpt2-124m", "1024", "16", "1,2"]])]
    return a


def dtrain_command(a: argparse.Namespace, cfg: Config, gpus: int) -> List[str]:
    return ([a.dtrain, "bench", "train", "--gpus", str(gpus), "--model", cfg.model, "--seq-len", str(cfg.seq_len),
             "--batch-size", str(cfg.batch_size), "--steps", str(a.steps), "--warmup", str(a.warmup),
             "--precision", a.precision, "--json"] + shlex.split(a.dtrain_args))


def peer_command(a: argparse.Namespace, cfg: Config, gpus: int, result_file: str) -> List[str]:
    if a.peer_launcher == "torchrun":
        launch = [a.python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(gpus)]
    else:
        launch = [a.dtrain, "launch", "--standalone", "--nproc-per-node", str(gpus), a.python]
    script, parallel = {"tp": (PEER_TP, []), "pp": (PEER_PP, [])}.get(a.parallel, (PEER, ["--parallel", a.parallel]))
    return (launch + [shown_path(script), "--model", cfg.model, "--seq-len", str(cfg.seq_len),
                      "--batch-size", str(cfg.batch_size), "--steps", str(a.steps), "--warmup-steps", str(a.warmup),
                      "--precision", "bf16" if a.precision == "fp8" else a.precision, "--compile", a.compile] +
            (["--float8"] if a.precision == "fp8" else []) + parallel +
            ["--json", result_file] + shlex.split(a.peer_args))


def run_command(cmd: List[str], env: dict, timeout: float) -> Tuple[int, str, str, float]:
    """Exit code (124 on timeout, 127 when it cannot start), stdout, stderr, wall seconds. The
    command runs in its own session so that a timeout ends its workers too, not only the launcher."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)
    except OSError as e:
        return 127, "", str(e), time.perf_counter() - t0
    try:
        out, err = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
            try:
                os.killpg(proc.pid, sig)
                out, err = proc.communicate(timeout=grace)
                break
            except ProcessLookupError:
                out, err = proc.communicate()
                break
            except subprocess.TimeoutExpired:
                continue
        code, err = 124, (err or "") + f"\n(timed out after {timeout:.0f} s)"
    return code, out or "", err or "", time.perf_counter() - t0


def failure(cmd: List[str], code: int, out: str, err: str, why: str) -> str:
    return (f"{why} (exit {code}): {shlex.join(cmd)}\n--- stdout (tail) ---\n{tail(out)}\n"
            f"--- stderr (tail) ---\n{tail(err)}")


def dtrain_row(doc: Optional[dict], gpus: int, seq_len: int) -> Optional[dict]:
    """dtrain's result row for `gpus`, with tokens_per_s derived from samples_per_s if it has none."""
    rows = [r for r in (doc or {}).get("results", []) if r.get("gpus") == gpus]
    if not rows:
        return None
    row = dict(rows[0])
    if not isinstance(row.get("tokens_per_s"), (int, float)) and isinstance(row.get("samples_per_s"), (int, float)):
        row["tokens_per_s"] = row["samples_per_s"] * seq_len
        row["tokens_per_s_derived"] = "samples_per_s * seq_len"
    return row


def measure(impl: str, a: argparse.Namespace, cfg: Config, gpus: int, env: dict, timeout: float,
            workdir: str) -> Tuple[List[str], Outcome]:
    """Runs one side once; the command and its outcome."""
    if impl == "dtrain":
        cmd = dtrain_command(a, cfg, gpus)
    else:
        result_file = os.path.join(workdir, f"peer-{cfg.model}-{gpus}-{time.monotonic_ns()}.json")
        cmd = peer_command(a, cfg, gpus, result_file)
    code, out, err, wall = run_command(cmd, env, timeout)
    if code != 0:
        return cmd, Outcome(False, wall, error=failure(cmd, code, out, err, "failed"))
    if impl == "dtrain":
        row = dtrain_row(find_json(out, "results"), gpus, cfg.seq_len)
    else:
        try:
            with open(result_file) as f:
                row = json.loads(f.readline())
        except (OSError, ValueError):
            row = None
        if row is not None and row.get("gpus") != gpus:
            return cmd, Outcome(False, wall, error=f"the peer ran on {row.get('gpus')} GPU(s), asked for {gpus}")
    missing = [k for k in ("tokens_per_s", "step_ms") if not isinstance((row or {}).get(k), (int, float))]
    if row is None or missing:
        why = f"no result row for {gpus} GPU(s)" if row is None else f"no {', '.join(missing)} in the result"
        return cmd, Outcome(False, wall, row=row, error=failure(cmd, code, out, err, why))
    return cmd, Outcome(True, wall, row=row)


def median_of(runs: List[dict], key: str) -> Optional[float]:
    xs = [r["row"][key] for r in runs if isinstance(r["row"].get(key), (int, float))]
    return statistics.median(xs) if xs else None


def max_of(runs: List[dict], key: str) -> Optional[float]:
    xs = [r["row"][key] for r in runs if isinstance(r["row"].get(key), (int, float))]
    return max(xs) if xs else None


def summarize(cfg: Config, runs: List[dict]) -> List[dict]:
    """One row per GPU count: medians over the rounds that succeeded, scaling against 1 GPU."""
    stats: Dict[Tuple[str, int], dict] = {}
    for impl in IMPLS:
        for g in cfg.gpus:
            ok = [r for r in runs if r["impl"] == impl and r["gpus"] == g and r["ok"]]
            if ok:
                stats[impl, g] = {"rounds": len(ok), "tokens_per_s": median_of(ok, "tokens_per_s"),
                                  "step_ms": median_of(ok, "step_ms"), "mfu": median_of(ok, "mfu"),
                                  "peak_memory_bytes": max_of(ok, "peak_memory_bytes")}
    rows = []
    for g in cfg.gpus:
        row = {"config": cfg.label, "gpus": g}
        for impl in IMPLS:
            s = stats.get((impl, g))
            one = stats.get((impl, 1))
            if s and one:
                s["scaling"] = s["tokens_per_s"] / (g * one["tokens_per_s"])
            row[impl] = s
        both = row["dtrain"] and row["peer"]
        row["ratio"] = row["dtrain"]["tokens_per_s"] / row["peer"]["tokens_per_s"] if both else None
        rows.append(row)
    return rows


def cell(stats: Optional[dict], key: str, fmt) -> str:
    if stats is None:
        return "failed"
    value = stats.get(key)
    return "-" if value is None else fmt(value)


def print_table(rows: List[dict]) -> None:
    tokens = lambda v: f"{v:,.0f}"  # noqa: E731
    pct = lambda v: f"{100 * v:.1f}%"  # noqa: E731
    ms = lambda v: f"{v:.1f}"  # noqa: E731
    gib = lambda v: f"{v / 2**30:.1f}"  # noqa: E731
    print("| config | GPUs | dtrain tok/s | peer tok/s | dtrain/peer | dtrain MFU | peer MFU | dtrain step ms | "
          "peer step ms | dtrain mem GiB | peer mem GiB | dtrain scaling | peer scaling |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        d, t = r["dtrain"], r["peer"]
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
        print(f"| {r['config']} | {r['gpus']} | {cell(d, 'tokens_per_s', tokens)} | "
              f"{cell(t, 'tokens_per_s', tokens)} | "
              f"{ratio} | {cell(d, 'mfu', pct)} | {cell(t, 'mfu', pct)} | {cell(d, 'step_ms', ms)} | "
              f"{cell(t, 'step_ms', ms)} | {cell(d, 'peak_memory_bytes', gib)} | {cell(t, 'peak_memory_bytes', gib)} | "
              f"{cell(d, 'scaling', pct)} | {cell(t, 'scaling', pct)} |")


def print_header(a: argparse.Namespace, state: dict) -> None:
    print(f"# {a.rounds} round(s) asked, medians of those that ran; {a.steps} timed steps after {a.warmup} "
          f"warm-up, {a.precision}; peer: compile {a.compile}, {a.parallel}, launched by {a.peer_launcher}")
    print(f"# environment: NCCL_NVLS_ENABLE={state['env']['NCCL_NVLS_ENABLE']}")
    for key, c in state["commands"].items():
        print(f"# dtrain ({key}): {c['dtrain']}")
        print(f"# peer   ({key}): {c['peer']}")
    seen = []
    for r in state["runs"]:
        if r["ok"] and r["impl"] == "peer":
            row = r["row"]
            v = {"versions": row.get("versions"), "notes": row.get("notes"),
                 "optimizer": row.get("config", {}).get("optimizer_impl")}
            if v not in seen:
                seen.append(v)
                print(f"# peer: {json.dumps(v['versions'])}, AdamW {v['optimizer']}; notes: {v['notes'] or 'none'}")
    for r in state["runs"]:
        if r["ok"] and r["impl"] == "peer":
            print(f"# peer {r['config']} {r['gpus']} GPU(s) round {r['round'] + 1}: warm-up (compilation) "
                  f"{r['row'].get('warmup_s', 0):.0f} s, step p50 {r['row'].get('step_ms_p50', 0):.1f} ms")
    skipped = [f"{s['config']} {s['gpus']} GPU(s) round {s['round'] + 1}" for s in state["skipped"]]
    if skipped:
        print(f"# skipped for the deadline: {', '.join(skipped)}")
    failed = [r for r in state["runs"] if not r["ok"]]
    for r in failed:
        print(f"# FAILED {r['impl']} {r['config']} {r['gpus']} GPU(s) round {r['round'] + 1}: "
              f"{r['error'].splitlines()[0]}")
    print()


def save(state: dict, path: str) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(state, f, indent=1)


def fits(state: dict, cfg: Config, gpus: int, left_s: float) -> bool:
    """Whether the pair (dtrain and peer) took less, last round, than the time left."""
    last = [r["wall_s"] for r in state["runs"] if r["config"] == cfg.label and r["gpus"] == gpus]
    return not last or sum(last[-2:]) < left_s


class Clock:
    """Time left before --deadline-s; a command's timeout within it (30 s at least)."""

    def __init__(self, deadline_s: float, timeout_s: float):
        self.start, self.deadline_s, self.timeout_s = time.monotonic(), deadline_s, timeout_s

    def left(self) -> float:
        return self.deadline_s - (time.monotonic() - self.start) if self.deadline_s else float("inf")

    def timeout(self) -> float:
        return max(30.0, min(self.timeout_s, self.left()))


def run_pair(a: argparse.Namespace, state: dict, cfg: Config, gpus: int, rnd: int, env: dict, clock: Clock,
             workdir: str) -> None:
    """dtrain and the peer on one configuration and GPU count, in this round's order."""
    commands = state["commands"].setdefault(f"{cfg.label}, {gpus} GPU(s)", {})
    commands["dtrain"] = shlex.join(dtrain_command(a, cfg, gpus))
    commands["peer"] = shlex.join(peer_command(a, cfg, gpus, "FILE"))
    for impl in (IMPLS if rnd % 2 == 0 else tuple(reversed(IMPLS))):
        _, outcome = measure(impl, a, cfg, gpus, env, clock.timeout(), workdir)
        state["runs"].append({"round": rnd, "config": cfg.label, "gpus": gpus, "impl": impl, "ok": outcome.ok,
                              "wall_s": outcome.wall_s, "row": outcome.row or {}, "error": outcome.error})
        result = f"{outcome.row['tokens_per_s']:,.0f} tokens/s" if outcome.ok else "FAILED"
        print(f"# round {rnd + 1}/{a.rounds} {cfg.label} {gpus} GPU(s) {impl}: {result} ({outcome.wall_s:.0f} s)",
              file=sys.stderr, flush=True)
        if not outcome.ok:
            print(outcome.error, file=sys.stderr, flush=True)
        save(state, a.out)


def main() -> None:
    a = parse_args()
    clock = Clock(a.deadline_s, a.timeout)
    env = dict(os.environ)
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    state = {"args": {k: v for k, v in vars(a).items() if k != "configs"},
             "configs": [dataclasses.asdict(c) for c in a.configs],
             "env": {"NCCL_NVLS_ENABLE": env["NCCL_NVLS_ENABLE"]},
             "commands": {}, "runs": [], "skipped": [], "rows": []}
    with tempfile.TemporaryDirectory(prefix="lm-compare-") as workdir:
        for rnd in range(a.rounds):  # round 1 covers every configuration before round 2 starts
            for cfg in a.configs:
                for g in cfg.gpus:
                    if rnd > 0 and not fits(state, cfg, g, clock.left()):
                        state["skipped"].append({"config": cfg.label, "gpus": g, "round": rnd})
                        continue
                    run_pair(a, state, cfg, g, rnd, env, clock, workdir)
    for cfg in a.configs:
        state["rows"] += summarize(cfg, [r for r in state["runs"] if r["config"] == cfg.label])
    print_header(a, state)
    print_table(state["rows"])
    save(state, a.out)
    sys.exit(0 if all(r["ok"] for r in state["runs"]) else 1)


if __name__ == "__main__":
    main()
