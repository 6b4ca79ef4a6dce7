#!/usr/bin/env bash
# make demo: 2 local ranks train gpt-mini data-parallel on the fortunes text
# for a bounded number of steps (about two minutes on a 2-core machine), then
# sample text from the checkpoint they wrote.
#   scripts/demo.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build}/bin
STEPS=${2:-250}
OUT=${DEMO_DIR:-/tmp/dtrain-demo}
rm -rf "$OUT"
echo "== dtrun -n 2 dtrain train --config configs/gpt-mini.json ($STEPS steps, data parallel, 1 thread per rank)"
"$BIN/dtrun" -n 2 "$BIN/dtrain" train --config configs/gpt-mini.json --set steps="$STEPS" --set threads=1 \
    --set log_interval=20 --set eval_interval=0 --set checkpoint_dir="$OUT" --set metrics_file="$OUT.jsonl"
echo
echo "== dtrain generate $OUT --prompt 'The ' --tokens 300"
"$BIN/dtrain" generate "$OUT" --prompt 'The ' --tokens 300
echo
echo "(metrics: $OUT.jsonl; checkpoint: $OUT)"
