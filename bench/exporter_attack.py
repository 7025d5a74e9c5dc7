#!/usr/bin/env python3
"""Scrape latency, RSS and descriptors of `dtrain exporter` under hostile
clients on loopback (Python stdlib only).

    bench/exporter_attack.py build/src/cli/dtrain [--fake-nvml PATH] [--seconds 12]
                             [--scenarios slow100,slow1000,mixed1000]

Per scenario it starts a fresh exporter, scrapes GET /metrics every 0.2 s
(each with a 5 s timeout; a timeout counts as 5 s and as failed) while the
attack runs, and samples the exporter's VmRSS and open descriptors:

  slow100    100 connections sending a request one byte per second
  slow1000   1,000 such connections
  mixed1000  1,000 bad requests from 50 threads (garbage, 64 KiB headers,
             100 KiB URIs, 10 MB bodies, POSTs, truncated requests, clients
             that hang up) of which 34 are slow (one byte per second)

Prints one Markdown table row per scenario.
"""
import argparse
import os
import random
import resource
import socket
import statistics
import subprocess
import threading
import time

SCRAPE_TIMEOUT_S = 5.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path="/metrics", timeout=SCRAPE_TIMEOUT_S):
    """Status of one GET (0 when none came), seconds taken."""
    began = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(max(0.01, timeout - (time.monotonic() - began)))
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while True:
                s.settimeout(max(0.01, timeout - (time.monotonic() - began)))
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
    except (OSError, ValueError, IndexError):
        status = 0
    return status, time.monotonic() - began


def sample(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            rss_kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return rss_kib, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return 0, 0


class Exporter:
    def __init__(self, binary, fake_nvml):
        self.port = free_port()
        env = dict(os.environ)
        if fake_nvml:
            env["DTRAIN_NVML_LIBRARY"] = fake_nvml
        self.proc = subprocess.Popen(
            [binary, "exporter", "--listen", f"127.0.0.1:{self.port}", "--interval", "0.5"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while get(self.port, "/healthz", 1)[0] != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("the exporter did not come up")
            time.sleep(0.1)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def trickle(port, count, stop, opened):
    """`count` connections, each sending a never-ending header a byte a second."""
    socks = []
    for _ in range(count):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.setblocking(False)
            socks.append(s)
        except OSError:
            pass
    opened.append(len(socks))
    text = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10000
    i = 0
    while not stop.is_set():
        for s in socks:
            try:
                s.send(text[i:i + 1])
            except OSError:
                pass
        i += 1
        stop.wait(1.0)
    for s in socks:
        s.close()


BAD_REQUESTS = [
    b"garbage\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n",
    b"GET /" + b"a" * 102400 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n" + b"b" * 204800,
    b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nx=1",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\n",  # truncated, then hang up
    b"",  # connect and hang up
    b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
]


def bad_client(port, request):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            if request:
                s.sendall(request)
            if request.endswith(b"\r\n\r\n") or b"Content-Length" in request:
                s.settimeout(10)
                while s.recv(65536):
                    pass
    except OSError:
        pass


def mixed(port, total, slow, stop, opened):
    slow_stop = threading.Event()
    slow_thread = threading.Thread(target=trickle, args=(port, slow, slow_stop, []))
    slow_thread.start()
    rng = random.Random(1)
    work = [rng.choice(BAD_REQUESTS) for _ in range(total - slow)]
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if not work:
                    return
                request = work.pop()
            bad_client(port, request)

    threads = [threading.Thread(target=worker) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    opened.append(total)
    stop.wait()
    slow_stop.set()
    slow_thread.join()


def run(binary, fake_nvml, scenario, seconds):
    exporter = Exporter(binary, fake_nvml)
    pid = exporter.proc.pid
    stop = threading.Event()
    opened = []
    if scenario.startswith("slow"):
        attack = threading.Thread(target=trickle, args=(exporter.port, int(scenario[4:]), stop, opened))
    else:
        attack = threading.Thread(target=mixed, args=(exporter.port, int(scenario[5:]), 34, stop, opened))
    attack.start()
    latencies, failed, peak_rss, peak_fds = [], 0, 0, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        began = time.monotonic()
        status, took = get(exporter.port)
        latencies.append(took)
        failed += status != 200
        rss, fds = sample(pid)
        peak_rss, peak_fds = max(peak_rss, rss), max(peak_fds, fds)
        time.sleep(max(0.0, 0.2 - (time.monotonic() - began)))
    stop.set()
    attack.join()
    alive = exporter.proc.poll() is None
    exporter.stop()
    return {
        "scenario": scenario, "scrapes": len(latencies), "failed": failed,
        "median_ms": statistics.median(latencies) * 1000, "worst_ms": max(latencies) * 1000,
        "peak_rss_mib": peak_rss / 1024, "peak_fds": peak_fds, "alive": alive,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dtrain")
    parser.add_argument("--fake-nvml", default="", help="DTRAIN_NVML_LIBRARY for the exporter")
    parser.add_argument("--seconds", type=float, default=12)
    parser.add_argument("--scenarios", default="slow100,slow1000,mixed1000")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    print("| scenario | scrapes | failed | median ms | worst ms | peak RSS MiB | peak fds | alive |")
    print("|---|---|---|---|---|---|---|---|")
    for scenario in args.scenarios.split(","):
        r = run(args.dtrain, args.fake_nvml, scenario, args.seconds)
        print(f"| {r['scenario']} | {r['scrapes']} | {r['failed']} | {r['median_ms']:.1f} | {r['worst_ms']:.0f} "
              f"| {r['peak_rss_mib']:.1f} | {r['peak_fds']} | {r['alive']} |", flush=True)


if __name__ == "__main__":
    main()
