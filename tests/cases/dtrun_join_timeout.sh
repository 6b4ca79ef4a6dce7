#!/usr/bin/env bash
# A node that never joins: the job fails after --join-timeout naming it.
. "$(dirname "$0")/lib.sh"
port=$(free_port)
echo secret >"$WORK/tok"
t0=$(now)
"$BIN/dtrun" --nnodes 3 --node-rank 0 --master 127.0.0.1:$port --token-file "$WORK/tok" --join-timeout 2 -n 1 true \
    >"$WORK/out" 2>"$WORK/err" &
p0=$!
"$BIN/dtrun" --nnodes 3 --node-rank 2 --master 127.0.0.1:$port --token-file "$WORK/tok" --join-timeout 2 -n 1 true \
    >"$WORK/out2" 2>"$WORK/err2"
wait $p0 && fail "node 0 succeeded without node 1"
less_than "$(elapsed "$t0")" 10 || fail "join timeout took too long"
expect_grep "$WORK/err" "node\(s\) 1 of 3 did not join within 2 s"
# two dtruns claiming the same node rank
"$BIN/dtrun" --nnodes 2 --node-rank 0 --master 127.0.0.1:$port --token-file "$WORK/tok" --join-timeout 3 -n 1 true >/dev/null 2>&1 &
p0=$!
sleep 0.5
"$BIN/dtrun" --nnodes 2 --node-rank 0 --master 127.0.0.1:$port --token-file "$WORK/tok" --join-timeout 3 -n 1 true >"$WORK/out" 2>"$WORK/err" && fail "duplicate node rank accepted"
expect_grep "$WORK/err" "cannot serve the rendezvous store|joined twice"
wait $p0
echo ok
