#!/usr/bin/env python3
"""Model FLOPs utilisation of a GPT training run, for the GPU benchmark's
dtrain and PyTorch rows (scripts/gpu-check.sh, bench/gpu/torch_gpt.py), so
both are measured the same way.

Model FLOPs per token, PaLM's formula (Chowdhery et al. 2022, appendix B):

    6 N + 12 L T D

N = every parameter (wte once: it is tied, and its use as the output
projection is a real matrix product), L layers, T the context, D the width:
6 N for the matrix products forward (2 N) and backward (4 N), 12 L T D for
attention's two T x T products (QK^T and PV) forward and backward, the
causal mask's skipped half counted (llm.c counts 6 L T D, which gives GPT-2
124M at T = 1024 about 7% fewer FLOPs per token and so a 7% lower MFU).  Model
FLOPs, not hardware FLOPs: recomputation is not counted.

MFU = FLOPs per token x tokens/s / the GPU's peak, the peak by the GPU's
name (nvidia-smi's, or torch's) for the run's precision: bf16 runs against
dense bf16 tensor cores, f32 runs against TF32's peak when TF32 is on, else
plain f32 (non-tensor) FMAs.  An unknown GPU: MFU "n/a".

  mfu.py --params N --layers L --context T --dim D --tokens-per-s X
         --precision f32|bf16 [--tf32] [--gpu NAME]     (prints JSON)
"""
import argparse
import json
import subprocess
import sys

# (name as it appears in the device name, dense bf16, TF32, f32) TFLOP/s,
# NVIDIA's data sheets; the most specific name first.  The H200 has the
# H100's compute (same GH100 chip and clocks), more and faster memory.
PEAKS = [("H200 NVL", 835.0, 418.0, 60.0), ("H200", 989.4, 494.7, 66.9), ("H100 NVL", 835.0, 418.0, 60.0),
         ("H100 PCIe", 756.0, 378.0, 51.2), ("H100", 989.4, 494.7, 66.9)]

FORMULA = "6*N + 12*L*T*D (PaLM appendix B; N = all parameters, wte once)"


def flops_per_token(params, layers, context, dim):
    return 6 * params + 12 * layers * context * dim


def peak_for(device_name, precision, tf32):
    """(peak TFLOP/s or None, where it came from)."""
    for key, bf16, tf32_peak, f32 in PEAKS:
        if key in (device_name or ""):
            return (bf16 if precision == "bf16" else tf32_peak if tf32 else f32), f"{key} from the device name"
    return None, f"unknown GPU '{device_name}': MFU n/a"


def gpu_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout
        return out.splitlines()[0].strip() if out.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def mfu(params, layers, context, dim, tokens_per_s, precision, tf32=False, device_name=None):
    """The figures a row records: flops_per_token, achieved_tflops, peak_tflops, peak_source, mfu (None: n/a)."""
    fpt = flops_per_token(params, layers, context, dim)
    peak, source = peak_for(device_name, precision, tf32)
    achieved = fpt * tokens_per_s / 1e12
    return {"flops_per_token": fpt, "flops_formula": FORMULA, "achieved_tflops": achieved, "peak_tflops": peak,
            "peak_source": source, "device_name": device_name, "mfu": achieved / peak if peak else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for k in ("params", "layers", "context", "dim"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--tokens-per-s", type=float, required=True)
    ap.add_argument("--precision", choices=("f32", "bf16"), required=True)
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--gpu", help="the GPU's name (default: nvidia-smi's first)")
    a = ap.parse_args()
    json.dump(mfu(a.params, a.layers, a.context, a.dim, a.tokens_per_s, a.precision, a.tf32, a.gpu or gpu_name()),
              sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
