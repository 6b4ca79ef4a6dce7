#!/usr/bin/python3
"""PyTorch DistributedDataParallel (gloo) side of bench/ddp/netns_scaling.sh:
gpt-mini as configs/gpt-mini.json, batch 16 x 128 per rank, 1 thread.

usage: torch_ddp.py STEPS   (env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
       WORLD_SIZE=1 trains without DDP; TORCH_POWERSGD_RANK=r: PyTorch's
       powerSGD_hook of rank r, error feedback and warm start, from step 2)
prints on rank 0: "tokens_per_s <aggregate over all ranks>" (first 5 steps are warm-up)
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
import torch_threads  # noqa: E402  (bench/train; before torch)

torch_threads.hold(1)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
from torch_crosscheck import GPT  # noqa: E402
from torch_train import fortunes  # noqa: E402


def main():
    steps = int(sys.argv[1])
    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    torch.manual_seed(1)
    model = GPT(256, 128, 4, 4, 256)
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        model = torch.nn.parallel.DistributedDataParallel(model)
        r = int(os.environ.get("TORCH_POWERSGD_RANK", "0"))
        if r > 0:
            from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
            state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=r, start_powerSGD_iter=2)
            model.register_comm_hook(state, psgd.powerSGD_hook)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    text = fortunes()
    B, T = 16, 128
    windows = (len(text) - 1) // T
    g = torch.Generator().manual_seed(1 + rank)
    for step in range(steps + 5):
        if step == 5:
            t0 = time.perf_counter()
        idx = torch.randint(0, windows, (B,), generator=g) * T
        xb = torch.stack([text[i:i + T] for i in idx])
        yb = torch.stack([text[i + 1:i + T + 1] for i in idx])
        opt.zero_grad(set_to_none=True)
        out = model(xb)
        F.cross_entropy(out.reshape(-1, 256), yb.reshape(-1)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    rate = steps * B * T * world / (time.perf_counter() - t0)
    if rank == 0:
        print(f"tokens_per_s {rate:.1f}")
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
