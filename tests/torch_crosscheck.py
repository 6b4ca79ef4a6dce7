#!/usr/bin/python3
"""Rebuild a model dtrain exported (tests/torch_ref.c) in PyTorch and compare.

usage: torch_crosscheck.py mlp|gpt-mini DIR

Loads DIR/weights.safetensors into the converter's torch module
(scripts/dtrain_to_torch.py), checks the loss
and every parameter gradient (relative 1e-4, as norms of the difference), then
runs 20 torch.optim.AdamW steps and checks every loss (relative 1e-3).
"""
import os
import sys

import torch
import torch.nn.functional as F

# The modules are the shipped converter's (scripts/dtrain_to_torch.py): the
# names users load dtrain's checkpoints under are the ones checked here.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import dtrain_to_torch as converter  # noqa: E402
from dtrain_to_torch import GPT, MLP  # noqa: E402


def read_safetensors(path):
    return converter.read_safetensors(path)[0]


def rel(a, b):
    return (a - b).norm().item() / max(b.norm().item(), 1e-12)


def main():
    kind, d = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    model = GPT(256, 128, 4, 4, 256) if kind == "gpt-mini" else MLP([784, 256, 256, 10])
    weights = read_safetensors(f"{d}/weights.safetensors")
    if kind == "gpt-mini":
        weights["lm_head.weight"] = weights["transformer.wte.weight"]  # the tied head
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
