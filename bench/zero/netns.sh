#!/usr/bin/env bash
# ZeRO's throughput across hosts: gpt-mini and gpt-small on 2 namespace
# hosts at RATE, one rank per host (host i on CPU i, taskset), one compute
# thread per rank, with zero_stage 0 (plain data parallel), 1, 2 and 3.
# Every rank runs batch_size 16 x 128 tokens and micro_batches 1 (the
# default; with more, stage 2 reduce-scatters every micro-batch), so every
# row processes 2 x 2048 tokens per step.  Each round runs both models'
# four stages back to back, stage 0 first in even rounds and last in odd
# ones, so a busy neighbour's noise spreads over the stages; "ratio" is a
# stage's tokens/s over stage 0's of the same model in the same round.
#
# Bytes on the wire are measured, as bench/parallel/pp_netns.sh does: eth0's
# tx_bytes and rx_bytes of host dt0 (rank 0's; read from /proc/PID/net/dev
# of a process in dt0) sampled when the metrics file reports the end of
# the warm-up (step 3) and of step 3 + STEPS, their difference over STEPS
# per step.  What came before the first step (rendezvous, stage 0's
# parameters' broadcast) is "start-up".  The counters include TCP/IP
# headers and ACKs.  The formula is what each rank sends per step, with
# N = 2 ranks and P the parameters the trainer prints: stage 0 a ring
# allreduce, 2(N-1)/N x 4P = 4P; stages 1 and 2 a reduce-scatter of the
# gradients and an allgather of the parameters, 2 x (N-1)/N x 4P = 4P;
# stage 3 an allgather of every block's parameters before its forward and
# again before its backward and a reduce-scatter of its gradients,
# 3 x (N-1)/N x 4P = 1.5 x 4P (dtrain pads each block to a multiple of N:
# a few bytes).
# "other processes' CPU": the share of the machine's CPUs that processes
# outside dt0 and dt1 used over the same steps (the network's softirq time
# counts as other): this VM is shared, and a busy neighbour slows a row.
# Throughput: from the metrics' elapsed_s over the same STEPS steps; the
# table shows the best of ROUNDS rounds, and the ratio of every round with
# their median.
#
#   bench/zero/netns.sh [STEPS=6] [ROUNDS=2] [RATE=1000mbit]
#   bench/zero/netns.sh --help
set -euo pipefail
case ${1:-} in -h | --help) sed -n '2,/^set -e/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/../.."
STEPS=${1:-6}
ROUNDS=${2:-2}
RATE=${3:-1000mbit}
WARM=3
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first: make build" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 2; }
# netns-cluster.sh up first takes down whatever dt0.. exist, killing what runs
# in them: refuse to take over namespaces that someone else is using.
if ip netns list 2>/dev/null | grep -E '^dt([0-9]+|br)( |$)' >/dev/null; then
    echo "zero_netns: network namespaces dt0.. already exist (another job or test uses them?): $(ip netns list | grep -E '^dt' | awk '{print $1}' | tr '\n' ' ')" >&2
    echo "zero_netns: take them down with scripts/netns-cluster.sh down once they are free" >&2
    exit 2
fi
WORK=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
# $WORK/bg.*: what this script has running in the background (the run's
# from inside $(...), hence files; a run that ends well clears its own),
# killed on the way out.
trap 'cat "$WORK"/bg.* 2>/dev/null | xargs -r kill 2>/dev/null; scripts/netns-cluster.sh down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/tok"
RUN=(--set threads=1 --set log_interval=1 --set eval_interval=0 --set eval_batches=1 --set micro_batches=1
     --set steps=$((WARM + STEPS + 1)))

# Samples dt0's eth0 counters: at start, at the metrics' step WARM and step
# WARM + STEPS, and when $WORK/stop appears; prints one line of JSON.
poll() { python3 bench/netns_sample.py zero_netns "$1" "$SLEEPER" "$WARM" "$STEPS" "$WORK/stop"; }
# across ROUND ARGS...: one rank on each of 2 namespace hosts; prints the
# poll's JSON with the round and the parameter count the trainer printed.
across() {
    local round=$1; shift
    rm -f "$WORK/stop" "$WORK/m.jsonl"; poll "$WORK/m.jsonl" >"$WORK/p" &
    local q=$!
    echo $q >"$WORK/bg.run"
    taskset -c 1 ip netns exec dt1 $BIN/dtrun --nnodes 2 --node-rank 1 --master 10.77.0.1:29500 --token-file "$WORK/tok" \
        -n 1 $BIN/dtrain train "$@" "${RUN[@]}" >"$WORK/n1" 2>&1 &
    local p=$!
    echo $p >>"$WORK/bg.run"
    taskset -c 0 ip netns exec dt0 $BIN/dtrun --nnodes 2 --node-rank 0 --master 10.77.0.1:29500 --token-file "$WORK/tok" \
        -n 1 $BIN/dtrain train "$@" "${RUN[@]}" --set metrics_file="$WORK/m.jsonl" >"$WORK/n0" 2>&1 ||
        { cat "$WORK/n0" "$WORK/n1" >&2; exit 1; }
    wait $p || { cat "$WORK/n1" >&2; exit 1; }
    touch "$WORK/stop"; wait $q || exit 1; rm -f "$WORK/bg.run"
    local params
    params=$(sed -n 's/.*training gpt (\([0-9]*\) parameters).*/\1/p' "$WORK/n0" | head -1)
    [ -n "$params" ] || { echo "zero_netns: no parameter count in rank 0's output:" >&2; cat "$WORK/n0" >&2; exit 1; }
    python3 -c 'import json, sys; r = json.loads(sys.argv[1]); r.update(round=int(sys.argv[2]), params=int(sys.argv[3])); print(json.dumps(r))' \
        "$(cat "$WORK/p")" "$round" "$params"
}
# (Re)builds the cluster when dt0 or the process that holds it is gone.
cluster() {
    [ -n "${SLEEPER:-}" ] && [ -e /var/run/netns/dt0 ] && kill -0 "$SLEEPER" 2>/dev/null && return 0
    scripts/netns-cluster.sh up 2 --rate "$RATE" >/dev/null
    ip netns exec dt0 sleep 100000 &
    SLEEPER=$!
    echo $SLEEPER >"$WORK/bg.sleeper"
}
# row NAME ROUND ARGS...: a failed run is retried (up to 3 times) only when
# the namespaces vanished under it: anything that calls `netns-cluster.sh
# down` (tests/run_tests.sh does at its end) kills what runs inside them.
row() {
    local name=$1 out; shift
    for try in 1 2 3; do
        cluster
        if out=$(across "$@"); then echo "$name $out" >>"$WORK/rows"; return 0; fi
        if [ -e /var/run/netns/dt0 ] && kill -0 "$SLEEPER" 2>/dev/null; then exit 1; fi
        echo "zero_netns: $name: the namespaces were taken down under the run (try $try); again" >&2
    done
    exit 1
}
: >"$WORK/rows"
for ((r = 0; r < ROUNDS; r++)); do
    if ((r % 2 == 0)); then stages="0 1 2 3"; else stages="3 2 1 0"; fi
    for model in gpt-mini gpt-small; do
        for z in $stages; do
            echo "zero_netns: round $((r + 1))/$ROUNDS: $model zero_stage $z" >&2
            row "$model/$z" $r --config configs/$model.json --set zero_stage=$z
        done
    done
done
python3 - "$WORK/rows" "$RATE" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, js = line.split(" ", 1)
    runs.setdefault(name, []).append(json.loads(js))
tokens = 2 * 16 * 128      # 2 ranks x batch 16 x context 128 per step
MB = 1e6
factor = {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.5}   # x 4P, each rank's tx with N = 2
print("| model | zero_stage | tokens/s (best) | s per step | ratio to stage 0, each round (median) | "
      "measured MB per step, dt0 tx / rx | formula MB per step, each rank's tx | measured / formula | "
      "start-up MB, tx / rx | other processes' CPU |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for model in ("gpt-mini", "gpt-small"):
    base = {r["round"]: r["s_per_step"] for r in runs[f"{model}/0"]}
    for z in range(4):
        rs = runs[f"{model}/{z}"]
        best = min(rs, key=lambda r: r["s_per_step"])
        ratios = [base[r["round"]] / r["s_per_step"] for r in sorted(rs, key=lambda r: r["round"])]
        f = factor[z] * 4 * best["params"]
        print(f"| {model} | {z} | {tokens / best['s_per_step']:.0f} | {best['s_per_step']:.3f} | "
              f"{' '.join(f'{x:.3f}' for x in ratios)} ({statistics.median(ratios):.3f}) | "
              f"{best['tx'] / MB:.2f} / {best['rx'] / MB:.2f} | {f / MB:.2f} | {best['tx'] / f:.3f} | "
              f"{best['startup_tx'] / MB:.1f} / {best['startup_rx'] / MB:.1f} | {best['others_cpu']:.0%} |")
print()
print("measured tx per step, every round (MB):",
      "; ".join(f"{k} " + " ".join(f"{r['tx'] / MB:.2f}" for r in v) for k, v in runs.items()))
print("s per step, every round:",
      "; ".join(f"{k} " + " ".join(f"{r['s_per_step']:.3f}" for r in v) for k, v in runs.items()))
print("other processes' CPU, every round:",
      "; ".join(f"{k} " + " ".join(f"{r['others_cpu']:.0%}" for r in v) for k, v in runs.items()))
print("params: " + "; ".join(f"{m} {runs[m + '/0'][0]['params']}" for m in ("gpt-mini", "gpt-small")) +
      f"; link {sys.argv[2]}; 1 MB = 10^6 bytes; {tokens} tokens per step")
PY
