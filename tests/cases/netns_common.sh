# Run one dtrun node per namespace dt0..dt(N-1) (sourced by the netns cases).
# run_cluster N TIMEOUT PROGRAM ARGS... -> outputs in $WORK/node.<i>, status 0 when all nodes succeed.
# RANKS_PER_NODE (default 1) ranks run in each namespace.
run_cluster() {
    local n=$1 limit=$2; shift 2
    local port=29500 pids=() i rc=0
    echo "netns-token-$$-$RANDOM" >"$WORK/tok"
    for ((i = n - 1; i >= 0; i--)); do
        timeout -k 3 "$limit" ip netns exec dt$i "$BIN/dtrun" --nnodes $n --node-rank $i --master 10.77.0.1:$port \
            --token-file "$WORK/tok" --join-timeout 60 -n "${RANKS_PER_NODE:-1}" "$@" >"$WORK/node.$i" 2>&1 &
        pids[$i]=$!
    done
    for ((i = 0; i < n; i++)); do wait ${pids[$i]} || rc=1; done
    return $rc
}
trap 'scripts/netns-cluster.sh down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
