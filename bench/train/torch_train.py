#!/usr/bin/python3
"""PyTorch side of bench/train/run.sh: the same models, data and optimizer
settings as dtrain's configs, timed the same way.

usage: torch_train.py gpt-mini|gpt-small|mlp|cnn THREADS STEPS [--bf16] [--batch=N]
prints two lines:
  settings {json}: what this process runs, read back after importing torch:
    OpenBLAS's kernel set (openblas_get_corename), its thread count and build
    string, torch's intra-op and inter-op threads, its CPU capability (the
    vector width of its own kernels), whether oneDNN is on, OMP_WAIT_POLICY
    and OPENBLAS_CORETYPE as given;
  "<model> <threads> <items_per_s> <final_loss>" where items are tokens (gpt)
    or samples (mlp, cnn); the first 5 steps are warm-up.
--bf16 runs forward and loss under torch.autocast("cpu", dtype=torch.bfloat16)
(the parameters, their gradients and AdamW stay f32), dtrain's precision=bf16.
--batch=N replaces the batch size (16 sequences, 128 images) and adds a third
line, "train_peak_kib N": the most resident memory while training (the kernel's
high-water mark, reset once the data and the model are ready), for
bench/train/memory.sh.
"""
import ctypes
import gzip
import json
import os
import struct
import sys
import time

import torch_threads  # this directory; before torch

torch_threads.hold(sys.argv[2] if len(sys.argv) > 2 and sys.argv[2].isdigit() else 1)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))
from torch_crosscheck import GPT, MLP  # noqa: E402  (the models the cross-check validated)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc = nn.Linear(64 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x.view(-1, 1, 28, 28))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def fashion(split):
    d = "/usr/share/datasets/fashion-mnist"
    with gzip.open(f"{d}/{split}-images-idx3-ubyte.gz") as f:
        _, n, r, c = struct.unpack(">IIII", f.read(16))
        x = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).float().div(255).view(n, r * c)
    with gzip.open(f"{d}/{split}-labels-idx1-ubyte.gz") as f:
        f.read(8)
        y = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
    return x, y


def fortunes():
    d = "/usr/share/games/fortunes"
    data = b"".join(open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))
                    if "." not in n and os.path.isfile(os.path.join(d, n)) and not os.path.islink(os.path.join(d, n)))
    return torch.tensor(list(data), dtype=torch.long)


def settings():
    """What this process runs, read back from the libraries themselves."""
    blas = next((line.split()[-1] for line in open("/proc/self/maps") if "libopenblas" in line), None)
    out = {"blas_library": blas}
    if blas:
        lib = ctypes.CDLL(blas)  # the copy torch loaded: dlopen returns the same handle
        for name, restype in (("openblas_get_corename", ctypes.c_char_p), ("openblas_get_config", ctypes.c_char_p),
                              ("openblas_get_num_threads", ctypes.c_int)):
            fn = getattr(lib, name)
            fn.restype = restype
            v = fn()
            out[name[len("openblas_get_"):]] = v.decode() if isinstance(v, bytes) else v
    cap = None
    if hasattr(torch.backends, "cpu") and hasattr(torch.backends.cpu, "get_cpu_capability"):
        cap = torch.backends.cpu.get_cpu_capability()
    else:  # torch 1.13: only in the build summary
        cap = next((line.split(":", 1)[1].strip() for line in torch.__config__.show().splitlines()
                    if "CPU capability usage" in line), None)
    out.update(torch=torch.__version__, torch_threads=torch.get_num_threads(),
               interop_threads=torch.get_num_interop_threads(), cpu_capability=cap,
               mkldnn=bool(torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled),
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS"), OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY"),
               OPENBLAS_CORETYPE=os.environ.get("OPENBLAS_CORETYPE"))
    return out


def main():
    kind, threads, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    bf16 = "--bf16" in sys.argv[4:]
    batch = next((int(a.split("=", 1)[1]) for a in sys.argv[4:] if a.startswith("--batch=")), None)
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)  # no inter-op parallelism in a training step; dtrain has none either
    print("settings " + json.dumps(dict(settings(), bf16=bf16)), flush=True)
    torch.manual_seed(1)
    if kind.startswith("gpt"):
        layers, heads, dim = (4, 4, 256) if kind == "gpt-mini" else (6, 6, 384)
        model = GPT(256, 128, layers, heads, dim)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
        text = fortunes()
        B, T = batch or 16, 128
        windows = (len(text) - 1) // T
        per = B * T
    else:
        model = MLP([784, 256, 256, 10]) if kind == "mlp" else CNN()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        x_all, y_all = fashion("train")
        B = batch or 128
        per = B
    g = torch.Generator().manual_seed(1)
    t0 = None
    loss = float("nan")
    if batch:  # the high-water mark from here on (Linux: "5" resets VmHWM)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    for step in range(steps + 5):
        if step == 5:
            t0 = time.perf_counter()
        if kind.startswith("gpt"):
            idx = torch.randint(0, windows, (B,), generator=g) * T
            xb = torch.stack([text[i:i + T] for i in idx])
            yb = torch.stack([text[i + 1:i + T + 1] for i in idx])
        else:
            idx = torch.randint(0, x_all.shape[0], (B,), generator=g)
            xb, yb = x_all[idx], y_all[idx]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(xb)
            l = F.cross_entropy(out.reshape(-1, out.shape[-1]), yb.reshape(-1))
        l.backward()
        if kind.startswith("gpt"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss = l.item()
    rate = steps * per / (time.perf_counter() - t0)
    print(f"{kind} {threads} {rate:.1f} {loss:.4f}")
    if batch:
        hwm = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:"))
        print(f"train_peak_kib {hwm}")


if __name__ == "__main__":
    main()
