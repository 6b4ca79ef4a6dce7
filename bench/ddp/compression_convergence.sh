#!/usr/bin/env bash
# Effect of gradient compression (f16 / bf16 on the wire, f32 sums) on
# convergence, against uncompressed f32, in one run; writes the "gradient
# compression" section of bench/RESULTS.md.
#
#   bench/ddp/compression_convergence.sh [GPT_STEPS=500] [MLP_EPOCHS=5]
#
# 2 local ranks (dtrun -n 2), same seeds and data order for every format:
#   gpt-mini  configs/gpt-mini.json, batch 8 per rank (global 16 as the config),
#             evaluation loss on held-out text at every 100 steps;
#   mlp       configs/mlp.json, batch 64 per rank (global 128), test accuracy
#             after every epoch.
set -euo pipefail
cd "$(dirname "$0")/../.."
GPT_STEPS=${1:-500}
MLP_EPOCHS=${2:-5}
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first: make build" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FORMATS="none f16 bf16"

train() { # name config batch steps eval_interval format
    echo "  $1 ($6) ..." >&2
    $BIN/dtrun -n 2 $BIN/dtrain train --config "$2" --set batch_size=$3 --set steps=$4 --set eval_interval=$5 \
        --set grad_compression=$6 --set metrics_file="$WORK/$1-$6.jsonl" >"$WORK/$1-$6.log" 2>&1 ||
        { cat "$WORK/$1-$6.log" >&2; exit 1; }
}
for f in $FORMATS; do
    train gpt configs/gpt-mini.json 8 "$GPT_STEPS" 100 $f
    train mlp configs/mlp.json 64 $((MLP_EPOCHS * 469)) 469 $f
done

section="## Gradient compression: effect on convergence"
{
    echo "$section"
    echo
    echo "Measured $(date -u +%Y-%m-%d): 2 local ranks, the same seeds and data order for every wire format;"
    echo "f16 and bf16 round each rank's gradients once and each reduced block once, and sum in f32"
    echo "(docs/algorithms.md). Command: \`bench/ddp/compression_convergence.sh $GPT_STEPS $MLP_EPOCHS\`"
    echo
    python3 - "$WORK" "$FORMATS" "$GPT_STEPS" "$MLP_EPOCHS" <<'PY'
import json, sys
work, formats = sys.argv[1], sys.argv[2].split()
def evals(name, f):
    return [json.loads(l) for l in open(f"{work}/{name}-{f}.jsonl") if '"eval_loss"' in l]
gpt = {f: evals("gpt", f) for f in formats}
steps = [r["step"] for r in gpt["none"]]
print(f"gpt-mini, evaluation loss (global batch 16 x 128, {sys.argv[3]} steps):")
print()
print("| step | " + " | ".join(formats) + " | f16 - none | bf16 - none |")
print("| ---: |" + " ---: |" * (len(formats) + 2))
for i, s in enumerate(steps):
    v = {f: gpt[f][i]["eval_loss"] for f in formats}
    print(f"| {s} | " + " | ".join(f"{v[f]:.4f}" for f in formats) +
          f" | {v['f16'] - v['none']:+.4f} | {v['bf16'] - v['none']:+.4f} |")
print()
mlp = {f: evals("mlp", f) for f in formats}
print(f"mlp, test accuracy % (global batch 128, {sys.argv[4]} epochs):")
print()
print("| epoch | " + " | ".join(formats) + " | f16 - none | bf16 - none |")
print("| ---: |" + " ---: |" * (len(formats) + 2))
for i in range(len(mlp["none"])):
    v = {f: 100 * mlp[f][i]["eval_accuracy"] for f in formats}
    print(f"| {i + 1} | " + " | ".join(f"{v[f]:.2f}" for f in formats) +
          f" | {v['f16'] - v['none']:+.2f} | {v['bf16'] - v['none']:+.2f} |")
PY
} >"$WORK/section.md"
cat "$WORK/section.md"
python3 bench/update_results.py bench/RESULTS.md "$WORK/section.md" "$section"
