#!/usr/bin/env bash
# Multi-copy tensor parallelism (issue 50): gpt-small with tp=2, tp_copies
# 1, 2 and 4, on one namespace host (2 ranks, shared memory) and across 2
# namespace hosts (one rank each, host i on CPU i, TCP at 1000mbit and
# 200mbit), one compute thread per rank.  ROUNDS rounds, the configurations
# alternating inside each round (the machine is shared); the median over
# rounds of each run's seconds per step (the harmonic mean of its steps'
# rates after 3 warm-up steps).  Exposed communication: a run's step across
# the hosts less the same tp_copies' step on one host (the computation is
# the same).  Memory: the trainer's activation peak per micro-batch and
# rank 0's peak RSS.  Namespaces copies0, copies1 and the bridge copiesbr
# (10.79.50.0/24), removed at the end.
#
#   bench/parallel/tp_copies.sh [STEPS=6] [ROUNDS=3] [COPIES="1 2 4"] [RATES="1000mbit 200mbit"]
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-6}
ROUNDS=${2:-3}
COPIES=${3:-1 2 4}
RATES=${4:-1000mbit 200mbit}
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first: make build" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
NS=(copies0 copies1)
BR=copiesbr
down() { for ns in "${NS[@]}" $BR; do ip netns del "$ns" 2>/dev/null || true; done; }
trap 'down; rm -rf "$WORK"' EXIT
down
ip netns add $BR
ip -n $BR link set lo up
ip -n $BR link add br0 type bridge
ip -n $BR link set br0 up
for i in 0 1; do
    ip netns add "${NS[$i]}"
    ip link add name cpv$i netns $BR type veth peer name eth0 netns "${NS[$i]}"
    ip -n $BR link set cpv$i master br0
    ip -n $BR link set cpv$i up
    ip -n "${NS[$i]}" link set lo up
    ip -n "${NS[$i]}" addr add 10.79.50.$((i + 1))/24 dev eth0
    ip -n "${NS[$i]}" link set eth0 up
    ip netns exec "${NS[$i]}" sysctl -qw net.ipv4.tcp_congestion_control=reno
done
shape() { # rate: tbf on both directions of each host's link (burst as scripts/netns-cluster.sh)
    local bits=$(( ${1%mbit} * 1000000 )) b
    b=$(( bits / 8 / 500 )); [ $b -lt 131072 ] && b=131072
    for i in 0 1; do
        tc -n "${NS[$i]}" qdisc replace dev eth0 root tbf rate "$1" burst $b latency 50ms
        tc -n $BR qdisc replace dev cpv$i root tbf rate "$1" burst $b latency 50ms
    done
}
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/tok"
CFG=(--config configs/gpt-small.json --set threads=1 --set log_interval=1 --set eval_interval=0 --set eval_batches=1
     --set steps=$((STEPS + 3)) --set tp=2)
inside() { # copies out
    ip netns exec copies0 $BIN/dtrun -n 2 $BIN/dtrain train "${CFG[@]}" --set tp_copies="$1" \
        --set metrics_file="$2.jsonl" >"$2" 2>&1 || { cat "$2"; exit 1; }
}
across() { # copies out
    taskset -c 1 ip netns exec copies1 $BIN/dtrun --nnodes 2 --node-rank 1 --master 10.79.50.1:29533 \
        --token-file "$WORK/tok" -n 1 $BIN/dtrain train "${CFG[@]}" --set tp_copies="$1" >"$2.n1" 2>&1 &
    local p=$!
    taskset -c 0 ip netns exec copies0 $BIN/dtrun --nnodes 2 --node-rank 0 --master 10.79.50.1:29533 \
        --token-file "$WORK/tok" -n 1 $BIN/dtrain train "${CFG[@]}" --set tp_copies="$1" \
        --set metrics_file="$2.jsonl" >"$2" 2>&1 || { cat "$2" "$2.n1"; exit 1; }
    wait $p
}
record() { # where copies out
    python3 - "$1" "$2" "$3" "$3.jsonl" >>"$WORK/rows" <<'PY'
import json, re, sys
where, copies, out, metrics = sys.argv[1:]
rows = [json.loads(l) for l in open(metrics) if '"loss"' in l][3:]
tokens = 16 * 128
step = sum(tokens / r["tokens_per_s"] for r in rows) / len(rows)
text = open(out).read()
act = float(re.search(r"activation memory: at most ([0-9.]+) MiB", text).group(1))
rss = float(re.search(r"peak RSS ([0-9.]+) MiB", text).group(1))
print(where, copies, f"{step:.4f}", act, rss)
PY
}
: >"$WORK/rows"
for ((r = 0; r < ROUNDS; r++)); do
    for c in $COPIES; do inside "$c" "$WORK/in$c"; record host "$c" "$WORK/in$c"; done
    for rate in $RATES; do
        shape "$rate"
        for c in $COPIES; do across "$c" "$WORK/x$c"; record "$rate" "$c" "$WORK/x$c"; done
    done
    echo "round $((r + 1)) of $ROUNDS done" >&2
done
cp "$WORK/rows" /tmp/tp_copies_rows.txt
python3 - "$WORK/rows" "$RATES" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    where, c, step, act, rss = line.split()
    runs.setdefault((where, int(c)), []).append((float(step), float(act), float(rss)))
med = {k: (statistics.median(s for s, _, _ in v), v[0][1], max(r for _, _, r in v), len(v)) for k, v in runs.items()}
copies = sorted({c for _, c in med})
print("| where | tp_copies | s per step (median) | vs tp_copies=1 | exposed communication (s per step) | activations per micro-batch | peak RSS rank 0 | runs |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for where in ["host"] + sys.argv[2].split():
    for c in copies:
        s, act, rss, n = med[(where, c)]
        base = med[(where, copies[0])][0]
        exposed = "" if where == "host" else f"{s - med[('host', c)][0]:.2f}"
        label = "one host (shared memory)" if where == "host" else f"2 hosts at {where}"
        print(f"| {label} | {c} | {s:.3f} | {s / base:.3f} | {exposed} | {act:.1f} MiB | {rss:.0f} MiB | {n} |")
PY
