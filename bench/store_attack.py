#!/usr/bin/env python3
"""What misbehaving clients cost a dtrain store server.

Starts a standalone server (tests/store/store_server_standalone from a
build), runs one attack at a time against it, and reports the server's
resident memory and open descriptors, and the worst round trip of a
well-behaved client that keeps doing SET+GET meanwhile.

  bench/store_attack.py --server build/tests/store/store_server_standalone
  bench/store_attack.py --server OLD --server NEW --nofile 4096   # before/after

Attacks: prehello (12 connections each holding most of a 60 MiB frame before
HELLO), bytes (N connections sending one byte), idle (more idle connections
than the server has descriptors; a new client then tries to connect), wait
(a WAIT of 4,000,000 keys), check (a CHECK of 16,000,000 keys).
Python 3 standard library only; nothing outside this process tree changes.
"""
import argparse
import os
import sys
import resource
import socket
import struct
import subprocess
import threading
import time


def frame(payload):
    return struct.pack(">I", len(payload)) + payload


def hello():
    return frame(b"\x01" + struct.pack(">I", 1) + struct.pack(">I", 0))


def bytes_field(b):
    return struct.pack(">I", len(b)) + b


def keys_field(count, width):
    # count distinct keys of `width` bytes (0: all empty)
    parts = [struct.pack(">I", count)]
    if width == 0:
        parts.append(struct.pack(">I", 0) * count)
    else:
        head = struct.pack(">I", width)
        parts.extend(head + i.to_bytes(width, "big") for i in range(count))
    return b"".join(parts)


def read_frame(sock):
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (n,) = struct.unpack(">I", head)
    body = b""
    while len(body) < n:
        chunk = sock.recv(min(1 << 20, n - len(body)))
        if not chunk:
            return None
        body += chunk
    return body


def connect(port, timeout=10.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def greeted(port, timeout=10.0):
    s = connect(port, timeout)
    s.sendall(hello())
    reply = read_frame(s)
    if not reply or reply[0] != 0:
        raise OSError("HELLO refused: %r" % (reply[:120] if reply else reply))
    return s


class Server:
    def __init__(self, binary, nofile):
        def limit():
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        self.proc = subprocess.Popen([binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, preexec_fn=limit)
        line = self.proc.stdout.readline().decode()
        self.port = int(line.split()[1])

    def rss_mib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
        return 0.0

    def fds(self):
        return len(os.listdir("/proc/%d/fd" % self.proc.pid))

    def stop(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


class GoodClient:
    """SET+GET round trips in a process of its own (the attacker's Python work
    must not delay it) until stopped; reports the worst one."""

    def __init__(self, port):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--good-client", str(port)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.proc.stdout.readline()  # "ready"

    def start(self):
        pass

    def finish(self):
        self.proc.stdin.close()
        return self.proc.stdout.read().decode().strip()


class GoodClientLoop(threading.Thread):
    def __init__(self, port):
        super().__init__(daemon=True)
        self.sock = greeted(port)
        self.sock.settimeout(60)
        self.worst = 0.0
        self.rounds = 0
        self.error = None
        self.stopping = False

    def run(self):
        try:
            while not self.stopping:
                t = time.monotonic()
                self.sock.sendall(frame(b"\x02" + bytes_field(b"good") + bytes_field(b"v")))
                read_frame(self.sock)
                self.sock.sendall(frame(b"\x03" + bytes_field(b"good") + struct.pack(">q", 1000)))
                read_frame(self.sock)
                self.worst = max(self.worst, time.monotonic() - t)
                self.rounds += 1
                time.sleep(0.002)
        except OSError as e:
            self.error = str(e)

    def finish(self):
        self.stopping = True
        self.join(70)
        return "%.1f ms over %d" % (self.worst * 1000, self.rounds) + (" (%s)" % self.error if self.error else "")


def attack_prehello(port, args):
    socks, big = [], b"x" * (1 << 20)
    for _ in range(12):
        try:
            s = connect(port)
            s.sendall(struct.pack(">I", 60 << 20))
            for _ in range(59):
                s.sendall(big)
            socks.append(s)
        except OSError:
            pass
    return socks, "%d of 12 held 59 MiB" % len(socks)


def attack_bytes(port, args):
    socks = []
    for _ in range(args.connections):
        try:
            s = connect(port)
            s.sendall(b"\x00")
            socks.append(s)
        except OSError:
            break
    return socks, "%d connections sent 1 byte" % len(socks)


def attack_idle(port, args):
    socks = []
    for _ in range(args.idle):
        try:
            socks.append(connect(port, timeout=2))
        except OSError:
            break
    t = time.monotonic()
    try:
        s = connect(port, timeout=7.5)
        s.settimeout(7.5)
        s.sendall(hello())
        reply = read_frame(s)
        if reply is None:
            newcomer = "closed"
        elif reply[0] == 0:
            newcomer = "served"
        else:
            newcomer = "REFUSED: " + reply[6:].decode(errors="replace")[:90]
        s.close()
    except OSError as e:
        newcomer = "failed: %s" % e
    return socks, "%d idle; a new client after %.2f s: %s" % (len(socks), time.monotonic() - t, newcomer)


def attack_keys(op, count, width, timeout_ms):
    def attack(port, args):
        s = greeted(port)
        body = bytes([op]) + keys_field(count, width)
        if op == 6:
            body += struct.pack(">q", timeout_ms)
        t = time.monotonic()
        s.settimeout(120)
        s.sendall(frame(body))
        reply = read_frame(s)
        what = {0: "OK", 1: "TIMEOUT", 2: "ERROR"}.get(reply[0], "?") if reply else "closed"
        if reply and reply[0] == 2:
            what += ": " + reply[5:].decode(errors="replace")[:80]
        return [s], "%s of %d keys (%.1f MiB) answered %s after %.2f s" % (
            "WAIT" if op == 6 else "CHECK", count, len(body) / 2**20, what, time.monotonic() - t)
    return attack


ATTACKS = {
    "prehello": attack_prehello,
    "bytes": attack_bytes,
    "idle": attack_idle,
    "wait": attack_keys(6, 4_000_000, 3, 1000),
    "check": attack_keys(7, 16_000_000, 0, 0),
}


def run(binary, name, args):
    server = Server(binary, args.nofile)
    try:
        base_rss, base_fds = server.rss_mib(), server.fds()
        good = GoodClient(server.port)
        good.start()
        socks, what = ATTACKS[name](server.port, args)
        time.sleep(0.5)
        peak_rss, peak_fds = server.rss_mib(), server.fds()
        for s in socks:
            s.close()
        time.sleep(args.settle)
        after_rss = server.rss_mib()
        latency = good.finish()
        return [name, what, "%.0f -> %.0f -> %.0f" % (base_rss, peak_rss, after_rss),
                "%d -> %d" % (base_fds, peak_fds), latency]
    finally:
        server.stop()


def good_client_main(port):
    loop = GoodClientLoop(port)
    loop.start()
    print("ready", flush=True)
    sys.stdin.read()
    print(loop.finish(), flush=True)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--good-client":
        return good_client_main(int(sys.argv[2]))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", action="append", required=True, help="store_server_standalone binary (repeatable)")
    p.add_argument("--attack", action="append", choices=sorted(ATTACKS), help="default: all")
    p.add_argument("--nofile", type=int, default=4096, help="the server's RLIMIT_NOFILE")
    p.add_argument("--connections", type=int, default=3000, help="connections of the 'bytes' attack")
    p.add_argument("--idle", type=int, default=4200, help="connections of the 'idle' attack")
    p.add_argument("--settle", type=float, default=2.0, help="seconds after closing before RSS is read again")
    args = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print("| server | attack | what happened | server RSS MiB (start -> under attack -> 2 s after close) "
          "| server fds | good client's worst SET+GET |")
    print("|---|---|---|---|---|---|")
    for binary in args.server:
        for name in args.attack or ["prehello", "bytes", "idle", "wait", "check"]:
            row = run(binary, name, args)
            print("| %s | %s |" % (binary, " | ".join(row)), flush=True)


if __name__ == "__main__":
    main()
