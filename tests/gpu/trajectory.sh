#!/usr/bin/env bash
# GPU against CPU: the same model, initial weights, batches and dropout
# masks trained on both engines, compared step by step.
#   gpt-mini (dropout 0.1), 50 steps, f32 (TF32 off): every step's loss
#     within 1e-4 relative of the CPU's;
#   the same in bf16: within 1%;
#   the mlp (fashion-mnist when installed), 50 steps, f32: within 1e-4.
# Then checkpoints across devices: 20 steps on the GPU with a checkpoint at
# step 10, resumed on the CPU to step 20, must follow the GPU's own
# trajectory (1e-4), and the reverse (CPU checkpoint resumed on the GPU).
# Usage: tests/gpu/trajectory.sh BIN_DIR [OUT_DIR]; exit 77 without a GPU.
# DT_TEST_DEVICE=emu runs the same script against the emu device (the cpu
# kernels behind device memory), which checks the script itself anywhere.
set -uo pipefail
bin=${1:?usage: trajectory.sh BIN_DIR [OUT_DIR]}
out=${2:-$(mktemp -d)}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/../.." && pwd)
dtrain="$bin/dtrain"
dev=${DT_TEST_DEVICE:-cuda}
text="$here/README.md" # any text works; this one travels with the repository
fail=0

run() { # name device extra-sets...
    local name=$1 dev=$2
    shift 2
    "$dtrain" train --set device="$dev" --set metrics_file="$out/$name.jsonl" --set log_interval=1 "$@" \
        >"$out/$name.log" 2>&1
    local rc=$?
    if [ $rc -ne 0 ]; then
        echo "FAIL $name: dtrain exited $rc"; tail -5 "$out/$name.log"
        return 1
    fi
}

compare() { # label a.jsonl b.jsonl tolerance
    python3 - "$@" <<'PY'
import json, sys
label, a, b, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def losses(p):
    d = {}
    for line in open(p):
        r = json.loads(line)
        if "loss" in r:
            d[r["step"]] = r["loss"]
    return d
x, y = losses(a), losses(b)
steps = sorted(set(x) & set(y))
if not steps:
    print(f"FAIL {label}: no common steps"); sys.exit(1)
worst = max(abs(x[s] - y[s]) / max(abs(y[s]), 1e-12) for s in steps)
at = max(steps, key=lambda s: abs(x[s] - y[s]) / max(abs(y[s]), 1e-12))
ok = worst <= tol
print(f"{'ok  ' if ok else 'FAIL'} {label}: {len(steps)} steps, worst relative difference {worst:.2e} at step {at} "
      f"(gpu {x[at]:.7g}, cpu {y[at]:.7g}; bound {tol:g})")
sys.exit(0 if ok else 1)
PY
}

if ! "$dtrain" train --set device="$dev" --set steps=1 --set data_path="$text" --config "$here/configs/gpt-mini.json" \
        --set batch_size=2 >"$out/probe.log" 2>&1; then
    if grep -q "built without CUDA\|no GPU\|no CUDA-capable\|cudaGetDeviceCount" "$out/probe.log"; then
        echo "SKIP: $(grep -m1 'device' "$out/probe.log")"
        exit 77
    fi
    echo "FAIL probe: $(tail -3 "$out/probe.log")"
    exit 1
fi

mini=(--config "$here/configs/gpt-mini.json" --set data_path="$text" --set steps=50 --set dropout=0.1
      --set eval_interval=0 --set warmup_steps=5)
run gpt-f32-cuda "$dev" "${mini[@]}" && run gpt-f32-cpu cpu "${mini[@]}" &&
    compare "gpt-mini f32 50 steps" "$out/gpt-f32-cuda.jsonl" "$out/gpt-f32-cpu.jsonl" 1e-4 || fail=1
run gpt-bf16-cuda "$dev" "${mini[@]}" --set precision=bf16 && run gpt-bf16-cpu cpu "${mini[@]}" --set precision=bf16 &&
    compare "gpt-mini bf16 50 steps" "$out/gpt-bf16-cuda.jsonl" "$out/gpt-bf16-cpu.jsonl" 1e-2 || fail=1

if [ -d /usr/share/datasets/fashion-mnist ] || [ -n "${DT_FASHION_MNIST:-}" ]; then
    mlp=(--config "$here/configs/mlp.json" --set steps=50 --set eval_interval=0)
    [ -n "${DT_FASHION_MNIST:-}" ] && mlp+=(--set data_path="$DT_FASHION_MNIST")
    run mlp-cuda "$dev" "${mlp[@]}" && run mlp-cpu cpu "${mlp[@]}" &&
        compare "mlp f32 50 steps" "$out/mlp-cuda.jsonl" "$out/mlp-cpu.jsonl" 1e-4 || fail=1
else
    echo "skip mlp: fashion-mnist is not installed on this machine"
fi

# checkpoints across devices
ck=(--config "$here/configs/gpt-mini.json" --set data_path="$text" --set steps=20 --set dropout=0.1
    --set eval_interval=0 --set warmup_steps=5 --set checkpoint_interval=10)
rm -rf "$out/ck-g" "$out/ck-c"
run ck-gpu-whole "$dev" "${ck[@]}" --set checkpoint_dir="$out/ck-g" &&
    run ck-gpu-then-cpu cpu "${ck[@]}" --set checkpoint_dir="$out/ck-g" --resume "$out/ck-g/step-00000010" &&
    compare "checkpoint written on the GPU, resumed on the CPU" "$out/ck-gpu-then-cpu.jsonl" "$out/ck-gpu-whole.jsonl" 1e-4 ||
    fail=1
run ck-cpu-whole cpu "${ck[@]}" --set checkpoint_dir="$out/ck-c" &&
    run ck-cpu-then-gpu "$dev" "${ck[@]}" --set checkpoint_dir="$out/ck-c" --resume "$out/ck-c/step-00000010" &&
    compare "checkpoint written on the CPU, resumed on the GPU" "$out/ck-cpu-then-gpu.jsonl" "$out/ck-cpu-whole.jsonl" 1e-4 ||
    fail=1
# eval and generate of the GPU's checkpoint on the GPU
DT_DEVICE="$dev" "$dtrain" eval "$out/ck-g" >"$out/eval-gpu.txt" 2>&1 && "$dtrain" eval "$out/ck-g" >"$out/eval-cpu.txt" 2>&1 &&
    python3 - "$out/eval-gpu.txt" "$out/eval-cpu.txt" <<'PY' || fail=1
import re, sys
def loss(p):
    m = re.search(r"loss ([0-9.]+)", open(p).read())
    return float(m.group(1)) if m else None
g, c = loss(sys.argv[1]), loss(sys.argv[2])
ok = g is not None and c is not None and abs(g - c) <= 1e-3 * abs(c)
print(f"{'ok  ' if ok else 'FAIL'} eval of the checkpoint on the GPU: loss {g} (cpu {c})")
sys.exit(0 if ok else 1)
PY
if DT_DEVICE="$dev" "$dtrain" generate "$out/ck-g" --prompt "The " --tokens 60 --temperature 0 >"$out/gen-gpu.txt" 2>"$out/gen-gpu.err"; then
    echo "ok   generate on the GPU: $(head -c 60 "$out/gen-gpu.txt" | tr '\n' ' ')"
else
    echo "FAIL generate on the GPU: $(tail -n 2 "$out/gen-gpu.err")"; fail=1
fi
exit $fail
