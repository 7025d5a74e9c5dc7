#!/usr/bin/env python3
"""The peer of `dtrain bench allreduce` (and allgather, reduce_scatter, broadcast,
sendrecv): the same measurement with PyTorch's
torch.distributed (NCCL on GPUs, Gloo on CPUs), printed in the same
nccl-tests table, so the two can be compared line by line.

Run one process per GPU under `dtrain launch`, torchrun, or scripts/spawn-local.sh
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT in the environment):

    scripts/spawn-local.sh 4 -- python3 bench/peers/torch_allreduce.py -b 8 -e 1G -f 2
"""
import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist

DTYPES = {"float": torch.float32, "double": torch.float64, "half": torch.float16,
          "bfloat16": torch.bfloat16, "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8}
OPS = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX,
       "prod": dist.ReduceOp.PRODUCT}
SUFFIX = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text, flag):
    t = text.upper().rstrip("B") if len(text) > 1 else text
    mult = SUFFIX.get(t[-1:], 1)
    digits = t[:-1] if t[-1:] in SUFFIX else t
    if not digits.isdigit():
        sys.exit(f"{flag} '{text}' is not a size; expected e.g. 8, 512K, 64M, 1G")
    return int(digits) * mult


class Batch:
    """The works of one batch_isend_irecv, waited for together."""

    def __init__(self, works):
        self.works = works

    def wait(self):
        for w in self.works:
            w.wait()


def bus_factor(coll, n):
    if coll == "allreduce":
        return 2.0 * (n - 1) / n if n > 1 else 0.0
    if coll in ("allgather", "reduce_scatter"):
        return (n - 1) / n if n > 1 else 0.0
    return 1.0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("collective", nargs="?", default="allreduce",
                   choices=["allreduce", "allgather", "reduce_scatter", "broadcast", "sendrecv"])
    p.add_argument("-b", "--minbytes", default="32M")
    p.add_argument("-e", "--maxbytes", default="32M")
    p.add_argument("-f", "--stepfactor", type=int, default=2)
    p.add_argument("-d", "--datatype", default="float", choices=sorted(DTYPES))
    p.add_argument("-o", "--op", default="sum", choices=sorted(OPS) + ["avg"])
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup_iters", type=int, default=5)
    p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
    p.add_argument("--json", action="store_true")
    a = p.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = a.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, init_method="env://")
    dtype = DTYPES[a.datatype]
    op = dist.ReduceOp.AVG if a.op == "avg" else OPS[a.op]
    elem = torch.tensor([], dtype=dtype).element_size()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def launch(coll, send, recv):
        if coll == "allreduce":
            return dist.all_reduce(recv, op=op, async_op=True)
        if coll == "allgather":
            return dist.all_gather_into_tensor(recv, send, async_op=True)
        if coll == "reduce_scatter":
            return dist.reduce_scatter_tensor(recv, send, op=op, async_op=True)
        if coll == "sendrecv":
            # nccl-tests' sendrecv_perf: send to rank + 1, receive from rank - 1, one group.
            ops = [dist.P2POp(dist.isend, send, (rank + 1) % world), dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
            return Batch(dist.batch_isend_irecv(ops))
        return dist.broadcast(recv, src=0, async_op=True)

    rows = []
    minb, maxb = parse_size(a.minbytes, "-b"), parse_size(a.maxbytes, "-e")
    if rank == 0 and not a.json:
        print(f"# torch {torch.__version__} backend {backend} nranks {world} "
              f"minBytes {minb} maxBytes {maxb} step: {a.stepfactor}(factor) "
              f"warmup iters: {a.warmup_iters} iters: {a.iters}")
        print("#                                                              out-of-place                       in-place")
        print("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong")
        print("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)")
    size = minb
    while size <= maxb:
        total = size // elem
        if a.collective in ("allgather", "reduce_scatter"):
            total = total // world * world
        if total == 0:
            size *= max(a.stepfactor, 2)
            continue
        nbytes = total * elem
        send_count = total // world if a.collective == "allgather" else total
        recv_count = total // world if a.collective == "reduce_scatter" else total
        times = []
        for in_place in (False, True):
            recv = torch.ones(recv_count, dtype=dtype, device=device)
            if in_place and a.collective == "sendrecv":
                send = recv  # as nccl-tests: one buffer
            elif in_place and a.collective == "allgather":
                send = recv.narrow(0, rank * send_count, send_count)
            elif in_place and a.collective == "reduce_scatter":
                big = torch.ones(send_count, dtype=dtype, device=device)
                send, recv = big, big.narrow(0, rank * recv_count, recv_count)
            else:
                send = torch.ones(send_count, dtype=dtype, device=device)
            for _ in range(a.warmup_iters):
                launch(a.collective, send, recv).wait()
            sync()
            dist.barrier()
            start = time.perf_counter()
            works = [launch(a.collective, send, recv) for _ in range(a.iters)]
            for w in works:
                w.wait()
            sync()
            t_us = (time.perf_counter() - start) * 1e6 / a.iters
            tt = torch.tensor([t_us], dtype=torch.float64, device=device)
            dist.all_reduce(tt)
            times.append(tt.item() / world)
        row = {"size": nbytes, "count": total}
        for name, t in zip(("out_of_place", "in_place"), times):
            algbw = nbytes / (t * 1e3)
            row[name] = {"time_us": t, "algbw_gbps": algbw,
                         "busbw_gbps": algbw * bus_factor(a.collective, world), "wrong": None}
        rows.append(row)
        if rank == 0 and not a.json:
            redop = a.op if a.collective in ("allreduce", "reduce_scatter") else "none"
            root = 0 if a.collective == "broadcast" else -1
            line = f"{nbytes:12d}  {total:12d}  {a.datatype:>8s}  {redop:>6s}  {root:6d}"
            for name in ("out_of_place", "in_place"):
                m = row[name]
                line += f"  {m['time_us']:7.2f}  {m['algbw_gbps']:6.2f}  {m['busbw_gbps']:6.2f}  {'N/A':>5s}"
            print(line, flush=True)
        size *= max(a.stepfactor, 2)
    avg = sum(r[k]["busbw_gbps"] for r in rows for k in ("out_of_place", "in_place")) / max(1, 2 * len(rows))
    if rank == 0:
        if a.json:
            print(json.dumps({"collective": a.collective, "backend": backend, "ranks": world,
                              "dtype": a.datatype, "op": a.op, "torch": torch.__version__,
                              "host": socket.gethostname(), "rows": rows, "avg_busbw_gbps": avg}, indent=2))
        else:
            print(f"# Avg bus bandwidth    : {avg:g} \n#")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
