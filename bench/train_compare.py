#!/usr/bin/env python3
"""Training throughput: `dtrain train` against the PyTorch DDP peer
(bench/peers/torch_ddp_train.py), same model, per-GPU batch, precision and
memory format, synthetic 3x32x32 data, in the same run on the same machine.
Each configuration alternates dtrain and the peer for --rounds rounds.

    bench/train_compare.py --dtrain build/dtrain --gpus 1,2,4 --model resnet18 \
        --batch-size 256 --precision bf16 --steps 120 --warmup 20 --out results.json

Prints a Markdown table (median samples/s of the rounds, dtrain/torch) and
writes every raw measurement to --out.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, env=None):
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {cmd}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
    return r.stdout + r.stderr


def dtrain_rate(a, gpus, port):
    with tempfile.TemporaryDirectory() as d:
        metrics = os.path.join(d, "m.jsonl")
        cmd = (f"{a.dtrain} launch --nproc-per-node {gpus} --master-port {port} {a.dtrain} train "
               f"--model {a.model} --dataset synthetic --synthetic-samples {a.samples} --batch-size {a.batch_size} "
               f"--precision {a.precision} {'--channels-last' if a.channels_last else ''} --epochs 1000 "
               f"--max-steps {a.steps} --log-every {a.log_every} --eval-every 0 --progress none "
               f"--metrics-jsonl {metrics} --lr 0.1 --momentum 0.9 --weight-decay 5e-4 --schedule constant")
        run(cmd)
        steps = [json.loads(l) for l in open(metrics) if '"step"' in l and json.loads(l)["event"] == "step"]
    first = next(s for s in steps if s["step"] >= a.warmup)
    last = steps[-1]
    samples = (last["step"] - first["step"]) * a.batch_size * gpus
    return samples / (last["elapsed_s"] - first["elapsed_s"])


def torch_rate(a, gpus, port):
    cmd = (f"torchrun --nproc-per-node {gpus} --master-port {port} {HERE}/peers/torch_ddp_train.py "
           f"--model {a.model} --batch-size {a.batch_size} --precision {a.precision} "
           f"{'--channels-last' if a.channels_last else ''} --samples {a.samples} --steps {a.steps} "
           f"--warmup {a.warmup}")
    out = run(cmd)
    line = next(l for l in out.splitlines() if l.startswith('{"peer"'))
    return json.loads(line)["samples_per_s"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtrain", default="build/dtrain")
    p.add_argument("--gpus", default="1,2,4")
    p.add_argument("--model", default="resnet18")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--precision", default="bf16")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--samples", type=int, default=50000)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default="")
    a = p.parse_args()
    if a.warmup % a.log_every or a.steps % a.log_every:
        sys.exit("--warmup and --steps must be multiples of --log-every")
    raw, port = [], 29600
    for gpus in [int(g) for g in a.gpus.split(",")]:
        for r in range(a.rounds):
            order = [("dtrain", dtrain_rate), ("torch", torch_rate)]
            if r % 2:
                order.reverse()
            for name, fn in order:
                port += 1
                rate = fn(a, gpus, port)
                raw.append({"gpus": gpus, "round": r, "impl": name, "samples_per_s": rate})
                print(f"# {gpus} GPU(s) round {r} {name}: {rate:.0f} samples/s", file=sys.stderr, flush=True)
    print(f"| GPUs | dtrain samples/s | torch DDP samples/s | dtrain/torch |")
    print(f"|---:|---:|---:|---:|")
    for gpus in sorted({x["gpus"] for x in raw}):
        d = statistics.median(x["samples_per_s"] for x in raw if x["gpus"] == gpus and x["impl"] == "dtrain")
        t = statistics.median(x["samples_per_s"] for x in raw if x["gpus"] == gpus and x["impl"] == "torch")
        print(f"| {gpus} | {d:,.0f} | {t:,.0f} | {d / t:.3f} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"config": vars(a), "raw": raw}, f, indent=1)


if __name__ == "__main__":
    main()
