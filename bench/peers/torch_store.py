#!/usr/bin/env python3
"""The `dtrain bench store` workload against PyTorch's torch.distributed.TCPStore.

N client threads, each with its own TCPStore(is_master=False) connection, run
--ops rounds of set/get/add on their own keys, then meet in --barriers N-way
barriers built the way dtrain's storeBarrier is (add to a count, the last
arrival sets a done key, everyone waits for it). Prints the same table and the
same --json keys as `dtrain bench store`, so bench/store_compare.sh can set
them side by side.

Run it with a Python that has torch, e.g. Debian's /usr/bin/python3.
"""
import argparse
import datetime
import json
import os
import resource
import sys
import threading
import time

import torch.distributed as dist


def int_in(low, high):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not an integer")
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not in range {low} to {high}")
        return value
    return parse


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1",
                        help="address of the in-process server, or of an external one with --port")
    parser.add_argument("--port", type=int_in(1, 65535), default=0,
                        help="use the TCPStore server already running at --host:--port")
    parser.add_argument("--clients", type=int_in(1, 65536), default=64)
    parser.add_argument("--ops", type=int_in(0, 100000000), default=1000,
                        help="rounds of set+get+add per client")
    parser.add_argument("--barriers", type=int_in(0, 1000000), default=10)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a store operation may wait")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return parser.parse_args()


def store_barrier(store, name, world_size, timeout):
    # The same algorithm as dtrain::storeBarrier (src/store/store.cc).
    done_key = name + "/done"
    if store.add(name + "/count", 1) == world_size:
        store.set(done_key, "1")
    store.wait([done_key], timeout)


def raise_open_file_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run(args):
    timeout = datetime.timedelta(seconds=args.timeout)
    server = None
    port = args.port
    if port == 0:
        server = dist.TCPStore(args.host, 0, None, True, timeout, wait_for_workers=False)
        port = server.port
    prefix = f"bench/{os.getpid()}-{time.monotonic_ns()}/"
    n = args.clients
    sync = threading.Barrier(n)
    times = [None] * n
    errors = []

    def client(index):
        try:
            store = dist.TCPStore(args.host, port, None, False, timeout)
            key = f"{prefix}c{index}/value"
            counter = f"{prefix}c{index}/count"
            value = chr(ord("a") + index % 26) * 32
            set_total = get_total = add_total = 0.0
            barrier_start = [0.0] * args.barriers
            barrier_end = [0.0] * args.barriers
            sync.wait()
            ops_start = time.perf_counter()
            for _ in range(args.ops):
                t0 = time.perf_counter()
                store.set(key, value)
                t1 = time.perf_counter()
                if len(store.get(key)) != len(value):
                    raise RuntimeError("get returned a wrong value")
                t2 = time.perf_counter()
                store.add(counter, 1)
                t3 = time.perf_counter()
                set_total += t1 - t0
                get_total += t2 - t1
                add_total += t3 - t2
            ops_end = time.perf_counter()
            for b in range(args.barriers):
                sync.wait()
                barrier_start[b] = time.perf_counter()
                store_barrier(store, f"{prefix}barrier/{b}", n, timeout)
                barrier_end[b] = time.perf_counter()
            times[index] = (ops_start, ops_end, set_total, get_total, add_total, barrier_start, barrier_end)
        except Exception as e:  # noqa: BLE001 - reported once, after the join
            errors.append(e)
            sync.abort()  # release the others from the local barrier

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]

    elapsed = max(t[1] for t in times) - min(t[0] for t in times)
    rounds = n * args.ops
    total_ops = rounds * 3
    set_us = sum(t[2] for t in times) / rounds * 1e6 if rounds else 0.0
    get_us = sum(t[3] for t in times) / rounds * 1e6 if rounds else 0.0
    add_us = sum(t[4] for t in times) / rounds * 1e6 if rounds else 0.0
    barrier_ms = [
        (max(t[6][b] for t in times) - min(t[5][b] for t in times)) * 1e3 for b in range(args.barriers)
    ]
    host = f"[{args.host}]" if ":" in args.host else args.host
    return {
        "implementation": "torch",
        "server": f"{host}:{port}",
        "in_process_server": server is not None,
        "clients": n,
        "ops_per_client": args.ops,
        "barriers": args.barriers,
        "total_ops": total_ops,
        "elapsed_s": elapsed,
        "ops_per_s": total_ops / elapsed if elapsed > 0 else 0.0,
        "op_mean_us": (set_us + get_us + add_us) / 3,
        "set_mean_us": set_us,
        "get_mean_us": get_us,
        "add_mean_us": add_us,
        "barrier_mean_ms": sum(barrier_ms) / len(barrier_ms) if barrier_ms else 0.0,
        "barrier_max_ms": max(barrier_ms) if barrier_ms else 0.0,
    }


def print_table(r):
    print(f"torch store benchmark: {r['clients']} clients x {r['ops_per_client']} rounds of "
          f"set+get+add, {r['barriers']} barriers")
    print(f"server {r['server']}{' (in-process)' if r['in_process_server'] else ''}\n")
    rows = [
        ("metric", "value"),
        ("total ops", f"{r['total_ops']:.0f}"),
        ("elapsed (s)", f"{r['elapsed_s']:.3f}"),
        ("throughput (ops/s)", f"{r['ops_per_s']:.0f}"),
        ("op mean (us)", f"{r['op_mean_us']:.1f}"),
        ("set mean (us)", f"{r['set_mean_us']:.1f}"),
        ("get mean (us)", f"{r['get_mean_us']:.1f}"),
        ("add mean (us)", f"{r['add_mean_us']:.1f}"),
        ("barrier mean (ms)", f"{r['barrier_mean_ms']:.2f}"),
        ("barrier max (ms)", f"{r['barrier_max_ms']:.2f}"),
    ]
    for metric, value in rows:
        print(f"  {metric:<20} {value:>14}")


def main():
    args = parse_args()
    raise_open_file_limit()
    result = run(args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
