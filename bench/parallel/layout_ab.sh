#!/usr/bin/env bash
# Throughput of two dtrain builds over the same layouts, side by side (issue 44,
# item 6: the strategy seam must not cost speed).  Each layout trains a small
# gpt (STEPS steps, logged every STEPS/3); a run's figure is the median of its
# windows after the first (the warm-up), in tokens/s; each layout runs A, B, A,
# B ... REPEATS times and the table gives both medians and their ratio.
#
#   [REPEATS=3] [STEPS=30] [ROWS=regex] bench/parallel/layout_ab.sh BEFORE_BIN_DIR AFTER_BIN_DIR
#
# The CPU is named in the output: a ratio measured on one CPU is not a claim for all.
set -u
A=${1:?before bin dir}; B=${2:?after bin dir}
REPEATS=${REPEATS:-3}; STEPS=${STEPS:-30}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
echo '{}' >"$W/empty.json"
gpt=(--set model=gpt --set data=text --set vocab=256 --set context=64 --set layers=4 --set heads=4 --set dim=128
     --set batch_size=8 --set steps="$STEPS" --set log_interval=$((STEPS / 3)) --set threads=1 --set eval_batches=1)
rate() { # bin n out args...: the median window rate after the first
    local bin=$1 n=$2 out=$3; shift 3
    "$bin/dtrun" -n "$n" "$bin/dtrain" train --config "$W/empty.json" "${gpt[@]}" "$@" \
        --set metrics_file="$out" >/dev/null 2>&1 || { echo "nan"; return; }
    python3 -c 'import json,sys,statistics as s
r=[json.loads(l)["tokens_per_s"] for l in open(sys.argv[1]) if "tokens_per_s" in l][1:]
print(s.median(r) if r else "nan")' "$out"
}
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
printf '| layout | ranks | before tokens/s | after tokens/s | after / before |\n| --- | --- | --- | --- | --- |\n'
row() { # label n args...
    local label=$1 n=$2; shift 2
    [[ "$label" =~ ${ROWS:-.} ]] || return 0
    local a=() b=()
    for i in $(seq "$REPEATS"); do
        a+=("$(rate "$A" "$n" "$W/a.jsonl" "$@")")
        b+=("$(rate "$B" "$n" "$W/b.jsonl" "$@")")
    done
    python3 -c 'import sys,statistics as s
a=[float(x) for x in sys.argv[3].split()]; b=[float(x) for x in sys.argv[4].split()]
ma,mb=s.median(a),s.median(b)
print(f"| {sys.argv[1]} | {sys.argv[2]} | {ma:,.0f} | {mb:,.0f} | {mb/ma:.3f} |")' "$label" "$n" "${a[*]}" "${b[*]}"
}
row "single process" 1
row "DDP" 2
row "tp 2" 2 --set tp=2
row "pp 2 (1f1b, 4 micro-batches)" 2 --set pp=2 --set micro_batches=4
row "ZeRO-1" 2 --set zero_stage=1
row "ZeRO-2" 2 --set zero_stage=2
row "ZeRO-3" 2 --set zero_stage=3
