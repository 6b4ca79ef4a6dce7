#!/usr/bin/env bash
# Data-parallel scaling on 2 namespace hosts, dtrain against PyTorch DDP
# (gloo) in the same run; writes the "data parallel scaling" section of
# bench/RESULTS.md.
#
#   bench/ddp/netns_scaling.sh [STEPS=30] [RATES="1000mbit 200mbit"]
#
# gpt-mini, batch 16 x 128 per rank, 1 thread per rank.  Scaling efficiency =
# aggregate tokens/s of 2 ranks / (2 x tokens/s of 1 process), each system
# against its own single-process figure.  dtrain also runs with f16 gradient
# compression.  Needs root and a built tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-30}
RATES=${2:-"1000mbit 200mbit"}
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first: make build" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'scripts/netns-cluster.sh down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/tok"
CFG=(--config configs/gpt-mini.json --set threads=1 --set log_interval=1 --set eval_interval=0 --set eval_batches=1)

rate_of() { python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][5:]
print(f"{len(rows) / sum(1.0 / r['tokens_per_s'] for r in rows):.1f}")
PY
}
exposed_of() { python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][5:]
print(f"{sum(r['comm_s'] for r in rows) / len(rows) * 1000:.0f} ms comm, "
      f"{sum(r['exposed_comm_s'] for r in rows) / len(rows) * 1000:.0f} ms exposed")
PY
}
dtrain_one() { $BIN/dtrain train "${CFG[@]}" --set steps=$((STEPS + 5)) --set metrics_file="$WORK/one.jsonl" >/dev/null; rate_of "$WORK/one.jsonl"; }
dtrain_two() { # extra --set args
    ip netns exec dt1 $BIN/dtrun --nnodes 2 --node-rank 1 --master 10.77.0.1:29500 --token-file "$WORK/tok" -n 1 \
        $BIN/dtrain train "${CFG[@]}" --set steps=$((STEPS + 5)) "$@" >"$WORK/n1" 2>&1 &
    local p=$!
    ip netns exec dt0 $BIN/dtrun --nnodes 2 --node-rank 0 --master 10.77.0.1:29500 --token-file "$WORK/tok" -n 1 \
        $BIN/dtrain train "${CFG[@]}" --set steps=$((STEPS + 5)) --set metrics_file="$WORK/two.jsonl" "$@" >"$WORK/n0" 2>&1
    wait $p
    echo "$(rate_of "$WORK/two.jsonl") ($(exposed_of "$WORK/two.jsonl"))"
}
torch_one() { /usr/bin/python3 bench/ddp/torch_ddp.py "$STEPS" | awk '{print $2}'; }
torch_two() {
    ip netns exec dt1 env RANK=1 WORLD_SIZE=2 MASTER_ADDR=10.77.0.1 MASTER_PORT=29600 GLOO_SOCKET_IFNAME=eth0 \
        /usr/bin/python3 bench/ddp/torch_ddp.py "$STEPS" >"$WORK/t1" 2>&1 &
    local p=$!
    ip netns exec dt0 env RANK=0 WORLD_SIZE=2 MASTER_ADDR=10.77.0.1 MASTER_PORT=29600 GLOO_SOCKET_IFNAME=eth0 \
        /usr/bin/python3 bench/ddp/torch_ddp.py "$STEPS" | awk '{print $2}'
    wait $p
}
eff() { python3 -c "print(f'{float(\"$1\".split()[0]) / (2 * $2):.2f}')"; }

d1=$(dtrain_one); t1=$(torch_one)
section="## Data parallel scaling, 2 hosts"
{
    echo "$section"
    echo
    echo "Measured $(date -u +%Y-%m-%d) on this 2-core VM: 2 network namespaces, one rank each, 1 compute thread per"
    echo "rank; gpt-mini, batch 16 x 128 per rank; $STEPS timed steps after 5 warm-up. Single process: dtrain $d1,"
    echo "PyTorch $t1 tokens/s. Efficiency = 2-rank aggregate / (2 x own single-process rate). Command:"
    echo "\`bench/ddp/netns_scaling.sh $STEPS \"$RATES\"\`"
    echo
    echo "| link | system | 2-rank tokens/s (per-step comm / exposed) | efficiency |"
    echo "| --- | --- | ---: | ---: |"
    for rate in $RATES; do
        scripts/netns-cluster.sh up 2 --rate "$rate" >/dev/null
        d2=$(dtrain_two); echo "| $rate | dtrain | $d2 | $(eff "$d2" "$d1") |"
        c2=$(dtrain_two --set grad_compression=f16); echo "| $rate | dtrain, f16 gradients | $c2 | $(eff "$c2" "$d1") |"
        t2=$(torch_two); echo "| $rate | PyTorch DDP (gloo) | $t2 | $(eff "$t2" "$t1") |"
        scripts/netns-cluster.sh down >/dev/null
    done
    echo
    echo "Both cores run both ranks here, so the 2-rank runs also compete for CPU with the other rank."
} >"$WORK/section.md"
cat "$WORK/section.md"
python3 bench/update_results.py bench/RESULTS.md "$WORK/section.md" "$section"
