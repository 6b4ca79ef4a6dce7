#!/usr/bin/env bash
# Pipeline parallelism across hosts: gpt-small on 2 namespace hosts at RATE,
# one rank per host (host i on CPU i, taskset), one compute thread per rank,
# in four layouts: dp=2, tp=2, pp=2 with 1F1B and pp=2 with GPipe (both 4
# micro-batches of 4: batch_size 16 is kept), beside one process alone.
# Batches: every row runs batch_size 16 x 128 tokens per rank; dp=2 runs one
# such batch on each replica, so it processes 2 x the tokens per step of
# tp=2 and pp=2 (whose ranks share one batch): compare tokens/s, which
# accounts for it, not seconds per step.
#
# Bytes on the wire are measured, not computed: eth0's tx_bytes and rx_bytes
# of host dt0 (rank 0's host; read from /proc/PID/net/dev of a process in
# dt0, which costs no fork per sample) are sampled while the run goes, when
# the metrics file reports the end of the warm-up (step 3) and the end of
# step 3 + STEPS; their difference over STEPS is the steady state, per step.
# What came before the first step (rendezvous, the parameters' broadcast)
# is reported apart as "start-up"; one step after the window and the final
# evaluation are not counted.  The counters include TCP/IP headers and ACKs.
# The formula is what each rank sends per step (tx); see the table's notes.
# "other processes' CPU": the share of the machine's CPUs that processes outside
# dt0 and dt1 used over the same steps (/proc/stat less the ranks' own
# time; the network's softirq time counts as other, a few % on a quiet
# machine): this VM is shared, and a busy neighbour slows every row.
# Throughput: the best of ROUNDS rounds, from the metrics' elapsed_s over the
# same STEPS steps.
#
#   bench/parallel/pp_netns.sh [STEPS=8] [ROUNDS=2] [RATE=1000mbit]
#   bench/parallel/pp_netns.sh --help
set -euo pipefail
case ${1:-} in -h | --help) sed -n '2,/^set -e/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/../.."
STEPS=${1:-8}
ROUNDS=${2:-2}
RATE=${3:-1000mbit}
WARM=3
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first: make build" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 2; }
# netns-cluster.sh up first takes down whatever dt0.. exist, killing what runs
# in them: refuse to take over namespaces that someone else is using.
if ip netns list 2>/dev/null | grep -E '^dt([0-9]+|br)( |$)' >/dev/null; then
    echo "pp_netns: network namespaces dt0.. already exist (another job or test uses them?): $(ip netns list | grep -E '^dt' | awk '{print $1}' | tr '\n' ' ')" >&2
    echo "pp_netns: take them down with scripts/netns-cluster.sh down once they are free" >&2
    exit 2
fi
WORK=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
# $WORK/bg.*: what this script has running in the background (the run's
# from inside $(...), hence files; a run that ends well clears its own),
# killed on the way out.
trap 'cat "$WORK"/bg.* 2>/dev/null | xargs -r kill 2>/dev/null; scripts/netns-cluster.sh down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/tok"
CFG=(--config configs/gpt-small.json --set threads=1 --set log_interval=1 --set eval_interval=0 --set eval_batches=1
     --set steps=$((WARM + STEPS + 1)))

# Samples dt0's eth0 counters: at start, at the metrics' step WARM and step
# WARM + STEPS, and when $WORK/stop appears; prints one line of JSON.
poll() { python3 bench/netns_sample.py pp_netns "$1" "$SLEEPER" "$WARM" "$STEPS" "$WORK/stop"; }
one() {
    rm -f "$WORK/stop" "$WORK/m.jsonl"; poll "$WORK/m.jsonl" >"$WORK/p" &
    local q=$!
    echo $q >"$WORK/bg.run"
    taskset -c 0 ip netns exec dt0 $BIN/dtrain train "${CFG[@]}" --set metrics_file="$WORK/m.jsonl" >"$WORK/o" 2>&1 ||
        { cat "$WORK/o" >&2; exit 1; }
    touch "$WORK/stop"; wait $q || exit 1; rm -f "$WORK/bg.run"; cat "$WORK/p"
}
across() { # extra --set args: one rank on each of 2 namespace hosts
    rm -f "$WORK/stop" "$WORK/m.jsonl"; poll "$WORK/m.jsonl" >"$WORK/p" &
    local q=$!
    echo $q >"$WORK/bg.run"
    taskset -c 1 ip netns exec dt1 $BIN/dtrun --nnodes 2 --node-rank 1 --master 10.77.0.1:29500 --token-file "$WORK/tok" \
        -n 1 $BIN/dtrain train "${CFG[@]}" "$@" >"$WORK/n1" 2>&1 &
    local p=$!
    echo $p >>"$WORK/bg.run"
    taskset -c 0 ip netns exec dt0 $BIN/dtrun --nnodes 2 --node-rank 0 --master 10.77.0.1:29500 --token-file "$WORK/tok" \
        -n 1 $BIN/dtrain train "${CFG[@]}" --set metrics_file="$WORK/m.jsonl" "$@" >"$WORK/n0" 2>&1 ||
        { cat "$WORK/n0" "$WORK/n1" >&2; exit 1; }
    wait $p || { cat "$WORK/n1" >&2; exit 1; }
    touch "$WORK/stop"; wait $q || exit 1; rm -f "$WORK/bg.run"; cat "$WORK/p"
}
# (Re)builds the cluster when dt0 or the process that holds it is gone.
cluster() {
    [ -n "${SLEEPER:-}" ] && [ -e /var/run/netns/dt0 ] && kill -0 "$SLEEPER" 2>/dev/null && return 0
    scripts/netns-cluster.sh up 2 --rate "$RATE" >/dev/null
    ip netns exec dt0 sleep 100000 &
    SLEEPER=$!
    echo $SLEEPER >"$WORK/bg.sleeper"
}
# row NAME RUN ARGS...: a failed run is retried (up to 3 times) only when the
# namespaces vanished under it: anything that calls `netns-cluster.sh down`
# (tests/run_tests.sh does at its end, even when its filter ran no netns
# test) kills what runs inside them.
row() {
    local name=$1 out; shift
    for try in 1 2 3; do
        cluster
        if out=$("$@"); then echo "$name $out" >>"$WORK/rows"; return 0; fi
        if [ -e /var/run/netns/dt0 ] && kill -0 "$SLEEPER" 2>/dev/null; then exit 1; fi
        echo "pp_netns: $name: the namespaces were taken down under the run (try $try); again" >&2
    done
    exit 1
}
PP=(--set pp=2 --set micro_batches=4)
: >"$WORK/rows"
for ((r = 0; r < ROUNDS; r++)); do
    row one one
    row dp across
    row tp across --set tp=2
    row pp_1f1b across "${PP[@]}" --set pipeline_schedule=1f1b
    row pp_gpipe across "${PP[@]}" --set pipeline_schedule=gpipe
done
python3 - "$WORK/rows" "$RATE" <<'PY'
import json, sys
runs = {}
for line in open(sys.argv[1]):
    name, js = line.split(" ", 1)
    runs.setdefault(name, []).append(json.loads(js))
L, D, B, T, V, H = 6, 384, 16, 128, 256, 4 * 384
M = 4                      # micro-batches per step under pp
n = B * T                  # tokens in one batch
params = 12 * L * D * D + 13 * L * D + V * D + T * D + 2 * D
MB = 1e6
# What each rank sends per step (tx of its host), with 2 ranks: an allreduce
# sends 2(n-1)/n = 1 x its bytes from each rank.
formula = {
    "one": 0,
    "dp": 4 * params,                              # ring allreduce of every gradient
    "tp": (4 * L + 2) * n * D * 4,                 # 26 allreduces of n x dim floats
    "pp_1f1b": M * (B // M) * T * D * 4 + V * D * 4,  # m activations (or their gradients) + the tied wte's gradient
}
formula["pp_gpipe"] = formula["pp_1f1b"]
labels = [("one", "one process (1 thread)", 1), ("dp", "dp=2, batch 16 per replica (global 32)", 2),
          ("tp", "tp=2, batch 16", 1), ("pp_1f1b", "pp=2 1f1b, 4 micro-batches of 4 (batch 16)", 1),
          ("pp_gpipe", "pp=2 gpipe, 4 micro-batches of 4 (batch 16)", 1)]
print("| layout | tokens/s | s per step | measured MB per step, dt0 tx / rx | formula MB per step, each rank's tx | start-up MB, tx / rx | other processes' CPU |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for key, label, k in labels:
    best = min(runs[key], key=lambda r: r["s_per_step"])
    print(f"| {label} | {k * n / best['s_per_step']:.0f} | {best['s_per_step']:.2f} | "
          f"{best['tx'] / MB:.2f} / {best['rx'] / MB:.2f} | {formula[key] / MB:.2f} | "
          f"{best['startup_tx'] / MB:.1f} / {best['startup_rx'] / MB:.1f} | {best['others_cpu']:.0%} |")
print()
print("measured tx per step, every round (MB):",
      "; ".join(f"{k} " + " ".join(f"{r['tx'] / MB:.2f}" for r in runs[k]) for k, _, _ in labels))
print("other processes' CPU, every round:",
      "; ".join(f"{k} " + " ".join(f"{r['others_cpu']:.0%}" for r in runs[k]) for k, _, _ in labels))
print(f"params {params}; link {sys.argv[2]}; 1 MB = 10^6 bytes; bubble (p-1)/(m+p-1) = {1 / (M + 1):.0%} at p=2, m={M}")
PY
