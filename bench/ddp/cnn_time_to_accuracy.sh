#!/usr/bin/env bash
# Fashion-MNIST cnn: training time to a test accuracy with 2 data-parallel
# ranks against 1 process, in one run; writes the "cnn time to accuracy"
# section of bench/RESULTS.md.
#
#   bench/ddp/cnn_time_to_accuracy.sh [TARGET=0.90] [MAX_EPOCHS=8]
#
# Every run sees the same global batch (128) and hyperparameters
# (configs/cnn.json: SGD lr 0.05, momentum 0.9), so they need about the same
# number of epochs; the test set (10,000 images) is evaluated every half
# epoch.  Times are training wall time (`train_s` in the metrics: evaluation
# excluded) at the first evaluation that reaches TARGET.
#   1 process, 1 thread         the baseline
#   1 process, 2 threads        the same two cores used by threads
#   2 ranks x 64, 1 thread each  data parallel on the local host (dtrun -n 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
TARGET=${1:-0.90}
MAX_EPOCHS=${2:-8}
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first: make build" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
HALF_EPOCH=234 # 60,000 / 128 / 2 steps
STEPS=$((MAX_EPOCHS * 469))

# run NAME BATCH THREADS [LAUNCHER...]: prints "train_s epochs accuracy" at
# the first evaluation reaching TARGET (the run stops there), or "- - best".
run() {
    local name=$1 batch=$2 threads=$3; shift 3
    "$@" $BIN/dtrain train --config configs/cnn.json --set batch_size=$batch --set threads=$threads \
        --set steps=$STEPS --set eval_interval=$HALF_EPOCH --set stop_at_accuracy=$TARGET --set log_interval=117 \
        --set metrics_file="$WORK/$name.jsonl" 2>&1 | sed "s/^/  $name: /" >&2
    python3 - "$WORK/$name.jsonl" "$TARGET" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"eval_accuracy"' in l]
target = float(sys.argv[2])
hit = next((r for r in rows if r["eval_accuracy"] >= target), None)
if hit:
    print(f'{hit["train_s"]:.1f} {hit["step"] / 469:.1f} {100 * hit["eval_accuracy"]:.2f}')
else:
    print(f'- - {100 * max((r["eval_accuracy"] for r in rows), default=0):.2f}')
PY
}

one=$(run one 128 1)
threads=$(run threads 128 2)
ranks=$(run ranks 64 1 $BIN/dtrun -n 2)
speedup() { python3 -c "a, b = '$1'.split()[0], '$2'.split()[0]; print('—' if '-' in (a, b) else f'{float(a) / float(b):.2f}')"; }

section="## Fashion-MNIST cnn: time to $(python3 -c "print(f'{100 * $TARGET:g}')")% test accuracy"
{
    echo "$section"
    echo
    echo "Measured $(date -u +%Y-%m-%d) on this 2-core VM. configs/cnn.json (SGD lr 0.05, momentum 0.9), global batch"
    echo "128 in every run, test set evaluated every half epoch; time is training wall time to the first evaluation"
    echo "at or above the target (evaluation time excluded). Command: \`bench/ddp/cnn_time_to_accuracy.sh $TARGET $MAX_EPOCHS\`"
    echo
    echo "| run | seconds | epochs | test accuracy (%) | speed-up over 1 process, 1 thread |"
    echo "| --- | ---: | ---: | ---: | ---: |"
    for r in "1 process, 1 thread|$one" "1 process, 2 threads|$threads" "2 ranks x batch 64, 1 thread each (dtrun -n 2)|$ranks"; do
        name=${r%%|*} vals=${r#*|}
        set -- $vals
        echo "| $name | $1 | $2 | $3 | $(speedup "$one" "$vals") |"
    done
} >"$WORK/section.md"
cat "$WORK/section.md"
python3 bench/update_results.py bench/RESULTS.md "$WORK/section.md" "$section"
