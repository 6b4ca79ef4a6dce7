#!/usr/bin/python3
"""PyTorch side of bench/train/convergence.sh: train the same model as a dtrain
run, from the initial weights that run exported, on the same batches.

usage: torch_converge.py mlp|cnn|gpt-mini CKPT_STEP0_DIR STEPS EVAL_AT,... [--own-init]

The batches come from dtrain's own sampler (libdtrain through ctypes), so both
sides see the same samples in the same order; with --own-init the model keeps
PyTorch's default initialisation and the data a torch.randperm order instead
(the independent comparison).  Hyperparameters are those of configs/<model>.json.
Prints one JSON object: {"eval": {step: {"loss": .., "accuracy": ..}}, "train_loss": [...]}.
"""
import ctypes
import fnmatch
import json
import math
import os
import sys

import torch_threads  # this directory; before torch

torch_threads.hold(1)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, HERE)
from torch_crosscheck import GPT, MLP, read_safetensors  # noqa: E402
from torch_train import CNN, fashion, fortunes  # noqa: E402


class Sampler(ctypes.Structure):
    """include/dtrain/data.h: dt_sampler."""
    _fields_ = [("size", ctypes.c_int64), ("seed", ctypes.c_uint64), ("rank", ctypes.c_int), ("world", ctypes.c_int),
                ("shuffle", ctypes.c_bool), ("drop_last", ctypes.c_bool), ("epoch", ctypes.c_int64),
                ("position", ctypes.c_int64), ("perm", ctypes.c_void_p), ("perm_epoch", ctypes.c_int64)]


class DtrainOrder:
    """Batch indices exactly as dtrain's trainer draws them (tools/dtrain/data_source.c)."""

    def __init__(self, size, seed):
        self.lib = ctypes.CDLL(os.path.join(ROOT, "build", "lib", "libdtrain.so"))
        self.s = Sampler()
        rc = self.lib.dt_sampler_init(ctypes.byref(self.s), ctypes.c_int64(size), ctypes.c_uint64(seed), 0, 1,
                                      ctypes.c_bool(True), ctypes.c_bool(True))
        assert rc == 0, rc

    def next(self, batch):
        buf = (ctypes.c_int64 * batch)()
        n = self.lib.dt_sampler_next(ctypes.byref(self.s), ctypes.c_int64(batch), buf)
        if n == 0:  # an epoch ended exactly at the last batch
            n = self.lib.dt_sampler_next(ctypes.byref(self.s), ctypes.c_int64(batch), buf)
        return torch.tensor(buf[:n], dtype=torch.long)


class TorchOrder:
    def __init__(self, size):
        self.size, self.perm, self.pos = size, torch.randperm(size), 0

    def next(self, batch):
        if self.pos >= self.size:
            self.perm, self.pos = torch.randperm(self.size), 0
        idx = self.perm[self.pos:self.pos + batch]
        self.pos += batch
        return idx


def lr_at(cfg, step):
    """src/optim/schedule.c: linear warm-up, then constant or cosine."""
    base, warm = cfg["lr"], cfg.get("warmup_steps", 0)
    if warm and step < warm:
        return base * (step + 1) / warm
    if cfg.get("schedule", "constant") == "constant":
        return base
    lo, span = cfg.get("min_lr", 0.0), cfg["steps"] - warm
    p = min(1.0, (step - warm) / span) if span > 0 else 1.0
    return lo + 0.5 * (base - lo) * (1 + math.cos(math.pi * p))


def main():
    kind, ckpt, steps, eval_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), [int(s) for s in sys.argv[4].split(",")]
    own = "--own-init" in sys.argv[5:]
    torch.set_num_threads(1)
    torch.manual_seed(1)
    cfg = json.load(open(os.path.join(ROOT, "configs", f"{kind}.json")))
    cfg["steps"] = steps
    B = cfg["batch_size"]
    if kind == "gpt-mini":
        model = GPT(256, cfg["context"], cfg["layers"], cfg["heads"], cfg["dim"])
        T = cfg["context"]
        text = fortunes()
        windows = (len(text) - 1) // T
        n_eval = max(windows // 10, 1)  # data_source.c: the last 10% of windows evaluate
        n_train = windows - n_eval

        def rows(split_begin, idx):
            starts = (idx + split_begin) * T
            return (torch.stack([text[s:s + T] for s in starts]), torch.stack([text[s + 1:s + T + 1] for s in starts]))

        train = lambda idx: rows(0, idx)  # noqa: E731
        evaluation = [rows(n_train, torch.arange(b, min(b + B, n_eval)))
                      for b in range(0, min(n_eval, cfg["eval_batches"] * B), B)]
    else:
        model = MLP(cfg["mlp_sizes"]) if kind == "mlp" else CNN()
        x_all, y_all = fashion("train")
        x_test, y_test = fashion("t10k")
        n_train = x_all.shape[0]
        train = lambda idx: (x_all[idx], y_all[idx])  # noqa: E731
        evaluation = [(x_test[b:b + B], y_test[b:b + B]) for b in range(0, x_test.shape[0], B)]
    if own:
        order = TorchOrder(n_train)
    else:
        model.load_state_dict(read_safetensors(os.path.join(ckpt, "model.safetensors")), strict=True)
        order = DtrainOrder(n_train, cfg["seed"])
    # dtrain's parameter groups (its no_decay key): no weight decay on 1-D
    # parameters nor on names matching the patterns ("none": decay all).
    wd, patterns = cfg.get("weight_decay", 0.0), cfg.get("no_decay", "*wte*,*wpe*,*embed*")
    named = list(model.named_parameters())
    plain = [p for n, p in named if patterns != "none" and
             (p.dim() < 2 or any(fnmatch.fnmatchcase(n, pat) for pat in patterns.split(",") if pat))]
    decay = [p for n, p in named if all(p is not q for q in plain)]
    groups = [{"params": decay, "weight_decay": wd}, {"params": plain, "weight_decay": 0.0}]
    if cfg["optimizer"] == "sgd":
        opt = torch.optim.SGD(groups, lr=cfg["lr"], momentum=cfg.get("momentum", 0.9))
    else:
        opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(cfg.get("beta1", 0.9), cfg.get("beta2", 0.999)),
                                eps=cfg.get("eps", 1e-8))
    out = {"eval": {}, "train_loss": []}
    for step in range(steps):
        xb, yb = train(order.next(B))
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, step)
        opt.zero_grad(set_to_none=True)
        logits = model(xb)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), yb.reshape(-1))
        loss.backward()
        if cfg.get("grad_clip", 0) > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        opt.step()
        out["train_loss"].append(loss.item())
        if step + 1 in eval_at:
            total, correct, count = 0.0, 0, 0
            with torch.no_grad():
                for xe, ye in evaluation:
                    lo = model(xe).reshape(-1, 256 if kind == "gpt-mini" else 10)
                    ye = ye.reshape(-1)
                    total += F.cross_entropy(lo, ye, reduction="sum").item()
                    correct += (lo.argmax(1) == ye).sum().item()
                    count += ye.numel()
            out["eval"][step + 1] = {"loss": total / count, "accuracy": correct / count}
            print(f"torch {kind} step {step + 1}: eval loss {total / count:.4f} accuracy {correct / count:.4f}",
                  file=sys.stderr, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
