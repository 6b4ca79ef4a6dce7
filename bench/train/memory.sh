#!/usr/bin/env bash
# Memory side by side (issue 48): the peak RSS of dtrain and of PyTorch 1.13
# eager (bench/train/torch_train.py, the same models and data) at two batch
# sizes per model, and the growth per sample between them: what one more
# sample of activations costs each.
#
#   [MODELS="gpt-mini gpt-small cnn"] [STEPS=3] [THREADS=1] bench/train/memory.sh
#
# Each run trains STEPS steps after torch_train.py's 5 warm-up steps (dtrain
# runs STEPS + 5 too); the peak is the kernel's (/usr/bin/time's maximum
# resident set, the whole process).  The gpt models run batch 8 and 16 (x 128
# tokens), the cnn 128 and 256.  PyTorch's peak includes its import (~233 MiB
# here); the growth per sample does not depend on such constant parts, but
# for PyTorch it is taken from its high-water mark while training (reset
# once data and model are ready: torch_train.py --batch), because its cnn
# peaks while loading the data (the images as floats, twice), above its
# training at these batches.
# Prints a markdown table; dtrain's own end-of-run memory lines for the
# larger batch follow it.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODELS=${MODELS:-gpt-mini gpt-small cnn}
STEPS=${STEPS:-3}
THREADS=${THREADS:-1}
PY=/usr/bin/python3
[ -x build/bin/dtrain ] || { echo "build first: make build" >&2; exit 2; }
$PY -c "import torch" || { echo "needs python3-torch (scripts/setup.sh)" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-mem.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

peak() { # command... -> peak RSS in KiB (the command's output in $WORK/out)
    /usr/bin/time -f "%M" -o "$WORK/rss" "$@" >"$WORK/out" 2>&1 || { cat "$WORK/out" >&2; return 1; }
    tail -1 "$WORK/rss"
}
dtrain_peak() { # model batch
    peak build/bin/dtrain train --config "configs/$1.json" --set batch_size="$2" --set steps=$((STEPS + 5)) \
        --set threads="$THREADS" --set eval_interval=0 --set eval_batches=1 --set checkpoint_dir= --set log_interval=100
}
torch_peak() { # model batch -> "whole-process peak KiB, training high-water KiB"
    local whole
    whole=$(OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS peak $PY bench/train/torch_train.py "$1" \
        "$THREADS" "$STEPS" --batch="$2") || return 1
    echo "$whole $(sed -n 's/^train_peak_kib //p' "$WORK/out")"
}
mib() { awk "BEGIN { printf \"%.1f\", $1 / 1024 }"; }
mib2() { awk "BEGIN { printf \"%.2f\", $1 / 1024 }"; }

echo "| model (batches) | dtrain peak RSS, MiB | PyTorch peak RSS, MiB | dtrain growth per sample, MiB | PyTorch growth per sample, MiB | ratio |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for m in $MODELS; do
    case $m in cnn | mlp) b1=128 b2=256 ;; *) b1=8 b2=16 ;; esac
    d1=$(dtrain_peak "$m" $b1)
    d2=$(dtrain_peak "$m" $b2)
    grep -E "^(memory|activation)" "$WORK/out" | sed "s/^/    $m batch $b2: /" >>"$WORK/lines"
    read -r t1 h1 <<<"$(torch_peak "$m" $b1)"
    read -r t2 h2 <<<"$(torch_peak "$m" $b2)"
    gd=$(awk "BEGIN { print ($d2 - $d1) / ($b2 - $b1) }")
    gt=$(awk "BEGIN { print ($h2 - $h1) / ($b2 - $b1) }")
    echo "| $m ($b1 -> $b2) | $(mib "$d1") -> $(mib "$d2") | $(mib "$t1") -> $(mib "$t2") | $(mib2 "$gd") | $(mib2 "$gt") |" \
         "$(awk "BEGIN { printf \"%.2f\", $gd / $gt }") |"
done
echo
echo "dtrain's end-of-run memory lines (the larger batch):"
cat "$WORK/lines"
