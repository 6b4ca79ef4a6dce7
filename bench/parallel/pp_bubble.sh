#!/usr/bin/env bash
# Pipeline parallelism on one host (issue 32): the bubble and the
# activation memory of GPipe, 1F1B and interleaved 1F1B (bench/parallel/pp_bubble.c).
#   1. the bubble: the synthetic delay model (blocks that sleep 2 ms forward,
#      4 ms backward; P*2*2 blocks) on p = 2, 4, 8 ranks, m = 1, 4, 8, 16
#      micro-batches, 3 steps each (the first not counted): each stage's idle
#      fraction from the step's timeline against (p-1)/(m+p-1), interleaved
#      (v=2) (p-1)/(v*m+p-1).  Sleeping blocks make it independent of the
#      cores: 8 ranks on 2 cores is fine.
#   2. the timeline of one step of each schedule at p = 4, m = 8.
#   3. activation memory: gpt-small on p = 2 and 4 stages, 8 micro-batches of
#      2 sequences, 3 steps of real compute: each stage's peak activation bytes
#      and micro-batches in flight.
# Builds nothing: run `make build` first.  Tables (Markdown) go to stdout.
#
#   bench/parallel/pp_bubble.sh [BUILD_DIR=build]
set -euo pipefail
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
BIN=$BUILD/bin
for b in dtrun pp_bubble; do
    [[ -x $BIN/$b ]] || { echo "pp_bubble.sh: $BIN/$b is missing: build first (make build)" >&2; exit 2; }
done
WORK=$(mktemp -d /tmp/dtrain-pp-bubble.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

run() { # out ranks args...
    local out=$WORK/$1 n=$2
    shift 2
    "$BIN/dtrun" --no-prefix -n "$n" "$BIN/pp_bubble" "$@" >"$out" 2>&1 || { cat "$out" >&2; exit 1; }
}

echo "## The bubble (idle fraction = 1 - busy / span; measured - theory in percentage points)"
echo
for p in 2 4 8; do
    args=()
    [[ $p == 2 ]] && args+=(--header)
    [[ $p == 4 ]] && args+=(--picture 8)
    run bubble.$p "$p" "${args[@]}"
    grep '^|' "$WORK/bubble.$p"
done
echo
echo "## Timelines of one step, p = 4, m = 8 (digit: forward of that micro-batch, letter: its backward"
echo "## (A = micro-batch 0), '.': idle)"
grep -v '^|' "$WORK/bubble.4"
echo
echo "## Activation memory: gpt-small, 8 micro-batches of 2 x 128 tokens"
echo
run gpt.2 2 --gpt --steps 3 --header
grep '^|' "$WORK/gpt.2"
run gpt.4 4 --gpt --steps 3
grep '^|' "$WORK/gpt.4"
