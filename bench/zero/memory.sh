#!/usr/bin/env bash
# ZeRO's memory per rank: gpt-small (configs/gpt-small.json, AdamW) with
# zero_stage 0-3 on N = 1, 2, 4 ranks of this host, 2 steps each, batch 2,
# one compute thread per rank.  For each: the formula's model states
# (f32, AdamW: stage 0 16P, 1 8P + 8P/N, 2 4P + 12P/N, 3 16P/N, with P/N
# the shard dtrain cuts) and its estimate of the communication buffers
# (counted at the largest block), what rank 0 measured it allocated (the
# registry's buffers, the optimizer's state, the strategy's shard; its
# buffers at their most, apart), and rank 0's peak RSS (activations, the
# runtime, the data and, at start, the whole model every stage builds
# first included).  A markdown table on stdout.
#
#   bench/zero/memory.sh [BUILD_DIR=build]
set -euo pipefail
case ${1:-} in -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
[ -x "$BUILD/bin/dtrain" ] || { echo "build first: make build" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
echo "| N | zero_stage | model states: formula (MiB) | measured (MiB) | measured / formula | buffers: estimate (MiB) | measured at most (MiB) | peak RSS rank 0 (MiB) |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for n in 1 2 4; do
    for z in 0 1 2 3; do
        "$BUILD/bin/dtrun" -n $n "$BUILD/bin/dtrain" train --config configs/gpt-small.json --set steps=2 --set threads=1 \
            --set batch_size=2 --set eval_batches=1 --set zero_stage=$z >"$WORK/o" 2>&1 || { cat "$WORK/o"; exit 1; }
        python3 - "$WORK/o" "$n" "$z" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
plan = re.search(r"parameters ([\d.]+) MiB, gradients ([\d.]+) MiB, optimizer state ([\d.]+) MiB, communication buffers ([\d.]+) MiB", t)
got = re.search(r"model states allocated ([\d.]+) MiB .*communication buffers ([\d.]+) MiB at most, peak RSS ([\d.]+) MiB", t)
p, g, o, b = map(float, plan.groups())
alloc, buf, rss = map(float, got.groups())
states = p + g + o
print(f"| {sys.argv[2]} | {sys.argv[3]} | {states:.1f} | {alloc:.1f} | {alloc / states:.3f} | {b:.1f} | {buf:.1f} | {rss:.1f} |")
PY
    done
done
