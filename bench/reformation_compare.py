#!/usr/bin/env python3
"""Re-formation after a node's loss: `dtrain launch` beside torchrun, default
rendezvous settings, in one run on one machine.

    bench/reformation_compare.py --dtrain build/src/cli/dtrain [--torchrun "python3 -m torch.distributed.run"]
                                 [--repeat 3] [--json out.json]

Scenario (both launchers, same flags): three agents on loopback, each its own
"node" (own session), `--nnodes 2:3 --nproc-per-node 1 --rdzv-backend c10d
--rdzv-endpoint 127.0.0.1:PORT --max-restarts 3 --monitor-interval 0.1`, no
--rdzv-conf (the defaults: dtrain's keep-alive 2 s x 3, torchrun's 5 s x 3; last call 30 s). Three seconds after all
three run a world of 3, the third node (not the store's host) is killed with
SIGKILL to its whole session, and the survivors' workers exit 1 at that
moment, as a collective with a dead peer fails. Measured: from the kill to
the moment both survivors' workers of the next round run in a world of 2.
Prints a Markdown table (median and raw seconds per launcher) and the ratio.
"""
import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

READY = re.compile(r"ready (\d+) (\d+) (\d+)")

# rank, world size, restart count; the first round's workers wait for the
# "peer lost" file and fail then, later rounds just run.
WORKER = ('echo ready $RANK $WORLD_SIZE $TORCHELASTIC_RESTART_COUNT; '
          'if [ "$WORLD_SIZE" = 3 ]; then while [ ! -e "$BENCH_LOST_FILE" ]; do sleep 0.01; done; exit 1; fi; '
          'sleep 600')


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(launcher, timeout=300):
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        lost_file = os.path.join(tmp, "lost")
        env = dict(os.environ, BENCH_LOST_FILE=lost_file, NCCL_NVLS_ENABLE="0")
        lines = []  # (time, node, rank, world, restart)
        lock = threading.Lock()
        procs = []
        flags = ["--nnodes", "2:3", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                 f"127.0.0.1:{port}", "--rdzv-id", f"reform{port}", "--max-restarts", "3",
                 "--monitor-interval", "0.1", "--no-python", "sh", "-c", WORKER]
        if "torch.distributed.run" in " ".join(launcher) or launcher[-1].endswith("torchrun"):
            flags = [f.replace("--nproc-per-node", "--nproc_per_node").replace("--rdzv-backend", "--rdzv_backend")
                     .replace("--rdzv-endpoint", "--rdzv_endpoint").replace("--rdzv-id", "--rdzv_id")
                     .replace("--max-restarts", "--max_restarts").replace("--monitor-interval", "--monitor_interval")
                     .replace("--no-python", "--no_python") for f in flags]

        def reader(node, proc):
            for line in proc.stdout:
                if os.environ.get("BENCH_DEBUG"): print(node, line.rstrip(), file=sys.stderr)
                m = READY.search(line)
                if m:
                    with lock:
                        lines.append((time.perf_counter(), node, int(m.group(1)), int(m.group(2)), int(m.group(3))))

        try:
            for node in range(3):
                proc = subprocess.Popen(launcher + flags, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env=env, start_new_session=True)
                procs.append(proc)
                threading.Thread(target=reader, args=(node, proc), daemon=True).start()
                if node == 0:
                    time.sleep(5)  # the first agent hosts the store (torchrun imports PyTorch first)
            deadline = time.perf_counter() + timeout
            while True:
                with lock:
                    if len({(n) for (_, n, _, w, _) in lines if w == 3}) == 3:
                        break
                if time.perf_counter() > deadline:
                    raise RuntimeError("the first round of 3 never formed")
                time.sleep(0.01)
            time.sleep(3)  # the job runs a while before the node is lost
            killed = time.perf_counter()
            os.killpg(procs[2].pid, signal.SIGKILL)
            open(lost_file, "w").close()
            while True:
                with lock:
                    after = [t for (t, n, _, w, _) in lines if w == 2 and t > killed]
                    nodes = {n for (t, n, _, w, _) in lines if w == 2 and t > killed}
                if len(nodes) == 2:
                    return max(after) - killed
                if time.perf_counter() > deadline:
                    raise RuntimeError("the survivors never formed a world of 2")
                time.sleep(0.01)
        finally:
            for proc in procs:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtrain", required=True, help="the dtrain binary")
    parser.add_argument("--torchrun", default="", help='the torchrun command, e.g. "python3 -m torch.distributed.run"')
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    launchers = {"dtrain": [args.dtrain, "launch"]}
    if args.torchrun:
        launchers["torchrun"] = args.torchrun.split()
    results = {name: [] for name in launchers}
    for _ in range(args.repeat):
        for name, cmd in launchers.items():  # alternating
            seconds = measure(cmd)
            results[name].append(seconds)
            print(f"{name}: re-formed in {seconds:.2f} s", file=sys.stderr, flush=True)
    print("| launcher | median (s) | runs (s) |")
    print("|---|---:|---|")
    for name, values in results.items():
        print(f"| {name} | {statistics.median(values):.2f} | {' / '.join(f'{v:.2f}' for v in values)} |")
    if "torchrun" in results:
        ratio = statistics.median(results["torchrun"]) / statistics.median(results["dtrain"])
        print(f"\ndtrain re-forms {ratio:.1f}x faster than torchrun (median over median)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
