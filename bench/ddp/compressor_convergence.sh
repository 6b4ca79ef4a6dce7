#!/usr/bin/env bash
# Effect of the gradient compressors (PowerSGD, top-k; issue 51) on
# convergence, against uncompressed f32, in one run; writes the "gradient
# compressors" section of bench/RESULTS.md.
#
#   bench/ddp/compressor_convergence.sh [GPT_STEPS=500] [MLP_EPOCHS=5] [OUT_DIR]
#
#   PSGD_RANK=4 TOPK=0.01 START=10   the compressors' keys (powersgd_rank,
#                                    topk_fraction, compress_start_step); with
#                                    OUT_DIR kept, a run with other keys adds
#                                    its columns beside the earlier ones
#   RANKS="2 4"                      local ranks (dtrun -n), global batch kept
#   GPT_RANKS="$RANKS"               the same for gpt-mini alone (its runs are long)
#
# Same seeds and global data order for every run:
#   gpt-mini  configs/gpt-mini.json, global batch 16, evaluation loss on
#             held-out text every 100 steps (the same 80 windows whatever the ranks);
#   mlp       configs/mlp.json, global batch 128, test accuracy every epoch (on
#             the same 5056 test images).
# Uncompressed f32 data parallelism follows one process with the global batch
# (tests/cases/ddp_equivalence.sh, 1e-5), so f32 runs once, on 2 ranks, as
# the reference of every rank count.  OUT_DIR keeps the metrics (default: a
# temporary directory, removed).
set -euo pipefail
cd "$(dirname "$0")/../.."
GPT_STEPS=${1:-500}
MLP_EPOCHS=${2:-5}
PSGD_RANK=${PSGD_RANK:-4}
TOPK=${TOPK:-0.01}
START=${START:-10}
RANKS=${RANKS:-"2 4"}
GPT_RANKS=${GPT_RANKS:-$RANKS}
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first: make build" >&2; exit 2; }
if [ -n "${3:-}" ]; then WORK=$3; mkdir -p "$WORK"; else
    WORK=$(mktemp -d /tmp/dtrain-bench.XXXXXX); trap 'rm -rf "$WORK"' EXIT; fi

train() { # model ranks format
    local m=$1 n=$2 f=$3 out
    case $f in
        powersgd) out="$WORK/$m-powersgd-r$PSGD_RANK-$n" ;;
        topk) out="$WORK/$m-topk-k$TOPK-$n" ;;
        *) out="$WORK/$m-$f-$n" ;;
    esac
    [ -e "$out.done" ] && return 0 # kept from before
    echo "  $m on $n ranks ($f) ..." >&2
    local args=(--set grad_compression=$f --set compress_start_step=$START --set threads=1)
    [ "$f" = powersgd ] && args+=(--set powersgd_rank=$PSGD_RANK)
    [ "$f" = topk ] && args+=(--set topk_fraction=$TOPK)
    [ "$f" = none ] && args=(--set grad_compression=none --set threads=1)
    if [ "$m" = gpt ]; then
        args+=(--config configs/gpt-mini.json --set batch_size=$((16 / n)) --set steps="$GPT_STEPS" --set eval_interval=100
               --set eval_batches=$((10 * n / 2)))
    else
        args+=(--config configs/mlp.json --set batch_size=$((128 / n)) --set steps=$((MLP_EPOCHS * 469)) --set eval_interval=469
               --set eval_batches=$((79 * n / 2)))
    fi
    $BIN/dtrun -n "$n" $BIN/dtrain train "${args[@]}" --set metrics_file="$out.jsonl" >"$out.log" 2>&1 ||
        { cat "$out.log" >&2; exit 1; }
    touch "$out.done"
}
for m in mlp gpt; do
    train $m 2 none
    ranks=$RANKS
    [ $m = gpt ] && ranks=$GPT_RANKS
    for n in $ranks; do
        train $m "$n" powersgd
        train $m "$n" topk
    done
done

section="## Gradient compressors (PowerSGD, top-k): effect on convergence"
{
    echo "$section"
    echo
    echo "Measured $(date -u +%Y-%m-%d): local ranks, 1 thread each, the same seeds and global data order for"
    echo "every run; compress_start_step $START (docs/ddp.md); every finished run of the directory is shown."
    echo "f32 ran on 2 ranks: uncompressed data parallelism follows one process with the global batch to 1e-5,"
    echo "whatever the ranks. Command: \`bench/ddp/compressor_convergence.sh $GPT_STEPS $MLP_EPOCHS\`"
    echo
    python3 - "$WORK" "$GPT_STEPS" "$MLP_EPOCHS" <<'PY'
import glob, json, os, re, sys
work = sys.argv[1]
def evals(p):
    return [json.loads(l) for l in open(p) if '"eval_loss"' in l]
def runs(m):
    """Every finished run of model m in the directory: f32 first, then by ranks and name."""
    out = []
    for done in glob.glob(f"{work}/{m}-*.done"):
        name = os.path.basename(done)[len(m) + 1:-len(".done")]
        f, n = name.rsplit("-", 1)
        label = "f32" if f == "none" else re.sub(r"-r(\d+)", r" r\1", re.sub(r"-k", " ", f)) + f" x{n}"
        out.append((f != "none", int(n), label, evals(done[:-len(".done")] + ".jsonl")))
    return [r[2:] for r in sorted(out)]
for m, what, key, scale, fmt, unit in (("gpt", f"gpt-mini, evaluation loss (global batch 16, {sys.argv[2]} steps)", "eval_loss", 1, ".4f", "step"),
                                       ("mlp", f"mlp, test accuracy % (global batch 128, {sys.argv[3]} epochs)", "eval_accuracy", 100, ".2f", "epoch")):
    got = runs(m)
    if not got:
        continue
    print(f"{what}; rN: powersgd_rank, topk: its fraction, xN: ranks:")
    print()
    print(f"| {unit} | " + " | ".join(label for label, _ in got) + " |")
    print("| ---: |" + " ---: |" * len(got))
    for i, row in enumerate(got[0][1]):
        at = row["step"] if m == "gpt" else i + 1
        print(f"| {at} | " + " | ".join(format(scale * r[i][key], fmt) if i < len(r) else "-" for _, r in got) + " |")
    ref = scale * got[0][1][-1][key]
    cmp = [(label, scale * r[-1][key]) for label, r in got[1:] if len(r) == len(got[0][1])]
    if m == "gpt":
        print("\nfinal evaluation loss against f32: " + ", ".join(f"{n} {100 * (v - ref) / ref:+.2f}%" for n, v in cmp) + " (target: within 1%)")
    else:
        print("\nfinal accuracy against f32: " + ", ".join(f"{n} {v - ref:+.2f} points" for n, v in cmp) + " (target: within 0.5)")
    print()
PY
} >"$WORK/section.md"
cat "$WORK/section.md"
python3 bench/update_results.py bench/RESULTS.md "$WORK/section.md" "$section"
