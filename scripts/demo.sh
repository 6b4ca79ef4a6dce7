#!/usr/bin/env bash
# make demo: 2 local ranks train a small byte-level GPT (configs/demo.json:
# gpt-mini's 4 blocks at width 128, 0.84 M parameters) data-parallel on the
# fortunes text, then sample text from the checkpoint they wrote.  About two
# minutes of training on a 2-core machine (README.md, "What the demo shows").
#   scripts/demo.sh [BUILD_DIR] [STEPS]     (STEPS: default the config's 1200)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build}/bin
STEPS=${2:-}
OUT=${DEMO_DIR:-/tmp/dtrain-demo}
rm -rf "$OUT"
args=(--set threads=1 --set checkpoint_dir="$OUT" --set metrics_file="$OUT.jsonl")
[ -n "$STEPS" ] && args+=(--set steps="$STEPS")
echo "== dtrun -n 2 dtrain train --config configs/demo.json (data parallel, 1 thread per rank)"
start=$SECONDS
"$BIN/dtrun" -n 2 "$BIN/dtrain" train --config configs/demo.json "${args[@]}"
echo "(trained in $((SECONDS - start)) s)"
echo
# Loss is in nats per byte.  On this text (computed over the whole fortunes
# text): uniform over 256 bytes 5.55; the bytes' own frequencies (a unigram
# model) 3.32; from the previous byte (bigram) 2.59.  The 1200 steps end near
# 1.8, where the sample is word-shaped (README.md, "What the demo shows").
echo "loss in nats per byte; for comparison on this text: 5.55 uniform, 3.32 unigram (byte frequencies),"
echo "2.59 bigram (from the previous byte); the eval loss above is on held-out text"
echo
echo "== dtrain generate $OUT --prompt 'The ' --tokens 300"
"$BIN/dtrain" generate "$OUT" --prompt 'The ' --tokens 300
echo
"$BIN/dtrain" report "$OUT.jsonl" -o "$OUT.html" >/dev/null
echo "(metrics: $OUT.jsonl; checkpoint: $OUT)"
echo "report: $OUT.html (loss, learning rate, grad norm and throughput against step: open it in a browser)"
