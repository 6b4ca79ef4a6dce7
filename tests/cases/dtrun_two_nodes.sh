#!/usr/bin/env bash
# Two dtrun nodes on localhost (multi-node mode, 2 ranks each) run every collective.
. "$(dirname "$0")/lib.sh"
port=$(free_port)
echo "two-node-token-$$" >"$WORK/tok"
big=65536; [ "${QUICK:-0}" = 1 ] && big=8192
"$BIN/dtrun" --nnodes 2 --node-rank 1 --master 127.0.0.1:$port --token-file "$WORK/tok" -n 2 "$BIN/coll_check" --quick --big $big >"$WORK/n1" 2>&1 &
p1=$!
"$BIN/dtrun" --nnodes 2 --node-rank 0 --master 127.0.0.1:$port --token-file "$WORK/tok" -n 2 "$BIN/coll_check" --quick --big $big >"$WORK/n0" 2>&1 || { cat "$WORK/n0"; fail "node 0 failed"; }
wait $p1 || { cat "$WORK/n1"; fail "node 1 failed"; }
expect_grep "$WORK/n0" "^\[0\] coll_check: world 4: [0-9]+ checks, 0 mismatches"
echo ok
