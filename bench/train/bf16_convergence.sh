#!/usr/bin/env bash
# bf16 mixed precision against f32 on the same run: configs/gpt-mini.json
# (500 steps, AdamW, cosine schedule, clipping; 1 thread) trained with
# precision f32 and bf16 from the same seed on the same batches.  Reports the
# evaluation loss at steps 100..500, the mean training loss of the last 10
# logged steps, their relative difference (target: within 1% at step 500) and
# each run's throughput; writes the "bf16 mixed precision: convergence"
# section of bench/RESULTS.md (RESULTS=FILE writes elsewhere).
#
#   bench/train/bf16_convergence.sh [STEPS=500]
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-500}
RESULTS=${RESULTS:-bench/RESULTS.md}
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first: make build" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-bf16.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
for p in f32 bf16; do
    echo "dtrain gpt-mini, precision $p: $STEPS steps" >&2
    $BIN/dtrain train --config configs/gpt-mini.json --set threads=1 --set steps="$STEPS" --set precision=$p \
        --set log_interval=1 --set metrics_file="$WORK/$p.jsonl" >"$WORK/$p.log"
done
line=$(grep -m1 "precision: bf16" "$WORK/bf16.log" || true)
case $line in
    *"AMX tiles"*) kernel="AMX tiles" ;;
    *AVX512_BF16*) kernel="AVX512_BF16" ;;
    *emulated*) kernel="emulated: no bf16 instructions on this CPU" ;;
    *) kernel="" ;;
esac
section="## bf16 mixed precision: convergence"
python3 - "$WORK" "$STEPS" "$kernel" "$(date -u +%Y-%m-%d)" "$(lscpu | sed -nE 's/^Model name: +//p' | head -1)" \
    >"$WORK/section.md" <<'PY'
import json, sys
work, steps, kernel, day, cpu = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def load(p):
    rows = [json.loads(l) for l in open(f"{work}/{p}.jsonl")]
    train = [r for r in rows if "loss" in r]
    ev = {r["step"]: r["eval_loss"] for r in rows if "eval_loss" in r}
    rate = len(train[5:]) / sum(1.0 / r["tokens_per_s"] for r in train[5:])
    return train, ev, rate
ft, fe, fr = load("f32")
bt, be, br = load("bf16")
print("## bf16 mixed precision: convergence\n")
print(f"Measured {day} on `{cpu}`, 1 thread, configs/gpt-mini.json ({steps} steps, AdamW, cosine schedule, "
      f"clipping), same seed and batches. bf16: matrix products on bf16-rounded operands with f32 sums "
      f"({kernel or 'kernel not reported'}), everything else f32 (weights, gradients, optimizer state, "
      f"LayerNorm, softmax, GELU, the loss). Command: `bench/train/bf16_convergence.sh {steps}`\n")
print("| step | f32 eval loss | bf16 eval loss | relative difference |")
print("| ---: | ---: | ---: | ---: |")
worst = 0.0
for s in sorted(fe):
    if s in be:
        d = (be[s] - fe[s]) / fe[s]
        worst = d if s == max(fe) else worst
        print(f"| {s} | {fe[s]:.4f} | {be[s]:.4f} | {100 * d:+.2f}% |")
fl = sum(r["loss"] for r in ft[-10:]) / 10
bl = sum(r["loss"] for r in bt[-10:]) / 10
print(f"| train loss, mean of the last 10 steps | {fl:.4f} | {bl:.4f} | {100 * (bl - fl) / fl:+.2f}% |")
print()
print(f"Throughput in the same runs (steps 6..{steps}, harmonic mean of per-step rates; one run each, so a "
      f"shared machine's load shows: the training-throughput table is the fair comparison): f32 {fr:,.0f} tokens/s, "
      f"bf16 {br:,.0f} tokens/s, {br / fr:.2f}x. Target: step-{steps} loss within 1% of f32: "
      f"{'met' if abs(worst) <= 0.01 else 'NOT met'} ({100 * worst:+.2f}%).")
PY
cat "$WORK/section.md"
python3 bench/update_results.py "$RESULTS" "$WORK/section.md" "$section"
