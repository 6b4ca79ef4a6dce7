#!/usr/bin/env bash
# The planner's memory per rank against what rank 0 allocates (issue 47):
# for each layout of 4 ranks, `dtrain plan --layout` predicts the model
# states (parameters, gradients, optimizer state, communication buffers) and
# the activations held at once; a short run (`dtrun -n 4`, STEPS steps)
# reports rank 0's allocated model states and communication buffers and its
# activation peak (the trainer's end lines), and its peak RSS, which also
# holds what the planner does not count (the program, OpenBLAS, the data).
#
#   bench/plan/memory.sh [CONFIG=gpt-small] [STEPS=3]
set -euo pipefail
case ${1:-} in -h | --help) sed -n '2,/^set -e/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/../.."
MODEL=${1:-gpt-small}
STEPS=${2:-3}
BIN=build/bin
WORK=$(mktemp -d /tmp/dtrain-planmem.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export XDG_CACHE_HOME="$WORK/cache"
CFG=(--config "configs/$MODEL.json" --set batch_size=8 --set threads=1)
LAYOUTS=("" "zero_stage=1" "zero_stage=2" "zero_stage=3" "tp=2" "pp=2 micro_batches=4" "micro_batches=4 recompute=blocks")
echo "| $MODEL, 4 ranks | predicted states MiB | allocated states MiB | predicted activations MiB | measured activations MiB | predicted total | peak RSS MiB |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for l in "${LAYOUTS[@]}"; do
    args=()
    for w in $l; do args+=(--set "$w"); done
    $BIN/dtrain plan "${CFG[@]}" -n 4 --layout "$l" >"$WORK/p" 2>&1 || { cat "$WORK/p"; continue; }
    $BIN/dtrun -n 4 $BIN/dtrain train "${CFG[@]}" --set steps=$STEPS --set log_interval=1 --set eval_batches=1 \
        "${args[@]}" >"$WORK/r" 2>&1 || { tail -n 3 "$WORK/r"; continue; }
    python3 - "$WORK/p" "$WORK/r" "${l:-default}" <<'PY'
import re, sys
p, r, name = open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3]
m = re.search(r"memory ([0-9.]+) MiB per rank \(parameters ([0-9.]+), gradients ([0-9.]+), optimizer ([0-9.]+), "
              r"buffers ([0-9.]+), activations ([0-9.]+)\)", p)
total, par, gr, opt, buf, act = map(float, m.groups())
a = re.search(r"model states allocated ([0-9.]+) MiB.*communication buffers ([0-9.]+) MiB at most, peak RSS ([0-9.]+)", r)
states, cbuf, rss = map(float, a.groups())
h = re.search(r"activation memory: at most ([0-9.]+) MiB", r)
meas_act = float(h.group(1)) if h else float("nan")
print(f"| {name} | {par + gr + opt + buf:.1f} | {states + cbuf:.1f} | {act:.1f} | {meas_act:.1f} | {total:.1f} | {rss:.1f} |")
PY
done
