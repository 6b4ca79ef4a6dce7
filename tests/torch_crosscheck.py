#!/usr/bin/python3
"""Rebuild a model dtrain exported (tests/torch_ref.c) in PyTorch and compare.

usage: torch_crosscheck.py mlp|gpt-mini DIR

Loads DIR/weights.safetensors into an equivalent torch module, checks the loss
and every parameter gradient (relative 1e-4, as norms of the difference), then
runs 20 torch.optim.AdamW steps and checks every loss (relative 1e-3).
"""
import json
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def read_safetensors(path):
    """The format is small enough to read directly: u64 header length, JSON, data."""
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    data = raw[8 + hlen:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        b, e = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[b:e]), dtype=torch.float32).reshape(t["shape"]).clone()
    return out


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


class Attention(nn.Module):
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
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, D)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = Attention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(dim, 4 * dim)
        self.mlp.c_proj = nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, context, layers, heads, dim):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(vocab, dim)
        self.transformer.wpe = nn.Embedding(context, dim)
        self.transformer.h = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.transformer.ln_f = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T))
        for b in self.transformer.h:
            x = b(x)
        return self.transformer.ln_f(x) @ self.transformer.wte.weight.t()  # tied output


def rel(a, b):
    return (a - b).norm().item() / max(b.norm().item(), 1e-12)


def main():
    kind, d = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    model = GPT(256, 128, 4, 4, 256) if kind == "gpt-mini" else MLP([784, 256, 256, 10])
    weights = read_safetensors(f"{d}/weights.safetensors")
    model.load_state_dict(weights, strict=True)
    with open(f"{d}/batch.txt") as f:
        B, T, feat = map(int, f.readline().split())
        vals = [float(line) for line in f]
    n = B * T
    xs, ys = vals[:B * T * feat], vals[B * T * feat:]
    x = torch.tensor(xs).view(B, T).long() if kind == "gpt-mini" else torch.tensor(xs).view(B, feat)
    y = torch.tensor(ys).long()
    assert len(ys) == n
    ref_losses = [float(line) for line in open(f"{d}/losses.txt")]
    ref_grads = read_safetensors(f"{d}/grads.safetensors")

    failures = 0
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    names = dict(model.named_parameters())
    worst_grad = 0.0
    for step in range(len(ref_losses)):
        opt.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y)
        loss.backward()
        r = abs(loss.item() - ref_losses[step]) / abs(ref_losses[step])
        tol = 1e-4 if step == 0 else 1e-3
        if r > tol:
            print(f"FAIL {kind} step {step}: loss torch {loss.item():.7g} dtrain {ref_losses[step]:.7g} (rel {r:.2e})")
            failures += 1
        if step == 0:
            for name, g in ref_grads.items():
                e = rel(g, names[name].grad)
                worst_grad = max(worst_grad, e)
                if e > 1e-4:
                    print(f"FAIL {kind} gradient {name}: relative difference {e:.2e}")
                    failures += 1
        opt.step()
    print(f"{kind}: loss {ref_losses[0]:.6f} -> {ref_losses[-1]:.6f} over {len(ref_losses) - 1} AdamW steps; "
          f"worst gradient difference {worst_grad:.2e}; {len(ref_grads)} gradients; {failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
