#!/usr/bin/env bash
# Cost of the always-on collective mismatch check (docs/failures.md): 8-byte
# allreduce latency with this tree's build against a build of the commit
# before it (BASE_BIN, e.g. a worktree of eb085df built with make build),
# the two alternating (base first on even runs, the check first on odd
# ones), RUNS runs each, median of the runs' dtbench means.
#
#   [OP=allreduce] [BYTES=8] bench/comm/coll_check_cost.sh BASE_BIN [local2 local4 tcp4 hosts4]
#
# OP and BYTES: the dtbench operation and size (issue 43 timed the rooted
# ones' agreement with OP=broadcast, reduce, gather, scatter).
# local2/local4: 2 or 4 ranks on this host (shared memory, the arena);
# tcp4: 4 ranks on this host over TCP (DT_TRANSPORT=tcp: the message
# algorithms and thresholds of several hosts, loopback latency);
# hosts4: 4 network namespace hosts, links shaped to 1000mbit (root).
set -euo pipefail
cd "$(dirname "$0")/../.."
BASE_BIN=$(cd "$1" && pwd)
shift
NEW_BIN=$(pwd)/build/bin
RUNS=${RUNS:-5}
MINTIME=${MINTIME:-0.5}
SCEN=${*:-local2 local4 hosts4}
WORK=$(mktemp -d /tmp/dtrain-cost.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
OP=${OP:-allreduce}
BYTES=${BYTES:-8}
args=("$OP" -b "$BYTES" -e "$BYTES" -n 1000 -w 200 -t "$MINTIME")

# The (first, out-of-place) time column, found by name in dtbench's header:
# before and after its nccl-tests layout the column moved.
time_col() { awk '/^#/ && /size/ && /time/ && !c { for (i = 1; i <= NF; i++) if ($i ~ /^time/) { c = i - 1; break } }
                  !/^#/ && c && NF >= 8 { print $c }'; }

local_run() { # bin ranks -> time_us
    "$1/dtrun" -n "$2" "$1/dtbench" "${args[@]}" | sed 's/^\[0\] //' | time_col
}

hosts_run() { # bin -> time_us
    local bin=$1 pids=() i
    for ((i = 3; i >= 1; i--)); do
        ip netns exec dt$i "$bin/dtrun" --nnodes 4 --node-rank $i --master 10.77.0.1:29500 \
            --token-file "$WORK/tok" -n 1 "$bin/dtbench" "${args[@]}" >"$WORK/node.$i" 2>&1 &
        pids+=($!)
    done
    ip netns exec dt0 "$bin/dtrun" --nnodes 4 --node-rank 0 --master 10.77.0.1:29500 \
        --token-file "$WORK/tok" -n 1 "$bin/dtbench" "${args[@]}" | sed 's/^\[0\] //' | time_col
    for p in "${pids[@]}"; do wait "$p"; done
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "| scenario | base (us) | with the check (us) | ratio | runs: base | runs: check |"
echo "| --- | ---: | ---: | ---: | --- | --- |"
for sc in $SCEN; do
    : >"$WORK/base"
    : >"$WORK/new"
    if [ "$sc" = hosts4 ]; then
        scripts/netns-cluster.sh up 4 --rate 1000mbit >/dev/null
        head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/tok"
    fi
    for ((r = 0; r < RUNS; r++)); do
        order="base new"
        [ $((r % 2)) = 1 ] && order="new base" # neither always goes first
        for which in $order; do
            bin=$BASE_BIN
            [ $which = new ] && bin=$NEW_BIN
            if [ "$sc" = hosts4 ]; then hosts_run "$bin" >>"$WORK/$which"
            elif [ "$sc" = tcp4 ]; then DT_TRANSPORT=tcp local_run "$bin" 4 >>"$WORK/$which"
            else local_run "$bin" "${sc#local}" >>"$WORK/$which"; fi
        done
    done
    [ "$sc" = hosts4 ] && scripts/netns-cluster.sh down >/dev/null
    b=$(median <"$WORK/base")
    n=$(median <"$WORK/new")
    printf '| %s | %.2f | %.2f | %.3f | %s | %s |\n' "$sc" "$b" "$n" "$(python3 -c "print($n / $b)")" \
        "$(tr '\n' ' ' <"$WORK/base" | sed 's/ $//')" "$(tr '\n' ' ' <"$WORK/new" | sed 's/ $//')"
done
