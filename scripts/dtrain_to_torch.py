#!/usr/bin/python3
"""Load a dtrain checkpoint into a PyTorch module (strict=True).

    /usr/bin/python3 scripts/dtrain_to_torch.py CHECKPOINT [options]

CHECKPOINT is a step directory (checkpoint_dir/step-NNNNNNNN) or a
checkpoint_dir (its newest complete step). dtrain's gpt becomes a nanoGPT-style
module (transformer.wte/wpe/h.N/ln_f, lm_head tied to wte: the checkpoint has
no lm_head, the module's is wte's tensor); its mlp becomes fc1..fcN with ReLU
between. The model's shape comes from the safetensors `__metadata__` ("model":
the model's configuration as JSON; also "step" and "dtrain_version"), or from
manifest.json for checkpoints written before the metadata. The cnn is not
supported.

options:
  --eval-text PATH     (gpt) mean cross-entropy over the held-out split of the
                       byte text PATH, as `dtrain eval` computes it: samples
                       are non-overlapping windows of context+1 bytes, the last
                       10% held out; prints "eval: N tokens, loss L"
  --greedy PROMPT N    (gpt) N greedy bytes after PROMPT, as
                       `dtrain generate --temperature 0` samples them
  --save FILE.pt       torch.save the module's state_dict

From Python:

    import sys; sys.path.insert(0, "scripts")
    from dtrain_to_torch import load
    model, meta = load("ckpt")          # model.eval() already called
"""
import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def read_safetensors(path):
    """u64 little-endian header length, the JSON header, the raw f32 data."""
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    data = raw[8 + hlen:]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            raise ValueError(f"{path}: tensor {name} is {t['dtype']}, expected F32")
        b, e = t["data_offsets"]
        tensors[name] = torch.frombuffer(bytearray(data[b:e]), dtype=torch.float32).reshape(t["shape"]).clone()
    return tensors, meta


def step_dir(path):
    if os.path.exists(os.path.join(path, "model.safetensors")):
        return path
    steps = sorted(d for d in os.listdir(path)
                   if d.startswith("step-") and os.path.exists(os.path.join(path, d, "manifest.json")))
    if not steps:
        raise FileNotFoundError(f"{path} holds no complete checkpoint (no step-*/manifest.json)")
    return os.path.join(path, steps[-1])


class MLP(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.n = len(sizes) - 1
        for i in range(self.n):
            setattr(self, f"fc{i + 1}", nn.Linear(sizes[i], sizes[i + 1]))

    def forward(self, x):
        for i in range(self.n):
            x = getattr(self, f"fc{i + 1}")(x)
            if i + 1 < self.n:
                x = F.relu(x)
        return x


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.c_attn(x).split(D, dim=2)
        hd = D // self.heads
        q, k, v = (t.view(B, T, self.heads, hd).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, D))


class MLPBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.c_proj = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = MLPBlock(dim)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT's layout and names (bias everywhere, GELU tanh, LayerNorm eps 1e-5)."""

    def __init__(self, vocab, context, layers, heads, dim):
        super().__init__()
        self.context = context
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, dim),
            wpe=nn.Embedding(context, dim),
            h=nn.ModuleList([Block(dim, heads) for _ in range(layers)]),
            ln_f=nn.LayerNorm(dim, eps=1e-5),
        ))
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as in dtrain and nanoGPT

    def forward(self, idx):
        T = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T))
        for b in self.transformer.h:
            x = b(x)
        return self.lm_head(self.transformer.ln_f(x))


def model_config(d, meta):
    if "model" in meta:
        return json.loads(meta["model"])
    with open(os.path.join(d, "manifest.json")) as f:  # checkpoints from before the metadata
        return json.load(f)["config"]


def load(checkpoint):
    """(module in eval mode, metadata dict with 'config', 'step', 'dtrain_version', 'dir')."""
    d = step_dir(checkpoint)
    tensors, meta = read_safetensors(os.path.join(d, "model.safetensors"))
    cfg = model_config(d, meta)
    kind = cfg["model"]
    if kind == "gpt":
        model = GPT(cfg["vocab"], cfg["context"], cfg["layers"], cfg["heads"], cfg["dim"])
        tensors["lm_head.weight"] = tensors["transformer.wte.weight"]  # the tied head
    elif kind == "mlp":
        model = MLP(cfg["mlp_sizes"])
    else:
        raise ValueError(f"{d}: model '{kind}' is not supported (gpt and mlp are)")
    model.load_state_dict(tensors, strict=True)
    model.eval()
    return model, {"config": cfg, "step": int(meta.get("step", -1)), "dtrain_version": meta.get("dtrain_version"),
                   "dir": d}


@torch.no_grad()
def eval_text(model, path, batch=64):
    """dtrain eval on byte text: windows of context+1 bytes, the last 10% of them held out."""
    with open(path, "rb") as f:
        data = f.read()
    C = model.context
    windows = (len(data) - 1) // C if len(data) > C else 0
    held = max(windows // 10, 1)
    first = windows - held
    total, tokens = 0.0, 0
    for s in range(first, windows, batch):
        idx = range(s, min(s + batch, windows))
        x = torch.tensor([list(data[i * C:i * C + C]) for i in idx])
        y = torch.tensor([list(data[i * C + 1:i * C + C + 1]) for i in idx])
        logits = model(x)
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum").item()
        tokens += y.numel()
    return tokens, total / tokens


@torch.no_grad()
def greedy(model, prompt, n):
    seq = list(prompt.encode()) or [ord("\n")]
    out = []
    for _ in range(n):
        window = seq[-model.context:]
        nxt = int(model(torch.tensor([window]))[0, -1].argmax())
        seq.append(nxt)
        out.append(nxt)
    return bytes(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--eval-text")
    ap.add_argument("--greedy", nargs=2, metavar=("PROMPT", "N"))
    ap.add_argument("--save")
    a = ap.parse_args()
    torch.set_num_threads(1)
    model, meta = load(a.checkpoint)
    params = sum(p.numel() for p in model.parameters())
    print(f"loaded {meta['dir']} (step {meta['step']}, dtrain {meta['dtrain_version']}): "
          f"{meta['config']['model']} with {params} parameters, load_state_dict(strict=True) ok")
    if a.eval_text:
        tokens, loss = eval_text(model, a.eval_text)
        print(f"eval: {tokens} tokens, loss {loss:.6f}")
    if a.greedy:
        sys.stdout.buffer.write(b"greedy: " + greedy(model, a.greedy[0], int(a.greedy[1])) + b"\n")
    if a.save:
        torch.save(model.state_dict(), a.save)


if __name__ == "__main__":
    main()
