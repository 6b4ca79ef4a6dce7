#!/usr/bin/env bash
# The planner across hosts (issue 47): MODEL on HOSTS namespace hosts of this
# machine at RATE, one rank per host, one compute thread per rank.  The
# hosts' ranks share all of the machine's cores (no taskset; before
# 2026-11-28 host i ran on CPU i), which the planner models: the hosts share
# this machine's boot id (`--machines 1`).  First `dtrain train --set
# layout=auto` across the hosts: its probe measures the links (printed),
# rank 0 plans, and the run reports measured against predicted.  Then, with
# those measured links in a --links file, `dtrain plan -n HOSTS --nodes HOSTS
# --machines 1 --layout L` predicts each layout of the list and a run across
# the hosts measures it (the median step time after WARM steps, metrics
# file).  Prints a markdown table.
#
#   bench/plan/validate_netns.sh [STEPS=8] [RATE=1000mbit] [HOSTS=2] [MODEL=gpt-mini]
#
# RATE "none" leaves the links unshaped.  LAYOUTS='...;...' (semicolons
# between layouts, "default" for the default) replaces the list.  ROUNDS=R
# (default 1) measures every layout R times, the rounds in turn, and keeps
# each one's quickest (other processes only ever slow a run) with the
# slowest beside it.  PLAN_CACHE=DIR keeps the profile between runs.
# NETNS_PREFIX (default pl) names the namespaces; EXTRA (default
# batch_size=8) is more --set words for every run.
set -euo pipefail
case ${1:-} in -h | --help) sed -n '2,/^set -e/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/../.."
STEPS=${1:-8}
RATE=${2:-1000mbit}
HOSTS=${3:-2}
MODEL=${4:-gpt-mini}
WARM=3
export NETNS_PREFIX=${NETNS_PREFIX:-pl}
P=$NETNS_PREFIX
CORES=$(nproc)
[ -f "configs/$MODEL.json" ] || { echo "validate_netns: no configs/$MODEL.json" >&2; exit 2; }
[[ "$HOSTS" =~ ^[0-9]+$ ]] && [ "$HOSTS" -ge 2 ] || { echo "validate_netns: HOSTS '$HOSTS': at least 2" >&2; exit 2; }
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 2; }
if ip netns list 2>/dev/null | grep -E "^$P([0-9]+|br)( |\$)" >/dev/null; then
    echo "validate_netns: network namespaces ${P}0.. already exist (another job uses them?)" >&2
    exit 2
fi
WORK=$(mktemp -d /tmp/dtrain-planns.XXXXXX)
trap 'scripts/netns-cluster.sh down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
export XDG_CACHE_HOME="${PLAN_CACHE:-$WORK/cache}"
ROUNDS=${ROUNDS:-1}
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/tok"
CFG=(--config "configs/$MODEL.json" --set threads=1)
for w in ${EXTRA-batch_size=8}; do CFG+=(--set "$w"); done
RUN=("${CFG[@]}" --set log_interval=1 --set eval_interval=0 --set eval_batches=1 --set steps=$((WARM + STEPS)))
if [ -n "${LAYOUTS:-}" ]; then
    IFS=';' read -r -a LAYOUTS <<<"$LAYOUTS"
    for i in "${!LAYOUTS[@]}"; do [ "${LAYOUTS[$i]}" = default ] && LAYOUTS[$i]=""; done
elif [ "$HOSTS" = 2 ]; then
    LAYOUTS=("" "zero_stage=1" "zero_stage=3" "tp=2" "pp=2 micro_batches=4" "pp=2 micro_batches=4 pipeline_schedule=gpipe"
             "micro_batches=4")
else
    LAYOUTS=("" "zero_stage=1" "zero_stage=3" "tp=2" "tp=4" "pp=2 micro_batches=4" "pp=4 micro_batches=4"
             "pp=4 micro_batches=4 pipeline_schedule=gpipe" "tp=2 pp=2 micro_batches=2" "pp=2 micro_batches=8 zero_stage=1"
             "micro_batches=4 recompute=blocks")
fi

across() { # log, extra --set args: one rank on each of HOSTS namespace hosts
    local log=$1; shift
    local pids=() i rc=0
    rm -f "$WORK/m.jsonl"
    for ((i = HOSTS - 1; i >= 1; i--)); do
        ip netns exec $P$i $BIN/dtrun --nnodes $HOSTS --node-rank $i --master 10.77.0.1:29500 \
            --token-file "$WORK/tok" -n 1 $BIN/dtrain train "${RUN[@]}" "$@" >"$WORK/n$i" 2>&1 &
        pids+=($!)
    done
    ip netns exec ${P}0 $BIN/dtrun --nnodes $HOSTS --node-rank 0 --master 10.77.0.1:29500 \
        --token-file "$WORK/tok" -n 1 $BIN/dtrain train "${RUN[@]}" --set metrics_file="$WORK/m.jsonl" "$@" >"$log" 2>&1 || rc=1
    for i in "${pids[@]}"; do wait "$i" || rc=1; done
    return $rc
}
median_step() {
    python3 - "$WORK/m.jsonl" "$WARM" <<'PY'
import json, statistics, sys
e = [json.loads(l)["elapsed_s"] for l in open(sys.argv[1]) if '"loss"' in l]
d = [b - a for a, b in zip(e, e[1:])][int(sys.argv[2]) - 1:]
print(f"{statistics.median(d):.4f}")
PY
}

shape=(--rate "$RATE")
[ "$RATE" = none ] && shape=() # the veth links unshaped
scripts/netns-cluster.sh up "$HOSTS" "${shape[@]}" >/dev/null
echo "machine: $CORES cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg); $MODEL on $HOSTS namespace hosts at $RATE"
across "$WORK/auto" --set layout=auto || { cat "$WORK/auto"; exit 1; }
grep -h "layout auto" "$WORK/auto" | sed 's/^\[0\] [^ ]* //'
# the links it measured, as a --links file
python3 - "$WORK/auto" >"$WORK/links.json" <<'PY'
import json, re, sys
t = open(sys.argv[1]).read()
m = re.search(r"one host ([0-9.]+) us, ([0-9.]+) GB/s; across hosts ([0-9.]+) us, ([0-9.]+) GB/s", t)
a, b, c, d = map(float, m.groups())
machine = re.search(r"([0-9]+) sharing this machine's cores", t)
cpu = re.search(r"([0-9.]+) ns of CPU per byte", t)
links = {"intra": {"latency_us": a, "bandwidth_GBps": b}, "inter": {"latency_us": c, "bandwidth_GBps": d},
         "ranks_per_node": 1}
if cpu:
    links["inter_cpu_ns_per_byte"] = float(cpu.group(1))
if machine:
    links["ranks_per_machine"] = int(machine.group(1))
print(json.dumps(links))
PY
pred=() best=() worst=() refused=()
for i in "${!LAYOUTS[@]}"; do
    if $BIN/dtrain plan "${CFG[@]}" -n $HOSTS --nodes $HOSTS --machines 1 --links "$WORK/links.json" \
        --layout "${LAYOUTS[$i]}" --json >"$WORK/pred" 2>"$WORK/why"; then
        pred[$i]=$(python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["step_s"])' <"$WORK/pred")
    else # a layout this model cannot run (tp=4 with 6 heads): said, not measured
        pred[$i]=- refused[$i]=$(sed 's/^dtrain plan: --layout [^:]*: //' "$WORK/why" | head -n 1)
    fi
done
for ((round = 1; round <= ROUNDS; round++)); do
    for i in "${!LAYOUTS[@]}"; do
        [ -n "${refused[$i]:-}" ] && continue
        args=()
        for w in ${LAYOUTS[$i]}; do args+=(--set "$w"); done
        if across "$WORK/r" "${args[@]}"; then
            m=$(median_step)
            best[$i]=$(awk -v a="${best[$i]:-}" -v m="$m" 'BEGIN { print (a == "" || m + 0 < a + 0) ? m : a }')
            worst[$i]=$(awk -v a="${worst[$i]:-}" -v m="$m" 'BEGIN { print (a == "" || m + 0 > a + 0) ? m : a }')
        else
            tail -n 3 "$WORK/r" >&2
        fi
    done
done
echo "| layout ($MODEL, $RATE, $HOSTS hosts) | predicted s/step | measured s/step (quickest of $ROUNDS) | slowest | error |"
echo "| --- | ---: | ---: | ---: | ---: |"
for i in "${!LAYOUTS[@]}"; do
    l=${LAYOUTS[$i]} p=${pred[$i]} m=${best[$i]:-failed}
    [ -n "${refused[$i]:-}" ] && m="refused: ${refused[$i]}"
    err=$(awk -v p="$p" -v m="$m" 'BEGIN { if (p + 0 > 0 && m + 0 > 0) printf "%+.0f%%", 100 * (m / p - 1); else print "-" }')
    echo "| ${l:-default} | $p | $m | ${worst[$i]:--} | $err |"
done
