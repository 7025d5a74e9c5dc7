#!/usr/bin/env python3
"""Training-step throughput: `dtrain bench train` against its PyTorch DDP peer
(bench/peers/torch_ddp_bench.py: torchvision ResNet, SGD, synthetic data
resident on the GPU), same model, image size, per-GPU batch, precision and
memory format, for each GPU count, in one run on one machine.

    bench/train_bench_compare.py --dtrain build/dtrain --gpus 1,2,4 --model resnet50 \
        --image-size 32 --batch-size 64 --precision fp32 --steps 100 --warmup 20 \
        --rounds 3 --out results.json
    bench/train_bench_compare.py --configs seed --out seed.json   # the issue's (a), (b), (c)

Each round runs, for each GPU count G, `dtrain bench train --gpus G ... --json`
and `torchrun --standalone --nproc-per-node G bench/peers/torch_ddp_bench.py
... --json`, dtrain first in even rounds and the peer first in odd ones, so
that drift hits both. Per configuration it prints the exact commands and the
peer's versions as `#` comment lines, then a Markdown table of the medians
over rounds:

| GPUs | dtrain samples/s | dtrain step ms | dtrain scaling | DDP samples/s | DDP step ms | DDP scaling | dtrain/DDP |

scaling = samples/s(G) / (G * samples/s(1)) from the medians, when G=1 was
measured; dtrain/DDP is the ratio of the median samples/s. --compiled-peer
adds the peer under torch.compile (bench/peers/torch_ddp_bench.py --compile:
reduce-overhead on 1 GPU, max-autotune-no-cudagraphs under DDP), run in the
same rounds, with its own columns and dtrain/compiled ratio; goals marked
"vs": "compiled" (the --configs cnn* set) are judged against it. --configs seed
adds a goal column (met/missed). Every raw JSON result, the commands and the
versions go to --out. NCCL_NVLS_ENABLE defaults to 0 for both sides. A
failed command ends the run (exit 1) with the command and its output's tail.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PEER = os.path.join(HERE, "peers", "torch_ddp_bench.py")
DEFAULT_STEPS, DEFAULT_WARMUP = 100, 20

# The three configurations. The goals: dtrain/DDP samples/s at every
# measured GPU count, and dtrain's scaling efficiency at `at` GPUs.
SEED = {
    "a": {"label": "(a) resnet50 32x32, batch 64/GPU, fp32", "model": "resnet50", "image_size": 32,
          "batch_size": 64, "precision": "fp32", "channels_last": False,
          "goal": {"ratio": 3.0}},
    "b": {"label": "(b) resnet50 32x32, batch 256/GPU, bf16, channels-last", "model": "resnet50",
          "image_size": 32, "batch_size": 256, "precision": "bf16", "channels_last": True,
          "goal": {"ratio": 1.5, "scaling": 0.95, "at": 4}},
    "c": {"label": "(c) resnet50 224x224, batch 128/GPU, bf16, channels-last", "model": "resnet50",
          "image_size": 224, "batch_size": 128, "precision": "bf16", "channels_last": True,
          "steps": 30, "warmup": 10, "goal": {"ratio": 1.1, "scaling": 0.97, "at": 4}},
    # Against torch.compile (run with --compiled-peer).
    "cnn224": {"label": "ResNet-50 224x224, batch 128/GPU, bf16, channels-last", "model": "resnet50",
               "image_size": 224, "batch_size": 128, "precision": "bf16", "channels_last": True,
               "steps": 30, "warmup": 10, "goal": {"ratio": 1.1, "scaling": 0.98, "at": 2, "vs": "compiled"}},
    "cnn32b": {"label": "ResNet-50 32x32, batch 256/GPU, bf16, channels-last", "model": "resnet50",
               "image_size": 32, "batch_size": 256, "precision": "bf16", "channels_last": True,
               "goal": {"ratio": 1.3, "vs": "compiled"}},
    "cnn32a": {"label": "ResNet-50 32x32, batch 64/GPU, fp32", "model": "resnet50", "image_size": 32,
               "batch_size": 64, "precision": "fp32", "channels_last": False,
               "goal": {"ratio": 1.5, "vs": "compiled"}},
}
PEER_NAMES = {"ddp": "DDP", "compiled": "compiled"}


def compile_mode(gpus):
    return "reduce-overhead" if gpus == 1 else "max-autotune-no-cudagraphs"


def joined_pass_through(args, flags=("--dtrain-args", "--peer-args")):
    """args with each of `flags` joined to its value: argparse takes a value
    starting with "--" (e.g. --peer-args --cudnn-benchmark) only as
    "--peer-args=--cudnn-benchmark"."""
    out, i = [], 0
    while i < len(args):
        if args[i] in flags and i + 1 < len(args):
            out.append(f"{args[i]}={args[i + 1]}")
            i += 2
        else:
            out.append(args[i])
            i += 1
    return out


def shown_path(path):
    """The path as run and printed: relative to the working directory when inside it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def fail(msg, state, a):
    save(state, a)
    sys.exit(msg)


def tail(text, lines=40, chars=6000):
    return "\n".join(text.splitlines()[-lines:])[-chars:]


def find_json(text, key):
    """The last JSON object in `text` that starts a line and has `key`."""
    dec, found, pos = json.JSONDecoder(), None, 0
    while True:
        i = text.find("{", pos)
        if i < 0:
            return found
        pos = i + 1
        if i and text[i - 1] != "\n":
            continue
        try:
            obj, end = dec.raw_decode(text, i)
        except ValueError:
            continue
        if isinstance(obj, dict) and key in obj:
            found = obj
        pos = end


def run(cmd, env, timeout, state, a):
    shown = shlex.join(cmd)
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout or None)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        fail(f"timed out after {timeout} s: {shown}\n--- stdout (tail) ---\n{tail(out)}\n"
             f"--- stderr (tail) ---\n{tail(err)}", state, a)
    except OSError as e:
        fail(f"could not run: {shown}\n{e}", state, a)
    if r.returncode != 0:
        fail(f"failed (exit {r.returncode}): {shown}\n--- stdout (tail) ---\n{tail(r.stdout)}\n"
             f"--- stderr (tail) ---\n{tail(r.stderr)}", state, a)
    return r.stdout, r.stderr, time.perf_counter() - t0


def commands(a, cfg, gpus):
    common = ["--model", cfg["model"], "--image-size", str(cfg["image_size"]),
              "--batch-size", str(cfg["batch_size"]), "--precision", cfg["precision"]]
    common += ["--channels-last"] if cfg["channels_last"] else []
    common += ["--steps", str(cfg["steps"]), "--warmup", str(cfg["warmup"]), "--json"]
    dtrain = [a.dtrain, "bench", "train", "--gpus", str(gpus)] + common + shlex.split(a.dtrain_args)
    peer = (shlex.split(a.torchrun) + ["--standalone", "--nproc-per-node", str(gpus), shown_path(PEER)]
            + common + shlex.split(a.peer_args))
    cmds = {"dtrain": dtrain, "ddp": peer}
    if a.compiled_peer:
        cmds["compiled"] = peer + ["--compile", compile_mode(gpus)]
    return cmds


def measure(impl, cmd, gpus, env, state, a):
    out, err, wall = run(cmd, env, a.timeout, state, a)
    shown = shlex.join(cmd)
    if impl == "dtrain":
        doc = find_json(out, "results")
        rows = [x for x in (doc or {}).get("results", []) if x.get("gpus") == gpus]
        if not rows:
            fail(f"no JSON object with a result for {gpus} GPU(s) on stdout of: {shown}\n"
                 f"--- stdout (tail) ---\n{tail(out)}\n--- stderr (tail) ---\n{tail(err)}", state, a)
        res = rows[0]
    else:
        doc = res = find_json(out, "peer")
        if not doc:
            fail(f"no peer JSON object on stdout of: {shown}\n"
                 f"--- stdout (tail) ---\n{tail(out)}\n--- stderr (tail) ---\n{tail(err)}", state, a)
        if doc.get("gpus") != gpus:
            fail(f"peer ran on {doc.get('gpus')} GPU(s), asked for {gpus}: {shown}", state, a)
    for k in ("samples_per_s", "step_ms"):
        if not isinstance(res.get(k), (int, float)):
            fail(f"'{k}' missing from the JSON of: {shown}\n{json.dumps(doc)[:2000]}", state, a)
    return doc, res, wall


def summarize(cfg, runs, gpus_list):
    med = {}
    impls = [i for i in ("dtrain", "ddp", "compiled") if any(r["impl"] == i for r in runs)]
    for impl in impls:
        for g in gpus_list:
            xs = [r for r in runs if r["impl"] == impl and r["gpus"] == g]
            if xs:
                med[impl, g] = (statistics.median(x["samples_per_s"] for x in xs),
                                statistics.median(x["step_ms"] for x in xs))
    rows = []
    for g in gpus_list:
        if ("dtrain", g) not in med or ("ddp", g) not in med:
            continue
        row = {"gpus": g, "rounds": sum(1 for r in runs if r["impl"] == "dtrain" and r["gpus"] == g)}
        for impl in impls:
            if (impl, g) not in med:
                continue
            sps, ms = med[impl, g]
            one = med.get((impl, 1))
            row[impl] = {"samples_per_s": sps, "step_ms": ms,
                         "scaling": sps / (g * one[0]) if one and one[0] else None}
        row["ratio"] = row["dtrain"]["samples_per_s"] / row["ddp"]["samples_per_s"]
        if "compiled" in row:
            row["ratio_compiled"] = row["dtrain"]["samples_per_s"] / row["compiled"]["samples_per_s"]
        goal = cfg.get("goal")
        vs = goal.get("vs", "ddp") if goal else "ddp"
        if goal and vs == "compiled" and "compiled" not in row:
            row["goal_met"] = None
            row["goal"] = "not decided (no compiled peer: --compiled-peer)"
        elif goal:
            missed = []
            ratio = row["ratio_compiled"] if vs == "compiled" else row["ratio"]
            if ratio < goal["ratio"]:
                missed.append(f"{ratio:.2f}x < {goal['ratio']:g}x")
            note = ""
            if goal.get("scaling") is not None and g == goal["at"]:
                s = row["dtrain"]["scaling"]
                if s is None:
                    note = "; scaling n/a (no 1-GPU run)"
                elif s < goal["scaling"]:
                    missed.append(f"scaling {100 * s:.1f}% < {100 * goal['scaling']:g}%")
            row["goal_met"] = False if missed else (None if note else True)
            row["goal"] = ("missed (" + ", ".join(missed) + ")" if missed else "met") + note
        rows.append(row)
    return rows


def goal_text(goal):
    t = f"dtrain/{PEER_NAMES[goal.get('vs', 'ddp')]} >= {goal['ratio']:g}x at every GPU count"
    if goal.get("scaling") is not None:
        t += f" and dtrain scaling >= {100 * goal['scaling']:g}% at {goal['at']} GPUs"
    return t


def versions_of(runs):
    keys = ("torch", "cuda", "nccl", "device", "model_impl", "cudnn_benchmark")
    seen = []
    for r in runs:
        if r["impl"] != "dtrain":
            v = {k: r["result"].get(k) for k in keys}
            if v not in seen:
                seen.append(v)
    return seen


def report(cfg, entry, gpus_list):
    rows, runs = entry["rows"], entry["runs"]
    print(f"### {cfg['label']}\n")
    print(f"# {cfg['rounds']} round(s) per GPU count, medians; {cfg['steps']} timed steps after "
          f"{cfg['warmup']} warm-up, per-GPU batch {cfg['batch_size']}")
    print(f"# environment: NCCL_NVLS_ENABLE={entry['env']['NCCL_NVLS_ENABLE']}")
    for g in gpus_list:
        c = entry["commands"][str(g)]
        print(f"# dtrain ({g} GPU{'s' if g > 1 else ''}): {c['dtrain']}")
        print(f"# DDP    ({g} GPU{'s' if g > 1 else ''}): {c['ddp']}")
        if "compiled" in c:
            print(f"# compiled ({g} GPU{'s' if g > 1 else ''}): {c['compiled']}")
    for v in versions_of(runs):
        print(f"# peer: torch {v['torch']}, CUDA {v['cuda']}, NCCL {v['nccl']}, {v['device']} "
              f"(model {v['model_impl']}, cudnn.benchmark {v['cudnn_benchmark']})")
    dcfg = next((r["result"].get("config") for r in runs if r["impl"] == "dtrain"), None)
    if dcfg is not None:
        print(f"# dtrain config: {json.dumps(dcfg, sort_keys=True)}")
    goal = cfg.get("goal")
    if goal:
        print(f"# goal: {goal_text(goal)}")
    print()
    pct = lambda s: "-" if s is None else f"{100 * s:.1f}%"  # noqa: E731
    compiled = any("compiled" in r for r in rows)
    head = "| GPUs | dtrain samples/s | dtrain step ms | dtrain scaling | DDP samples/s | DDP step ms | DDP scaling | dtrain/DDP |"
    if compiled:
        head += " compiled samples/s | compiled step ms | compiled scaling | dtrain/compiled |"
    print(head + (" goal |" if goal else ""))
    print("|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|---:|" if compiled else "")
          + ("---|" if goal else ""))
    for r in rows:
        d, t = r["dtrain"], r["ddp"]
        line = (f"| {r['gpus']} | {d['samples_per_s']:,.0f} | {d['step_ms']:.2f} | {pct(d['scaling'])} | "
                f"{t['samples_per_s']:,.0f} | {t['step_ms']:.2f} | {pct(t['scaling'])} | {r['ratio']:.2f}x |")
        if compiled:
            c = r.get("compiled")
            line += (f" {c['samples_per_s']:,.0f} | {c['step_ms']:.2f} | {pct(c['scaling'])} | "
                     f"{r['ratio_compiled']:.2f}x |" if c else " - | - | - | - |")
        print(line + (f" {r['goal']} |" if goal else ""))
    if goal:
        measured = {r["gpus"] for r in rows}
        if any(r["goal_met"] is False for r in rows):
            verdict = "missed"
        elif goal.get("scaling") is not None and goal["at"] not in measured:
            verdict = f"not decided ({goal['at']} GPUs not measured)"
        elif any(r["goal_met"] is None for r in rows):
            verdict = "not decided (no 1-GPU run for the scaling)"
        else:
            verdict = "met"
        entry["goal_verdict"] = verdict
        print(f"\ngoal {goal_text(goal)}: **{verdict}**")
    print(flush=True)


def save(state, a):
    if a.out:
        with open(a.out, "w") as f:
            json.dump(state, f, indent=1)


def configurations(a, p):
    if a.configs == "custom":
        cfgs = [{"label": a.label or (f"{a.model} {a.image_size}x{a.image_size}, batch {a.batch_size}/GPU, "
                                      f"{a.precision}{', channels-last' if a.channels_last else ''}"),
                 "model": a.model, "image_size": a.image_size, "batch_size": a.batch_size,
                 "precision": a.precision, "channels_last": a.channels_last}]
        names = ["custom"]
    else:
        names = ["a", "b", "c"] if a.configs == "seed" else [n.strip() for n in a.configs.split(",")]
        if any(n not in SEED for n in names):
            p.error(f"--configs: 'custom', 'seed', or a comma list of {', '.join(SEED)}")
        cfgs = [dict(SEED[n]) for n in names]
        if a.label:
            for c in cfgs:
                c["label"] = f"{a.label}: {c['label']}"
    for name, c in zip(names, cfgs):
        c["name"] = name
        c["steps"] = a.steps if a.steps is not None else c.get("steps", DEFAULT_STEPS)
        c["warmup"] = a.warmup if a.warmup is not None else c.get("warmup", DEFAULT_WARMUP)
        c["rounds"] = a.rounds
    return cfgs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtrain", default="build/dtrain", help="the dtrain binary (default build/dtrain)")
    p.add_argument("--torchrun", default="python3 -m torch.distributed.run",
                   help="torchrun command (default 'python3 -m torch.distributed.run')")
    p.add_argument("--gpus", default="1,2,4", help="comma list of GPU counts (default 1,2,4)")
    p.add_argument("--configs", default="custom",
                   help="'custom' (the flags below; default), 'seed' (the issue's a, b, c), or e.g. 'a,c'")
    p.add_argument("--model", default="resnet50", choices=["resnet18", "resnet34", "resnet50"])
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=64, help="per GPU")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--steps", type=int, default=None,
                   help=f"timed steps (default {DEFAULT_STEPS}; seed config c: 30); given, it applies to all")
    p.add_argument("--warmup", type=int, default=None,
                   help=f"warm-up steps (default {DEFAULT_WARMUP}; seed config c: 10); given, it applies to all")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dtrain-args", default="", help="extra flags for `dtrain bench train`, one string")
    p.add_argument("--peer-args", default="", help="extra flags for the peer, e.g. '--cudnn-benchmark'")
    p.add_argument("--compiled-peer", action="store_true",
                   help="also run the peer under torch.compile (reduce-overhead on 1 GPU, "
                        "max-autotune-no-cudagraphs under DDP)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per command, 0 = none (default 1800)")
    p.add_argument("--out", default="", help="write every raw JSON result, the commands and versions here")
    p.add_argument("--label", default="", help="title of the configuration (prefix for --configs seed)")
    a = p.parse_args(joined_pass_through(sys.argv[1:]))
    try:
        gpus_list = [int(g) for g in a.gpus.split(",")]
    except ValueError:
        p.error(f"--gpus '{a.gpus}' is not a comma list of integers")
    if a.rounds < 1 or any(g < 1 for g in gpus_list):
        p.error("--rounds and every GPU count must be >= 1")
    cfgs = configurations(a, p)

    env = dict(os.environ)
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    state = {"args": vars(a), "gpus": gpus_list, "configs": []}
    for cfg in cfgs:
        cmds = {g: commands(a, cfg, g) for g in gpus_list}
        entry = {"config": {k: v for k, v in cfg.items()}, "env": {"NCCL_NVLS_ENABLE": env["NCCL_NVLS_ENABLE"]},
                 "commands": {str(g): {impl: shlex.join(c) for impl, c in per.items()} for g, per in cmds.items()},
                 "runs": [], "rows": []}
        state["configs"].append(entry)
        for rnd in range(a.rounds):
            for g in gpus_list:
                order = list(cmds[g].items())
                if rnd % 2:
                    order.reverse()
                for impl, cmd in order:
                    doc, res, wall = measure("dtrain" if impl == "dtrain" else "peer", cmd, g, env, state, a)
                    entry["runs"].append({"round": rnd, "gpus": g, "impl": impl, "wall_s": wall,
                                          "samples_per_s": res["samples_per_s"], "step_ms": res["step_ms"],
                                          "result": doc})
                    print(f"# {cfg['name']} round {rnd + 1}/{a.rounds} {g} GPU(s) {impl}: "
                          f"{res['samples_per_s']:,.0f} samples/s, {res['step_ms']:.2f} ms/step "
                          f"({wall:.0f} s)", file=sys.stderr, flush=True)
                    save(state, a)
        entry["rows"] = summarize(cfg, entry["runs"], gpus_list)
        entry["versions"] = versions_of(entry["runs"])
        report(cfg, entry, gpus_list)
        save(state, a)


if __name__ == "__main__":
    main()
