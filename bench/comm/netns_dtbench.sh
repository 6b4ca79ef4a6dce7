#!/usr/bin/env bash
# dtbench across N namespace hosts (one rank each) with links shaped to RATE;
# writes the table into bench/RESULTS.md (section "dtbench, N hosts at RATE").
#
#   bench/comm/netns_dtbench.sh [N=4] [RATE=1000mbit] [OPS="allreduce"]
#
# Needs root (network namespaces) and a built tree (make build).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-4}
RATE=${2:-1000mbit}
OPS=${3:-allreduce}
BIN=build/bin
[ -x $BIN/dtbench ] || { echo "build first: make build" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'scripts/netns-cluster.sh down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
scripts/netns-cluster.sh up "$N" --rate "$RATE"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/tok"

run() { # args for dtbench -> table on stdout
    local pids=() i
    for ((i = N - 1; i >= 1; i--)); do
        ip netns exec dt$i $BIN/dtrun --nnodes "$N" --node-rank $i --master 10.77.0.1:29500 \
            --token-file "$WORK/tok" -n 1 $BIN/dtbench "$@" >"$WORK/node.$i" 2>&1 &
        pids+=($!)
    done
    ip netns exec dt0 $BIN/dtrun --nnodes "$N" --node-rank 0 --master 10.77.0.1:29500 \
        --token-file "$WORK/tok" -n 1 $BIN/dtbench "$@" | sed 's/^\[0\] //'
    for p in "${pids[@]}"; do wait "$p"; done
}

link_gbs=$(python3 -c "r='$RATE'; m={'gbit':1e9,'mbit':1e6,'kbit':1e3}; u=[k for k in m if r.endswith(k)][0]; print(float(r[:-len(u)])*m[u]/8/1e9)")
section="## dtbench, $N hosts at $RATE"
{
    echo "$section"
    echo
    echo "Measured $(date -u +%Y-%m-%d) on a 2-core VM: $N network namespaces (one rank each), both"
    echo "directions of each host's link shaped to $RATE with tbf (the wire: $link_gbs GB/s)."
    echo "busbw/link is busbw divided by the link rate. Command:"
    echo
    echo "    bench/comm/netns_dtbench.sh $N $RATE \"$OPS\""
    echo
    for op in $OPS; do
        echo "### $op"
        echo
        echo "| size (B) | time (us) | algbw (GB/s) | busbw (GB/s) | busbw/link | #wrong |"
        echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
        run "$op" -b 8 -e 64M -f 2 -n 10 -w 2 | awk -v link="$link_gbs" '!/^#/ && NF >= 14 {
            printf "| %s | %.1f | %.4f | %.4f | %.2f | %s |\n", $1, $6, $7, $8, $8 / link, $9 }'
        echo
    done
} >"$WORK/section.md"
cat "$WORK/section.md"

# Replace this section in bench/RESULTS.md (keep the others).
python3 bench/update_results.py bench/RESULTS.md "$WORK/section.md" "$section"
