#!/usr/bin/env bash
# The planner against measured runs (issue 47): for each model and each of
# 14 layouts of 4 ranks on this host (dp, ZeRO 1-3, tp, pp with 1F1B and
# GPipe, their mixes, micro-batches, recompute), `dtrain plan --layout`
# predicts the step time, and `dtrun -n 4 dtrain train` with that layout
# measures it: the median of the step times (the metrics file's elapsed_s
# differences, log_interval 1) after WARM warm-up steps.  Printed per row:
# predicted and measured s/step, the relative error (measured / predicted
# - 1), samples/s measured; then the planner's choice (dtrain plan's first
# layout, run too when it is not among the rows) against the row with the
# most samples/s measured.  One compute thread per rank.
#
#   bench/plan/validate.sh [STEPS=20] [MODELS="gpt-mini gpt-small"] [OUT=markdown table file]
#   EXTRA="batch_size=8" WARM=5: more --set words for every run and plan; warm-up steps
#   bench/plan/validate.sh --help
#
# The machine: the rows' timings hold for it only (nproc, the CPU model and
# the load average are printed first).  On fewer cores than 4 ranks the
# ranks share cores: the planner lets them take turns (docs/planner.md,
# "Ranks sharing cores").  bench/plan/score.py scores such a table again
# (its rows as a .tsv) without training.
set -euo pipefail
case ${1:-} in -h | --help) sed -n '2,/^set -e/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/../.."
STEPS=${1:-20}
MODELS=${2:-"gpt-mini gpt-small"}
OUT=${3:-/dev/null}
WARM=${WARM:-5}
N=4
EXTRA_ARGS=()
for w in ${EXTRA:-}; do EXTRA_ARGS+=(--set "$w"); done
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-planval.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export XDG_CACHE_HOME="$WORK/cache"
LAYOUTS=(
    ""
    "zero_stage=1"
    "zero_stage=2"
    "zero_stage=3"
    "tp=2"
    "tp=4"
    "pp=2 micro_batches=4"
    "pp=2 micro_batches=4 pipeline_schedule=gpipe"
    "pp=4 micro_batches=4"
    "tp=2 pp=2 micro_batches=2"
    "tp=2 zero_stage=1"
    "pp=2 micro_batches=8 zero_stage=1"
    "micro_batches=4 recompute=blocks"
    "tp=2 recompute=blocks"
)
echo "machine: $(nproc) cores, ${EXTRA:-} WARM $WARM STEPS $STEPS, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$OUT"

# measured CONFIG "SETS" -> "median_step_s samples_per_step" (empty on failure)
measure() {
    local cfg=$1 sets=$2 args=() w
    for w in $sets; do args+=(--set "$w"); done
    rm -f "$WORK/m.jsonl"
    "$BIN/dtrun" -n $N "$BIN/dtrain" train --config "configs/$cfg.json" --set threads=1 --set log_interval=1 \
        --set eval_interval=0 --set eval_batches=1 --set steps=$((WARM + STEPS)) --set metrics_file="$WORK/m.jsonl" \
        "${EXTRA_ARGS[@]}" "${args[@]}" >"$WORK/run.log" 2>&1 || { tail -n 3 "$WORK/run.log" >&2; return 0; }
    local mesh
    mesh=$(grep -m1 -o 'batch [0-9]* x [0-9]* rank' "$WORK/run.log" | awk '{print $2 * $4}')
    python3 - "$WORK/m.jsonl" "$WARM" "$mesh" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
warm, samples = int(sys.argv[2]), float(sys.argv[3])
e = [r["elapsed_s"] for r in recs]
d = [b - a for a, b in zip(e, e[1:])][warm - 1:]
print(f"{statistics.median(d):.4f} {samples:.0f}")
PY
}

for model in $MODELS; do
    "$BIN/dtrain" plan --config "configs/$model.json" --set threads=1 "${EXTRA_ARGS[@]}" -n $N --top 1 >"$WORK/plan" 2>&1 ||
        { cat "$WORK/plan"; exit 1; }
    choice=$(sed -nE 's/^    (--set .*|\(the default layout\))$/\1/p' "$WORK/plan" | head -n 1 | sed 's/^--set //; s/ --set / /g')
    [ "$choice" = "(the default layout)" ] && choice=""
    echo "$model: the planner chooses '${choice:-default}'"
    rows=("${LAYOUTS[@]}")
    found=0
    for l in "${LAYOUTS[@]}"; do [ "$l" = "$choice" ] && found=1; done
    [ $found = 1 ] || rows+=("$choice")
    {
        echo "| model | layout | predicted s/step | measured s/step | error | measured samples/s |"
        echo "| --- | --- | ---: | ---: | ---: | ---: |"
    } >>"$OUT"
    best_sps=0 best=""
    choice_sps=""
    for l in "${rows[@]}"; do
        pred=$("$BIN/dtrain" plan --config "configs/$model.json" --set threads=1 "${EXTRA_ARGS[@]}" -n $N --layout "$l" --json 2>/dev/null |
               python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["step_s"])' 2>/dev/null || echo "-")
        if [ "$pred" = "-" ]; then # dtrain plan --layout refused it (this model cannot run it: it said why)
            printf '%-10s %-48s refused by dtrain plan --layout\n' "$model" "${l:-default}"
            echo "| $model | ${l:-default} | refused | | | |" >>"$OUT"
            continue
        fi
        read -r meas samples < <(measure "$model" "$l"; echo) || true
        if [ -z "${meas:-}" ]; then
            printf '%-10s %-48s predicted %s  measured FAILED\n' "$model" "${l:-default}" "$pred"
            echo "| $model | ${l:-default} | $pred | failed | | |" >>"$OUT"
            continue
        fi
        err=$(awk -v p="$pred" -v m="$meas" 'BEGIN { if (p + 0 > 0) printf "%+.0f%%", 100 * (m / p - 1); else print "-" }')
        sps=$(awk -v s="$samples" -v m="$meas" 'BEGIN { printf "%.1f", s / m }')
        tag=""
        [ "$l" = "$choice" ] && tag=" (planner's choice)"
        printf '%-10s %-48s predicted %8s  measured %8s  error %6s  %8s samples/s%s\n' "$model" "${l:-default}" "$pred" \
            "$meas" "$err" "$sps" "$tag"
        echo "| $model | ${l:-default}$tag | $pred | $meas | $err | $sps |" >>"$OUT"
        if awk -v a="$sps" -v b="$best_sps" 'BEGIN { exit !(a > b) }'; then best_sps=$sps best=$l; fi
        [ "$l" = "$choice" ] && choice_sps=$sps
    done
    echo "$model: planner's choice '${choice:-default}' ${choice_sps:-?} samples/s; best measured '${best:-default}' $best_sps samples/s"
    echo "" >>"$OUT"
    echo "$model: the planner's choice \`${choice:-default}\` measured ${choice_sps:-?} samples/s; the best measured \`${best:-default}\` $best_sps samples/s." >>"$OUT"
    echo "" >>"$OUT"
done
