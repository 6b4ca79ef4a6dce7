#!/usr/bin/env bash
# The planner across hosts (issue 47): gpt-mini on 2 namespace hosts at RATE,
# one rank per host (host i on CPU i, taskset), one compute thread per rank.
# First `dtrain train --set layout=auto` across the two: its probe measures
# the links (printed), rank 0 plans, and the run reports measured against
# predicted.  Then, with those measured links in a --links file, `dtrain plan
# -n 2 --nodes 2 --layout L` predicts each layout of LAYOUTS and a run across
# the hosts measures it (the median step time after WARM steps, metrics
# file).  Prints a markdown table.
#
#   bench/plan/validate_netns.sh [STEPS=8] [RATE=1000mbit]
set -euo pipefail
case ${1:-} in -h | --help) sed -n '2,/^set -e/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/../.."
STEPS=${1:-8}
RATE=${2:-1000mbit}
WARM=3
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 2; }
if ip netns list 2>/dev/null | grep -E '^dt([0-9]+|br)( |$)' >/dev/null; then
    echo "validate_netns: network namespaces dt0.. already exist (another job uses them?)" >&2
    exit 2
fi
WORK=$(mktemp -d /tmp/dtrain-planns.XXXXXX)
trap 'scripts/netns-cluster.sh down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
export XDG_CACHE_HOME="$WORK/cache"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/tok"
CFG=(--config configs/gpt-mini.json --set batch_size=8 --set threads=1)
RUN=("${CFG[@]}" --set log_interval=1 --set eval_interval=0 --set eval_batches=1 --set steps=$((WARM + STEPS)))
LAYOUTS=("" "zero_stage=1" "zero_stage=3" "tp=2" "pp=2 micro_batches=4" "pp=2 micro_batches=4 pipeline_schedule=gpipe"
         "micro_batches=4")

across() { # log, extra --set args: one rank on each of 2 namespace hosts
    local log=$1; shift
    rm -f "$WORK/m.jsonl"
    taskset -c 1 ip netns exec dt1 $BIN/dtrun --nnodes 2 --node-rank 1 --master 10.77.0.1:29500 --token-file "$WORK/tok" \
        -n 1 $BIN/dtrain train "${RUN[@]}" "$@" >"$WORK/n1" 2>&1 &
    local p=$!
    taskset -c 0 ip netns exec dt0 $BIN/dtrun --nnodes 2 --node-rank 0 --master 10.77.0.1:29500 --token-file "$WORK/tok" \
        -n 1 $BIN/dtrain train "${RUN[@]}" --set metrics_file="$WORK/m.jsonl" "$@" >"$log" 2>&1 || { wait $p; return 1; }
    wait $p
}
median_step() {
    python3 - "$WORK/m.jsonl" "$WARM" <<'PY'
import json, statistics, sys
e = [json.loads(l)["elapsed_s"] for l in open(sys.argv[1]) if '"loss"' in l]
d = [b - a for a, b in zip(e, e[1:])][int(sys.argv[2]) - 1:]
print(f"{statistics.median(d):.4f}")
PY
}

scripts/netns-cluster.sh up 2 --rate "$RATE" >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg); 2 namespace hosts at $RATE"
across "$WORK/auto" --set layout=auto || { cat "$WORK/auto"; exit 1; }
grep -h "layout auto" "$WORK/auto" | sed 's/^\[0\] [^ ]* //'
# the links it measured, as a --links file
python3 - "$WORK/auto" >"$WORK/links.json" <<'PY'
import json, re, sys
t = open(sys.argv[1]).read()
m = re.search(r"one host ([0-9.]+) us, ([0-9.]+) GB/s; across hosts ([0-9.]+) us, ([0-9.]+) GB/s", t)
a, b, c, d = map(float, m.groups())
print(json.dumps({"intra": {"latency_us": a, "bandwidth_GBps": b}, "inter": {"latency_us": c, "bandwidth_GBps": d},
                  "ranks_per_node": 1}))
PY
echo "| layout ($RATE, 2 hosts) | predicted s/step | measured s/step | error |"
echo "| --- | ---: | ---: | ---: |"
for l in "${LAYOUTS[@]}"; do
    pred=$($BIN/dtrain plan "${CFG[@]}" -n 2 --nodes 2 --links "$WORK/links.json" --layout "$l" --json 2>/dev/null |
           python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["step_s"])' || echo "-")
    args=()
    for w in $l; do args+=(--set "$w"); done
    if across "$WORK/r" "${args[@]}"; then
        meas=$(median_step)
        err=$(awk -v p="$pred" -v m="$meas" 'BEGIN { if (p + 0 > 0) printf "%+.0f%%", 100 * (m / p - 1); else print "-" }')
    else
        meas=failed err=""
        tail -n 3 "$WORK/r" >&2
    fi
    echo "| ${l:-default} | $pred | $meas | $err |"
done
