#!/usr/bin/env bash
# The planner's choice against its rivals on a shared machine (issue 47):
# `dtrain plan -n 4` picks a layout; it and the layouts given run in turn,
# ROUNDS times interleaved (a neighbour's load then hits every layout
# alike), each the median step time after 3 warm-up steps (metrics file);
# each layout's best round in samples/s (every replica's batch counted).
#
#   bench/plan/choice.sh [MODEL=gpt-mini] [ROUNDS=2] [STEPS=8] [LAYOUT...]
#   EXTRA="batch_size=8": more --set words for the plan and every run
set -euo pipefail
case ${1:-} in -h | --help) sed -n '2,/^set -e/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/../.."
MODEL=${1:-gpt-mini}
ROUNDS=${2:-2}
STEPS=${3:-8}
shift $(($# < 3 ? $# : 3))
RIVALS=("$@")
[ ${#RIVALS[@]} -gt 0 ] || RIVALS=("" "zero_stage=1" "tp=2" "pp=2 micro_batches=4" "tp=2 pp=2 micro_batches=2")
BIN=build/bin
WORK=$(mktemp -d /tmp/dtrain-planchoice.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export XDG_CACHE_HOME="$WORK/cache"
EXTRA_ARGS=(--set threads=1)
for w in ${EXTRA:-}; do EXTRA_ARGS+=(--set "$w"); done
$BIN/dtrain plan --config "configs/$MODEL.json" "${EXTRA_ARGS[@]}" -n 4 --top 1 >"$WORK/plan" 2>&1 || { cat "$WORK/plan"; exit 1; }
choice=$(sed -nE 's/^    (--set .*|\(the default layout\))$/\1/p' "$WORK/plan" | head -n 1 | sed 's/^--set //; s/ --set / /g')
[ "$choice" = "(the default layout)" ] && choice=""
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $MODEL ${EXTRA:-}; the planner chooses '${choice:-default}'"
rows=("$choice")
for l in "${RIVALS[@]}"; do [ "$l" = "$choice" ] || rows+=("$l"); done
: >"$WORK/all"
for ((r = 0; r < ROUNDS; r++)); do
    for i in "${!rows[@]}"; do
        args=()
        for w in ${rows[$i]}; do args+=(--set "$w"); done
        rm -f "$WORK/m.jsonl"
        $BIN/dtrun -n 4 $BIN/dtrain train --config "configs/$MODEL.json" "${EXTRA_ARGS[@]}" --set log_interval=1 \
            --set eval_interval=0 --set eval_batches=1 --set steps=$((3 + STEPS)) --set metrics_file="$WORK/m.jsonl" \
            "${args[@]}" >"$WORK/log" 2>&1 || { tail -n 2 "$WORK/log" >&2; continue; }
        samples=$(grep -m1 -o 'batch [0-9]* x [0-9]* rank' "$WORK/log" | awk '{print $2 * $4}')
        python3 - "$WORK/m.jsonl" "$samples" "$i" >>"$WORK/all" <<'PY'
import json, statistics, sys
e = [json.loads(l)["elapsed_s"] for l in open(sys.argv[1]) if '"loss"' in l]
step = statistics.median([b - a for a, b in zip(e, e[1:])][2:])
print(sys.argv[3], f"{float(sys.argv[2]) / step:.1f}")
PY
    done
done
echo "| layout | samples/s, best of $ROUNDS interleaved rounds |"
echo "| --- | ---: |"
for i in "${!rows[@]}"; do
    best=$(awk -v i="$i" '$1 == i && $2 > b { b = $2 } END { print b + 0 }' "$WORK/all")
    tag=""
    [ "$i" = 0 ] && tag=" (planner's choice)"
    echo "| ${rows[$i]:-default}$tag | $best |"
done
