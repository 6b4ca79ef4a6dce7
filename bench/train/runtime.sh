#!/usr/bin/env bash
# The execution runtime's costs, measured side by side in one run; writes two
# sections of bench/RESULTS.md.
#
#   bench/train/runtime.sh [BASELINE_DTRAIN] [RUNS=3]
#
# 1. Activation recomputation (recompute=blocks against off) on gpt-mini and
#    gpt-small at 1 thread: tokens/s and the activation memory one
#    micro-batch held (the trainer's own figure), runs alternating.
# 2. With BASELINE_DTRAIN (a dtrain binary built from an earlier commit): this
#    build against it, runs alternating, on gpt-mini and gpt-small at 1 and 2
#    threads and mlp at 1 thread -- the no-regression table.
# Each figure is the median of RUNS runs with their spread; every run trains
# STEPS=20 timed steps after 5 warm-up steps (the harmonic mean of per-step
# rates).  Both binaries choose their OpenBLAS kernels by the same rule
# (dt_blas_coretype_hint, unchanged between them), so they run the same ones;
# the header names the core this build reports ("blas: core ..." at start,
# as bench/train/run.sh reads it).
set -euo pipefail
cd "$(dirname "$0")/../.."
BASE=${1:-}
RUNS=${2:-${RUNS:-3}}
STEPS=${STEPS:-20}
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first: make build" >&2; exit 2; }
[ -z "$BASE" ] || [ -x "$BASE" ] || { echo "baseline $BASE is not an executable" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-runtime.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$WORK"' EXIT
run() { # binary config threads [key=value ...] -> "rate activation_mib"
    local bin=$1 cfg=$2 t=$3; shift 3
    local sets=()
    for kv in "$@"; do sets+=(--set "$kv"); done
    "$bin" train --config "$cfg" --set steps=$((STEPS + 5)) --set threads="$t" --set log_interval=1 \
        --set eval_interval=0 --set eval_batches=1 --set checkpoint_dir= --set metrics_file="$WORK/m.jsonl" \
        "${sets[@]}" >"$WORK/out.txt" 2>&1
    python3 - "$WORK/m.jsonl" "$WORK/out.txt" <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
key = "tokens_per_s" if "tokens_per_s" in rows[0] else "samples_per_s"
timed = rows[5:]
out = open(sys.argv[2]).read()
m = re.search(r"activation memory: at most ([0-9.]+) MiB", out)
core = re.search(r"blas: core (\S+),", out)
if core:
    open(sys.argv[2] + ".core", "w").write(core.group(1))
print(f"{len(timed) / sum(1.0 / r[key] for r in timed):.1f} {m.group(1) if m else '-'}")
PY
}

# median [spread] of the first field of lines
stats() { python3 -c "
import statistics, sys
v = [float(l.split()[0]) for l in sys.stdin if l.strip()]
print(f'{statistics.median(v):.0f} ({min(v):.0f}-{max(v):.0f})')"; }
median_of() { python3 -c "
import statistics, sys
v = [float(l.split()[0]) for l in sys.stdin if l.strip()]
print(statistics.median(v))"; }
ratio() { python3 -c "print(f'{$1 / $2:.3f}')"; }
cpu=$(sed -n 's/^model name\s*:\s*//p' /proc/cpuinfo | head -1)
blas_core() { cat "$WORK/out.txt.core" 2>/dev/null || echo "${OPENBLAS_CORETYPE:-as dtrain chooses}"; }

section1="## Activation recomputation"
{
    echo "$section1"
    echo
    echo "Measured $(date -u +%Y-%m-%d) on this 2-core VM ($cpu, OpenBLAS core $(blas_core)),"
    echo "1 thread, batch 16 x 128, $STEPS timed steps after 5 warm-up, median of $RUNS alternating runs"
    echo "(spread in brackets). recompute=blocks keeps only each transformer block's input and runs the"
    echo "block's forward again in backward; the losses and weights are bitwise those without it (unit/runtime)."
    echo "Activation memory: the most one micro-batch held (the trainer's figure). Command: \`STEPS=$STEPS bench/train/runtime.sh \"\" $RUNS\`"
    echo
    echo "| model | tokens/s off | tokens/s blocks | time added | activation MiB off | MiB blocks | saved |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    for m in gpt-mini gpt-small; do
        : >"$WORK/off" ; : >"$WORK/on"
        for r in $(seq "$RUNS"); do
            run $BIN/dtrain configs/$m.json 1 recompute=off >>"$WORK/off"
            run $BIN/dtrain configs/$m.json 1 recompute=blocks >>"$WORK/on"
        done
        off=$(median_of <"$WORK/off") on=$(median_of <"$WORK/on")
        moff=$(awk '{print $2}' "$WORK/off" | head -1) mon=$(awk '{print $2}' "$WORK/on" | head -1)
        echo "| $m | $(stats <"$WORK/off") | $(stats <"$WORK/on") | $(python3 -c "print(f'{($off / $on - 1) * 100:+.0f}%')") | $moff | $mon | $(python3 -c "print(f'{(1 - $mon / $moff) * 100:.0f}%')") |"
    done
    echo
    echo "The time added is one more forward of every transformer block (about a third of a step's"
    echo "compute) and the copy that keeps each block's output below its rewound activations; the memory"
    echo "left is the blocks' outputs plus one block's activations and gradients at a time."
} >"$WORK/s1.md"
cat "$WORK/s1.md"
python3 bench/update_results.py bench/RESULTS.md "$WORK/s1.md" "$section1"

[ -n "$BASE" ] || exit 0
section2="## Runtime refactor: no regression"
{
    echo "$section2"
    echo
    echo "This build against \`$BASE\` (a dtrain built from an earlier commit; here the one before issue 30's runtime: layers"
    echo "holding their activations, one model loop), measured $(date -u +%Y-%m-%d) on this 2-core VM ($cpu),"
    echo "both on OpenBLAS core $(blas_core); median of $RUNS alternating runs of $STEPS timed"
    echo "steps (spread in brackets). Command: \`STEPS=$STEPS bench/train/runtime.sh BASELINE_DTRAIN $RUNS\`"
    echo
    echo "| model | threads | before | after | after / before |"
    echo "| --- | ---: | ---: | ---: | ---: |"
    for spec in "gpt-mini 1" "gpt-mini 2" "gpt-small 1" "gpt-small 2" "mlp 1"; do
        set -- $spec
        : >"$WORK/a" ; : >"$WORK/b"
        for r in $(seq "$RUNS"); do
            run "$BASE" configs/$1.json "$2" >>"$WORK/b"
            run $BIN/dtrain configs/$1.json "$2" no_decay=none >>"$WORK/a"
        done
        unit=$([ "$1" = mlp ] && echo samples/s || echo tokens/s)
        echo "| $1 ($unit) | $2 | $(stats <"$WORK/b") | $(stats <"$WORK/a") | $(ratio "$(median_of <"$WORK/a")" "$(median_of <"$WORK/b")") |"
    done
    echo
    echo "The current build runs with no_decay=none, the baseline's optimizer arithmetic."
} >"$WORK/s2.md"
cat "$WORK/s2.md"
python3 bench/update_results.py bench/RESULTS.md "$WORK/s2.md" "$section2"
