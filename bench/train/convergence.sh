#!/usr/bin/env bash
# Convergence of dtrain against PyTorch with the same hyperparameters; writes
# the "convergence" section of bench/RESULTS.md.
#
#   bench/train/convergence.sh [--quick]
#
# mlp and cnn: 5 Fashion-MNIST epochs (2,345 steps of 128; SGD lr 0.05,
# momentum 0.9, as configs/mlp.json and configs/cnn.json), test accuracy on
# all 10,000 test images.  gpt-mini: 500 steps of configs/gpt-mini.json
# (AdamW, cosine with warm-up, clipping), loss on the evaluation split (the
# last 10% of the fortunes windows; 10 batches of 16 x 128 tokens) at steps
# 200 and 500, plus the mean training loss of the 10 steps before each.
#
# PyTorch starts from the initial weights dtrain exported (checkpoint_initial)
# and draws the same batches (dtrain's sampler through ctypes), so the two
# differ only in arithmetic.  For mlp and cnn PyTorch also trains from its own
# initialisation and data order, the independent comparison.
# --quick: 1 epoch and 200 gpt steps (a smoke run; not for RESULTS.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first: make build" >&2; exit 2; }
/usr/bin/python3 -c "import torch" || { echo "needs python3-torch (scripts/setup.sh)" >&2; exit 2; }
EPOCHS=5 GPT_STEPS=500 GPT_EVAL=200,500
[ "${1:-}" = --quick ] && EPOCHS=1 GPT_STEPS=200 GPT_EVAL=100,200
WORK=$(mktemp -d /tmp/dtrain-converge.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

run_dtrain() { # model steps eval_interval
    echo "dtrain $1: $2 steps" >&2
    $BIN/dtrain train --config configs/$1.json --set threads=1 --set steps=$2 --set eval_interval=$3 \
        --set checkpoint_dir="$WORK/$1" --set checkpoint_initial=true --set log_interval=1 \
        --set metrics_file="$WORK/$1.jsonl" >"$WORK/$1.log"
}
run_torch() { # model steps eval_at [--own-init] -> WORK/model[-own].json
    local out="$WORK/$1${4:+-own}.json"
    echo "PyTorch $1${4:+ (own init)}: $2 steps" >&2
    /usr/bin/python3 bench/train/torch_converge.py "$1" "$WORK/$1/step-00000000" "$2" "$3" ${4:-} >"$out"
}

steps=$((EPOCHS * 469))
for m in mlp cnn; do
    run_dtrain $m $steps 469
    run_torch $m $steps $steps
    run_torch $m $steps $steps --own-init
done
run_dtrain gpt-mini $GPT_STEPS 100
run_torch gpt-mini $GPT_STEPS $GPT_EVAL

section="## Convergence: dtrain vs PyTorch"
python3 - "$WORK" "$steps" "$EPOCHS" "$GPT_EVAL" >"$WORK/section.md" <<'PY'
import json, sys
work, steps, epochs, gpt_eval = sys.argv[1], int(sys.argv[2]), sys.argv[3], [int(s) for s in sys.argv[4].split(",")]
def dtrain(m):
    rows = [json.loads(l) for l in open(f"{work}/{m}.jsonl")]
    ev = {r["step"]: r for r in rows if "eval_loss" in r}
    train = {r["step"]: r["loss"] for r in rows if "loss" in r}
    return ev, train
torch_v = lambda m: json.load(open(f"{work}/{m}.json"))
print("## Convergence: dtrain vs PyTorch\n")
print("Command: `bench/train/convergence.sh` (1 thread each). PyTorch starts from the weights dtrain exported at step 0")
print("and trains on the same batches in the same order, so only the arithmetic differs; \"PyTorch, own init\" uses")
print("PyTorch's default initialisation and its own shuffling. Target: accuracy within 0.5 points, gpt loss within 2%.\n")
print(f"| model ({epochs} epochs, SGD lr 0.05, momentum 0.9, batch 128) | dtrain test accuracy | PyTorch, same init and batches | difference (points) | PyTorch, own init and order |")
print("| --- | ---: | ---: | ---: | ---: |")
ok = True
for m in ("mlp", "cnn"):
    ev, _ = dtrain(m)
    d = 100 * ev[steps]["eval_accuracy"]
    t = 100 * torch_v(m)["eval"][str(steps)]["accuracy"]
    o = 100 * torch_v(m + "-own")["eval"][str(steps)]["accuracy"]
    ok &= abs(d - t) <= 0.5
    print(f"| {m} | {d:.2f}% | {t:.2f}% | {d - t:+.2f} | {o:.2f}% |")
print()
print("| gpt-mini (configs/gpt-mini.json) | dtrain eval loss | PyTorch eval loss | relative difference | dtrain train loss (mean of 10 steps) | PyTorch train loss | relative difference |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
ev, train = dtrain("gpt-mini")
tv = torch_v("gpt-mini")
for s in gpt_eval:
    d, t = ev[s]["eval_loss"], tv["eval"][str(s)]["loss"]
    dm = sum(train[k] for k in range(s - 9, s + 1)) / 10
    tm = sum(tv["train_loss"][s - 10:s]) / 10
    ok &= abs(d - t) / t <= 0.02
    print(f"| step {s} | {d:.4f} | {t:.4f} | {abs(d - t) / t:.2%} | {dm:.4f} | {tm:.4f} | {abs(dm - tm) / tm:.2%} |")
print()
print("All within target." if ok else "NOT within target: see the rows above.")
PY
cat "$WORK/section.md"
if [ "${1:-}" != --quick ]; then
    python3 bench/update_results.py bench/RESULTS.md "$WORK/section.md" "$section"
fi
