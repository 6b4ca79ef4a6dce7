#!/usr/bin/env bash
# Where tensor parallelism belongs: gpt-small with tp=2 inside one
# namespace host (2 ranks, shared memory) against tp=2 across 2 namespace
# hosts (one rank each, TCP at RATE), beside dp=2 across the same 2 hosts
# and one process.  One compute thread per rank; across hosts, host i runs
# on CPU i (taskset).  Reports tokens/s and seconds per step, and the
# communication tp adds per step across hosts (step time across minus step
# time inside a host) against the formula: 4L + 2 allreduces of n x dim
# floats per step (2 per block forward and backward, the embedding and the
# output layer), each moving 2(t-1)/t of its bytes out of every rank.  The
# best of ROUNDS rounds.
#
#   bench/parallel/tp_netns.sh [STEPS=8] [ROUNDS=2] [RATE=1000mbit]
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-8}
ROUNDS=${2:-2}
RATE=${3:-1000mbit}
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first: make build" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'scripts/netns-cluster.sh down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/tok"
CFG=(--config configs/gpt-small.json --set threads=1 --set log_interval=1 --set eval_interval=0 --set eval_batches=1
     --set steps=$((STEPS + 3)))
rate_of() { python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][3:]
print(f"{len(rows) / sum(1.0 / r['tokens_per_s'] for r in rows):.1f}")
PY
}
one() { taskset -c 0 ip netns exec dt0 $BIN/dtrain train "${CFG[@]}" --set metrics_file="$WORK/m.jsonl" >"$WORK/o" 2>&1; rate_of "$WORK/m.jsonl"; }
inside() { # extra --set args: 2 ranks on namespace host 0
    ip netns exec dt0 $BIN/dtrun -n 2 $BIN/dtrain train "${CFG[@]}" --set metrics_file="$WORK/m.jsonl" "$@" >"$WORK/o" 2>&1 ||
        { cat "$WORK/o"; exit 1; }
    rate_of "$WORK/m.jsonl"
}
across() { # extra --set args: one rank on each of 2 namespace hosts
    taskset -c 1 ip netns exec dt1 $BIN/dtrun --nnodes 2 --node-rank 1 --master 10.77.0.1:29500 --token-file "$WORK/tok" \
        -n 1 $BIN/dtrain train "${CFG[@]}" "$@" >"$WORK/n1" 2>&1 &
    local p=$!
    taskset -c 0 ip netns exec dt0 $BIN/dtrun --nnodes 2 --node-rank 0 --master 10.77.0.1:29500 --token-file "$WORK/tok" \
        -n 1 $BIN/dtrain train "${CFG[@]}" --set metrics_file="$WORK/m.jsonl" "$@" >"$WORK/n0" 2>&1 || { cat "$WORK/n0"; exit 1; }
    wait $p
    rate_of "$WORK/m.jsonl"
}
scripts/netns-cluster.sh up 2 --rate "$RATE" >/dev/null
: >"$WORK/rows"
for ((r = 0; r < ROUNDS; r++)); do
    echo "one $(one)" >>"$WORK/rows"
    echo "tp_inside $(inside --set tp=2)" >>"$WORK/rows"
    echo "tp_across $(across --set tp=2)" >>"$WORK/rows"
    echo "dp_across $(across)" >>"$WORK/rows"
done
python3 - "$WORK/rows" "$RATE" <<'PY'
import sys
best = {}
for name, rate in (l.split() for l in open(sys.argv[1])):
    best[name] = max(best.get(name, 0.0), float(rate))
L, D, B, T, V = 6, 384, 16, 128, 256
n = B * T
tokens = n  # per step: one micro-batch of B x T on each data-parallel rank (dp=1 under tp=2)
per_allreduce = n * D * 4  # bytes
tp_bytes = (4 * L + 2) * per_allreduce  # each rank sends 2(t-1)/t = 1x of them with t = 2
params = 12 * L * D * D + 13 * L * D + V * D + T * D + 2 * D
rate_bits = float(sys.argv[2].replace("mbit", "")) * 1e6
print("| run | tokens/s | s per step |")
print("| --- | ---: | ---: |")
rows = [("one process (1 thread)", "one", tokens), ("tp=2 inside a host (shared memory)", "tp_inside", tokens),
        ("tp=2 across 2 hosts", "tp_across", tokens), ("dp=2 across 2 hosts", "dp_across", 2 * tokens)]
for label, key, tok in rows:
    print(f"| {label} | {best[key]:.0f} | {tok / best[key]:.2f} |")
extra = tokens / best["tp_across"] - tokens / best["tp_inside"]
print()
print(f"tp=2 across hosts adds {extra:.2f} s per step; the formula: {4 * L + 2} allreduces of {n} x {D} floats "
      f"= {tp_bytes / 2**20:.0f} MiB sent by each rank per step, {tp_bytes * 8 / rate_bits:.2f} s at {sys.argv[2]}, "
      f"none of it overlapped; dp=2 sends {params * 4 / 2**20:.0f} MiB of gradients per step, overlapped with backward.")
PY
