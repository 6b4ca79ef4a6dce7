#!/usr/bin/env bash
# SIGINT and SIGTERM sent to dtrun reach every rank.
. "$(dirname "$0")/lib.sh"
for sig in INT TERM; do
    "$BIN/dtrun" -n 3 sh -c "trap 'echo got-$sig; exit 0' $sig; echo ready; while :; do sleep 0.1; done" >"$WORK/out" 2>"$WORK/err" &
    pid=$!
    # every rank has set its trap before the signal (on a loaded machine the start takes seconds)
    for _ in $(seq 300); do [ "$(grep -c ready "$WORK/out" 2>/dev/null)" = 3 ] && break; sleep 0.1; done
    [ "$(grep -c ready "$WORK/out")" = 3 ] || { kill $pid; cat "$WORK/out" "$WORK/err"; fail "the 3 ranks did not start in 30 s"; }
    t0=$(now)
    kill -$sig $pid
    wait $pid
    rc=$?
    less_than "$(elapsed "$t0")" 5 || fail "dtrun took too long after SIG$sig"
    [ "$(grep -c "got-$sig" "$WORK/out")" = 3 ] || { cat "$WORK/out" "$WORK/err"; fail "not every rank saw SIG$sig"; }
    [ $rc != 0 ] || fail "dtrun exited 0 after SIG$sig"
    expect_grep "$WORK/err" "forwarding it to the ranks"
done
echo ok
