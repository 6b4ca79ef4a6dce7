#!/usr/bin/env python3
"""PyTorch peer of the GPU training benchmark: dtrain's GPT (src/nn/gpt.c)
trained on one GPU the way a careful PyTorch user would, timed.

  torch_gpt.py [--layers 12 --dim 768 --heads 12 --context 1024 --vocab 50304]
               [--batch 8] [--steps 20] [--warmup 10] [--dtype f32|bf16]
               [--compile] [--tf32 on|off] [--optim foreach,fused]
               [--dropout 0] [--peak-tflops X] [--json OUT] [--device cuda|cpu]

The model is dtrain's, layer for layer: token embedding wte and learned
positions wpe (then dropout), blocks x + attn(ln_1(x)) then + mlp(ln_2(.)),
attention c_attn [D -> 3D] and c_proj [D -> D] (each with a bias, dropout
after c_proj as dtrain's attn_dropout), mlp c_fc [D -> 4D], GELU (tanh),
c_proj [4D -> D] (dropout after, mlp_dropout), final ln_f (LayerNorm eps
1e-5 everywhere), logits = ln_f(x) wte^T (tied, no bias).  No dropout on the
attention probabilities (dtrain has none).  GPT-2 initialisation: weights
and embeddings N(0, 0.02), residual projections (c_proj) N(0, 0.02/sqrt(2L)),
biases 0, LayerNorm 1 and 0.  Attention is F.scaled_dot_product_attention
(is_causal=True): flash (bf16) or memory-efficient (f32) kernels.

The training step as dtrain's configs/gpt-*.json: mean cross-entropy (in
the model's forward, so torch.compile fuses it), AdamW lr 1e-3, betas
(0.9, 0.999), eps 1e-8, weight decay 0.1 on the 2-D weights only (dtrain's
no_decay: biases, LayerNorm and the embeddings wte/wpe exempt), the global
gradient norm clipped to 1.0, constant learning rate.  --dtype bf16 runs
forward and loss under torch.autocast(bfloat16) with f32 master weights,
gradients and optimizer state (dtrain's precision=bf16).  --tf32 off (the
default) keeps f32 products in full f32.

Data: --batches fixed random token batches made on the device before
timing, cycled (no data loading in the timed loop).  Each optimizer variant
(--optim: foreach = torch's default multi-tensor AdamW, fused = fused=True)
re-initialises the same model from the same seed, runs --warmup steps (they
include torch.compile's compilation), then --steps timed steps between two
torch.cuda.synchronize(); the loop itself never synchronises (losses are
read after).  "best" is the variant with the most tokens/s; all are
reported.

Model FLOPs utilisation: bench/gpu/mfu.py, shared with dtrain's rows of
scripts/gpu-check.sh: PaLM's 6 N + 12 L T D FLOPs per token (N every
parameter, wte once) x tokens/s over the peak from --peak-tflops or the
device name (H100 SXM and H200 dense bf16 989 TFLOP/s, TF32 495, f32 67;
H100 PCIe, H100 NVL and H200 NVL their own); bf16 runs are measured
against the bf16 peak, f32 against TF32's when --tf32 on, else f32's.

Prints the settings, one line per variant and "best: ..."; --json OUT writes
all of it (tokens_per_s, ms_per_step, peak_memory_bytes, mfu per variant).
"""
import argparse
import contextlib
import gc
import json
import math
import sys
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import mfu  # bench/gpu/mfu.py: the FLOPs per token and the GPUs' peaks (this script's folder is on sys.path)

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")  # torch >= 2.0


class Attention(nn.Module):
    def __init__(self, dim, heads, dropout):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = (t.view(B, T, self.heads, D // self.heads).transpose(1, 2) for t in self.c_attn(x).split(D, dim=2))
        if HAVE_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.x (the CPU smoke test only)
            s = (q @ k.transpose(-2, -1)) / math.sqrt(D // self.heads)
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            y = s.softmax(-1) @ v
        return self.drop(self.c_proj(y.transpose(1, 2).reshape(B, T, D)))


class MLP(nn.Module):
    def __init__(self, dim, dropout):
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.c_proj = nn.Linear(4 * dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, dim, heads, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = Attention(dim, heads, dropout)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = MLP(dim, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, context, layers, heads, dim, dropout):
        super().__init__()
        self.layers = layers
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, dim), wpe=nn.Embedding(context, dim), drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(dim, heads, dropout) for _ in range(layers)]), ln_f=nn.LayerNorm(dim, eps=1e-5)))
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    @torch.no_grad()
    def init_gpt2(self):
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                m.weight.normal_(0.0, 0.02)
                if getattr(m, "bias", None) is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                m.bias.zero_()
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                p.normal_(0.0, 0.02 / math.sqrt(2 * self.layers))

    def forward(self, idx, targets):
        t = self.transformer
        x = t.drop(t.wte(idx) + t.wpe(torch.arange(idx.shape[1], device=idx.device)))
        for block in t.h:
            x = block(x)
        logits = self.lm_head(t.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def set_tf32(on):
    """TF32 for cuBLAS matmuls and cuDNN on or off: allow_tf32 (from 2.9 these
    legacy setters warn, and set the new fp32_precision state too, so the two
    never disagree), else the new API where the old one is gone.  Returns
    what is in effect, read back."""
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.backends.cuda.matmul.allow_tf32 = on
            torch.backends.cudnn.allow_tf32 = on
            out["set_by"] = "allow_tf32"
        except Exception:  # noqa: BLE001 (a torch without the legacy switches)
            torch.backends.cuda.matmul.fp32_precision = "tf32" if on else "ieee"
            torch.backends.cudnn.conv.fp32_precision = "tf32" if on else "ieee"
            out["set_by"] = "fp32_precision"
        for name, obj, attr in (("matmul.allow_tf32", torch.backends.cuda.matmul, "allow_tf32"),
                                ("cudnn.allow_tf32", torch.backends.cudnn, "allow_tf32"),
                                ("matmul.fp32_precision", torch.backends.cuda.matmul, "fp32_precision"),
                                ("cudnn.conv.fp32_precision", getattr(torch.backends.cudnn, "conv", None),
                                 "fp32_precision")):
            try:
                if obj is not None and hasattr(obj, attr):
                    out[name] = getattr(obj, attr)
            except Exception as e:  # noqa: BLE001 (record, don't die)
                out[name] = f"error: {e}"
    return out


def make_optimizer(model, kind, args):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "wte" not in n and "wpe" not in n]
    keep = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "wte" not in n and "wpe" not in n)]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": keep, "weight_decay": 0.0}]
    extra = {"fused": True} if kind == "fused" else {"foreach": True}
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.999), eps=1e-8, **extra)


def run_variant(model, step_model, kind, data, args, dev):
    """Warm-up then timed steps with optimizer `kind`; a dict of the figures."""
    torch.manual_seed(args.seed)
    model.init_gpt2()
    opt = make_optimizer(model, kind, args)
    cuda = dev.type == "cuda"
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16) if args.dtype == "bf16" else contextlib.nullcontext()
    params = list(model.parameters())

    def step(i):
        x, y = data[i % len(data)]
        with autocast:
            loss = step_model(x, y)
        loss.backward()
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, args.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    t_warm = time.perf_counter()
    first = [step(i).float() for i in range(args.warmup)]
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    warm_s = time.perf_counter() - t_warm
    t0 = time.perf_counter()
    losses = [step(args.warmup + i) for i in range(args.steps)]
    if cuda:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    tokens = args.batch * args.context * args.steps
    out = {"optimizer": kind, "tokens_per_s": tokens / elapsed, "ms_per_step": 1000 * elapsed / args.steps,
           "warmup_s": warm_s, "timed_s": elapsed,
           "first_loss": float(first[0]) if first else float(losses[0]), "last_loss": float(losses[-1]),
           "peak_memory_bytes": torch.cuda.max_memory_allocated() if cuda else None}
    model.zero_grad(set_to_none=True)
    return out  # the optimizer's state goes with this frame


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (torch.compile compiles here)")
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (forward, loss and backward)")
    ap.add_argument("--tf32", choices=("on", "off"), default="off")
    ap.add_argument("--optim", default="foreach,fused", help="AdamW variants to run, comma-separated: foreach, fused")
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0, help="0: off")
    ap.add_argument("--batches", type=int, default=4, help="fixed random batches, cycled")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--peak-tflops", type=float, default=None, help="the peak MFU is measured against")
    ap.add_argument("--device", default="cuda", help="cuda (the benchmark) or cpu (a smoke test)")
    ap.add_argument("--json", metavar="OUT", help="write the settings and figures here")
    args = ap.parse_args()
    if args.dim % args.heads or args.steps < 1 or args.warmup < 0 or args.batches < 1:
        ap.error("dim must be a multiple of heads, steps >= 1, warmup >= 0, batches >= 1")
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_gpt: no CUDA device visible to PyTorch (use --device cpu for a smoke test)")
    if args.compile and not hasattr(torch, "compile"):
        sys.exit(f"torch_gpt: --compile needs torch >= 2.0 (this is {torch.__version__})")

    tf32 = set_tf32(args.tf32 == "on") if dev.type == "cuda" else {}
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    if args.peak_tflops:
        peak, peak_source = args.peak_tflops, "--peak-tflops"
    else:
        peak, peak_source = mfu.peak_for(name, args.dtype, args.tf32 == "on")

    torch.manual_seed(args.seed)
    model = GPT(args.vocab, args.context, args.layers, args.heads, args.dim, args.dropout).to(dev)
    model.train()
    step_model = torch.compile(model) if args.compile else model
    g = torch.Generator(device=dev).manual_seed(args.seed)
    data = []
    for _ in range(args.batches):
        t = torch.randint(0, args.vocab, (args.batch, args.context + 1), device=dev, generator=g)
        data.append((t[:, :-1].contiguous(), t[:, 1:].contiguous()))

    n_params = sum(p.numel() for p in model.parameters())  # wte once (tied)
    flops_per_token = mfu.flops_per_token(n_params, args.layers, args.context, args.dim)
    settings = {k: v for k, v in vars(args).items() if k != "json"}
    settings.update(device_name=name, torch=torch.__version__, cuda=torch.version.cuda, params=n_params,
                    attention="scaled_dot_product_attention(is_causal=True)" if HAVE_SDPA else "manual (torch < 2.0)",
                    tf32_in_effect=tf32, flops_per_token=flops_per_token,
                    flops_formula=mfu.FORMULA,
                    peak_tflops=peak, peak_source=peak_source)
    if dev.type == "cuda":
        settings["bf16_reduced_precision_reduction"] = getattr(torch.backends.cuda.matmul,
                                                               "allow_bf16_reduced_precision_reduction", None)
    print("settings " + json.dumps(settings), flush=True)

    variants = []
    for kind in [k.strip() for k in args.optim.split(",") if k.strip()]:
        try:
            if kind not in ("foreach", "fused"):
                raise ValueError(f"unknown optimizer variant '{kind}' (foreach, fused)")
            r = run_variant(model, step_model, kind, data, args, dev)
        except Exception as e:  # noqa: BLE001 (a variant this torch lacks: recorded, the others go on)
            r = {"optimizer": kind, "error": f"{type(e).__name__}: {e}"}
            print(f"{kind}: FAILED: {r['error']}", flush=True)
        gc.collect()  # the last variant's optimizer state, before the next one's peak
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        if "error" in r:
            variants.append(r)
            continue
        r["achieved_tflops"] = flops_per_token * r["tokens_per_s"] / 1e12
        r["mfu"] = r["achieved_tflops"] / peak if peak else None
        mem = f"{r['peak_memory_bytes'] / 2**30:.2f} GiB" if r["peak_memory_bytes"] is not None else "n/a"
        mfu_s = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        print(f"{kind}: {r['tokens_per_s']:.0f} tokens/s, {r['ms_per_step']:.2f} ms/step, peak memory {mem}, "
              f"{r['achieved_tflops']:.1f} TFLOP/s, MFU {mfu_s}, loss {r['first_loss']:.4f} -> {r['last_loss']:.4f} "
              f"(warm-up {r['warmup_s']:.1f} s)", flush=True)
        variants.append(r)
    ok = [r for r in variants if "error" not in r]
    best = max(ok, key=lambda r: r["tokens_per_s"]) if ok else None
    if best:
        print(f"best: {best['optimizer']} {best['tokens_per_s']:.0f} tokens/s {best['ms_per_step']:.2f} ms/step",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": settings, "variants": variants, "best": best}, f, indent=1)
    sys.exit(0 if best else 1)


if __name__ == "__main__":
    main()
