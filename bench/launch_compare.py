#!/usr/bin/env python3
"""Start-up and recovery time of `dtrain launch` beside torchrun, for N
trivial workers, in one run on one machine.

    bench/launch_compare.py --dtrain build/src/cli/dtrain --nprocs 2 8 32 [--repeat 3]

For each launcher and N it measures
  start-up: from starting the launcher to the N-th worker's first line, and
  recovery: from the moment worker 0 is told to fail (it exits 1) to
            the N-th first line of the restarted group,
with the same flags for both (--standalone, --max-restarts 1,
--monitor-interval 0.1, --no-python sh workers; no "$$" in the worker:
torchrun expands its arguments as string.Template). Prints a Markdown table with
medians, raw values and dtrain/torchrun speed-up, and --json for the raw data.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

READY = re.compile(r"ready (\d+) (\d+)")

WORKER = ('echo ready $RANK $TORCHELASTIC_RESTART_COUNT; '
          'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 0 ]; then '
          'while [ ! -e "$BENCH_DIE_FILE" ]; do sleep 0.01; done; exit 1; fi; '
          'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then sleep 60; fi')


def measure(cmd, nprocs, timeout=300):
    with tempfile.TemporaryDirectory() as tmp:
        die_file = os.path.join(tmp, "die")
        env = dict(os.environ, BENCH_DIE_FILE=die_file, NCCL_NVLS_ENABLE="0")
        seen = {0: set(), 1: set()}
        marks = {}
        done = threading.Event()
        start = time.perf_counter()
        proc = subprocess.Popen(cmd + ["sh", "-c", WORKER], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)

        def reader():
            for line in proc.stdout:
                m = READY.search(line)
                if not m:
                    continue
                rank, restart = int(m.group(1)), int(m.group(2))
                if restart in seen:
                    seen[restart].add(rank)
                    if len(seen[restart]) == nprocs and restart not in marks:
                        marks[restart] = time.perf_counter()
                        if restart == 0:
                            marks["die"] = time.perf_counter()
                            open(die_file, "w").close()
                        else:
                            done.set()
            done.set()

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        finished = done.wait(timeout)
        proc.wait(timeout=60) if finished else proc.kill()
        if 0 not in marks or 1 not in marks:
            raise RuntimeError(f"{cmd[0]}: did not see every worker start twice: {seen}")
        return marks[0] - start, marks[1] - marks["die"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtrain", required=True)
    p.add_argument("--torchrun", default=f"{sys.executable} -m torch.distributed.run")
    p.add_argument("--nprocs", type=int, nargs="+", default=[2, 8, 32])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    common = ["--standalone", "--max-restarts", "1", "--monitor-interval", "0.1", "--no-python"]
    launchers = {"dtrain": [a.dtrain, "launch"], "torchrun": a.torchrun.split()}
    results = []
    for n in a.nprocs:
        for rep in range(a.repeat):
            for name, base in launchers.items():  # alternate, so drift hits both
                up, rec = measure(base + ["--nproc-per-node", str(n)] + common, n)
                results.append({"launcher": name, "nprocs": n, "repeat": rep, "startup_s": up, "recovery_s": rec})
    if a.json:
        print(json.dumps(results, indent=2))
        return
    print("| workers | dtrain start-up (s) | torchrun start-up (s) | speed-up | dtrain recovery (s) | torchrun recovery (s) | speed-up |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in a.nprocs:
        def med(name, key):
            return statistics.median(r[key] for r in results if r["launcher"] == name and r["nprocs"] == n)
        du, tu = med("dtrain", "startup_s"), med("torchrun", "startup_s")
        dr, tr = med("dtrain", "recovery_s"), med("torchrun", "recovery_s")
        print(f"| {n} | {du:.3f} | {tu:.3f} | {tu / du:.1f}x | {dr:.3f} | {tr:.3f} | {tr / dr:.1f}x |")
    print(f"\nmedians of {a.repeat} alternating runs; raw values with --json")


if __name__ == "__main__":
    main()
