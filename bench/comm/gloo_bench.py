#!/usr/bin/python3
"""The torch.distributed (gloo) side of bench/comm/run.sh: times one collective
over a range of sizes with dtbench's size convention and columns.

usage: gloo_bench.py OP MINBYTES MAXBYTES FACTOR ITERS WARMUP [MINTIME]
       (env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; GLOO_SOCKET_IFNAME
       across namespaces)
OP: allreduce, broadcast, allgather, reduce_scatter, alltoall (f32, sum).
Prints "size_bytes time_us algbw_GBps busbw_GBps" per size on rank 0; time is
the slowest rank's mean.  MINTIME (seconds, default 0): while a
size's calls so far took less on the slowest rank, another batch, as many as
they say fill it (dtbench -t).  gloo's torch backend has no reduce_scatter:
the script prints nothing for it.
"""
import math
import os
import sys
import time

import torch
import torch.distributed as dist


def bus_factor(op, n):
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op == "broadcast":
        return 1.0
    return (n - 1) / n


def main():
    op = sys.argv[1]
    minb, maxb, factor, least, warmup = (int(x) for x in sys.argv[2:7])
    mintime = float(sys.argv[7]) if len(sys.argv) > 7 else 0.0
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    n, rank = dist.get_world_size(), dist.get_rank()
    if op == "reduce_scatter":  # "ProcessGroupGloo does not support reduce_scatter"
        dist.destroy_process_group()
        return
    size = minb
    while size <= maxb:
        count = size // 4
        if count < n and op not in ("allreduce", "broadcast"):
            size *= factor
            continue
        a = torch.ones(count if op != "allgather" else count // n)
        outs = [torch.empty(count // n) for _ in range(n)] if op == "allgather" else None
        if op == "alltoall":
            a = torch.ones(count - count % n)
            out = torch.empty_like(a)

        def once():
            if op == "allreduce":
                dist.all_reduce(a)
            elif op == "broadcast":
                dist.broadcast(a, 0)
            elif op == "allgather":
                dist.all_gather(outs, a)
            elif op == "alltoall":
                dist.all_to_all_single(out, a)
            else:
                raise SystemExit(f"unknown op {op}")

        for _ in range(warmup):
            once()
        dist.barrier()
        elapsed, iters, batch, rounds = 0.0, 0, least, 0
        while batch > 0:
            rounds += 1
            t0 = time.perf_counter()
            for _ in range(batch):
                once()
            elapsed += time.perf_counter() - t0
            iters += batch
            batch = 0
            if mintime > 0 and rounds <= 8:  # another batch while these were short (dtbench -t)
                took = torch.tensor([elapsed], dtype=torch.float64)
                dist.all_reduce(took, op=dist.ReduceOp.MAX)
                if took.item() < mintime:
                    want = math.ceil(mintime * iters / took.item()) if took.item() > 0 else 1000000
                    batch = min(want, 1000000) - iters
        mean = torch.tensor([elapsed / iters], dtype=torch.float64)
        dist.all_reduce(mean, op=dist.ReduceOp.MAX)
        if rank == 0:
            algbw = size / mean.item() / 1e9
            print(f"{size} {mean.item() * 1e6:.2f} {algbw:.4f} {algbw * bus_factor(op, n):.4f}", flush=True)
        size *= factor
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
