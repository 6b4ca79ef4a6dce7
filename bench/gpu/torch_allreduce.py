#!/usr/bin/env python3
"""PyTorch's allreduce between processes sharing one GPU, and the GPU's copy
bandwidth: the peers of `dtbench allreduce --device cuda` in
scripts/gpu-check.sh's comm-bench step (issue 46).

Usage: bench/gpu/torch_allreduce.py [--ranks N] [--min BYTES] [--max BYTES]
           [--factor F] [--iters N] [--warmup N] [--device cuda|cpu]
           [--backend gloo|nccl]

Each rank allreduces (sum) an f32 tensor on the device, for sizes from --min
to --max bytes (K, M, G suffixes) multiplied by --factor; the time is the
slowest rank's mean over --iters calls after --warmup, the device waited for
after the calls. busbw = size / time x 2 (N - 1) / N, as dtbench and
nccl-tests report it. gloo reduces CUDA tensors through host memory; NCCL
refuses two ranks on one GPU, so on a one-GPU machine only gloo runs.
--device cpu runs the same on host tensors (to try the script without a
GPU). Before the ranks start, a device-to-device copy of 1 GiB (cuda) gives
the memory bandwidth the allreduce is measured against: bytes read plus
bytes written over the copy's time.
"""
import argparse
import os
import socket
import sys
import time


def size_arg(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:].upper(), 1)
    try:
        v = int(float(s[:-1] if mult > 1 else s) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: '{s}'")
    if v < 4:
        raise argparse.ArgumentTypeError(f"size under one f32: '{s}'")
    return v


def copy_bandwidth(torch):
    n = (1 << 30) // 4
    x = torch.ones(n, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    reps = 10
    for _ in range(reps):
        y.copy_(x)
    end.record()
    torch.cuda.synchronize()
    s = start.elapsed_time(end) / 1e3 / reps
    return 2 * n * 4 / s / 1e9


def rank_main(rank, args, port, sizes):
    import torch
    import torch.distributed as dist
    if args.device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group(args.backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.ranks)
    n = args.ranks
    for size in sizes:
        count = size // 4
        t = torch.full((count,), float(rank + 1), device=args.device)
        for _ in range(args.warmup):
            dist.all_reduce(t)
        if args.device == "cuda":
            torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(t)
        if args.device == "cuda":
            torch.cuda.synchronize()
        mine = torch.tensor([(time.perf_counter() - t0) / args.iters], dtype=torch.float64)
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)  # host tensor: gloo takes it
        # check: every element is sum(1..n) times n^(warmup+iters-1) (each call sums n equal copies)
        want = float(n * (n + 1) // 2) * float(n) ** (args.warmup + args.iters - 1)
        wrong = int((t != want).sum().item()) if want < 1e30 else 0
        if rank == 0:
            sec = mine.item()
            algbw = size / sec / 1e9
            print(f"{size:13d} {count:13d} {sec * 1e6:10.2f} {algbw:9.3f} {algbw * 2 * (n - 1) / n:9.3f} {wrong:7d}",
                  flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--min", type=size_arg, default=1 << 20)
    p.add_argument("--max", type=size_arg, default=256 << 20)
    p.add_argument("--factor", type=float, default=4)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    args = p.parse_args()
    if args.ranks < 2 or args.factor <= 1 or args.iters < 1 or args.warmup < 0 or args.min > args.max:
        p.error("need --ranks >= 2, --factor > 1, --iters >= 1, --warmup >= 0, --min <= --max")
    import torch
    import torch.multiprocessing as mp
    if args.device == "cuda" and not torch.cuda.is_available():
        print("torch_allreduce: no CUDA device visible to PyTorch", file=sys.stderr)
        return 77
    sizes, s = [], float(args.min)
    while s <= args.max * 1.0000001:
        sizes.append(int(s) // 4 * 4)
        s *= args.factor
    print(f"# torch {torch.__version__} all_reduce ({args.backend}), {args.ranks} ranks, f32 sum, "
          f"{args.iters} iterations after {args.warmup} warm-up, tensors on {args.device}")
    if args.device == "cuda":
        print(f"# {torch.cuda.get_device_name(0)}: device-to-device copy {copy_bandwidth(torch):.1f} GB/s "
              "(bytes read + written, 1 GiB)")
        torch.cuda.empty_cache()
    print(f"#{'size (B)':>12} {'count':>13} {'time (us)':>10} {'algbw':>9} {'busbw':>9} {'#wrong':>7}", flush=True)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    mp.spawn(rank_main, args=(args, port, sizes), nprocs=args.ranks, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
