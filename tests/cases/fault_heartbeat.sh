#!/usr/bin/env bash
# Heartbeats (DT_HEARTBEAT_TIMEOUT) with a deadline far away (DT_TIMEOUT=120):
# 1. a rank stopped by SIGSTOP is declared dead by the ranks waiting on it
#    within the heartbeat timeout, naming it;
# 2. a rank that is only busy (sleeps three heartbeat timeouts between two
#    allreduces) keeps beating and is never mistaken for a dead one.
. "$(dirname "$0")/lib.sh"
export DT_TIMEOUT=120 DT_HEARTBEAT_TIMEOUT=2
# The three jobs run side by side, each in a directory of its own: the ranks
# mostly wait (frozen, or sleeping), and the bounds are the ranks' own
# stamps against the freeze, with 2 s of slack over the timeout.
frozen_case() { # COUNT DIR: small allreduces (recursive doubling / halving) or 16 MiB ones (the ring)
    local count=$1 W=$2 t0 r f d at frozen named=0
    mkdir -p "$W"
    t0=$(now)
    "$BIN/dtrun" -n 3 "$BIN/fault_peer" "$W" --victim 1 --freeze 1 --delay-ms 500 --count $count --iters 100000000 >"$W/out" 2>"$W/err"
    [ $? != 0 ] || fail "dtrun exited 0 with a frozen rank"
    less_than "$(elapsed "$t0")" 20 || fail "the job took $(elapsed "$t0") s to end"
    frozen=$(cat "$W/killed")
    for r in 0 2; do
        f="$W/result.$r"
        [ -f "$f" ] || { cat "$W/out" "$W/err"; fail "rank $r wrote no result"; }
        expect_grep "$f" "^status=DT_ERR_PEER$"
        grep -qE "rank 1 \([0-9.:]+\) sent no heartbeat for [0-9.]+ s or more \(DT_HEARTBEAT_TIMEOUT=2\)" "$f" && named=$((named + 1))
        at=$(sed -n 's/^failed_at=//p' "$f")
        d=$(awk -v a="$at" -v f="$frozen" 'BEGIN { printf "%.2f\n", a - f }')
        less_than "$d" 4 || fail "rank $r failed $d s after the freeze (heartbeat timeout 2 s)"
        echo "count $count, rank $r: $(sed -n 's/^message=//p' "$f" | cut -c1-100)... $d s after the freeze"
    done
    [ $named -ge 1 ] || { cat "$W"/result.*; fail "no rank named the frozen rank's missing heartbeat"; }
}
busy_case() { # DIR
    local W=$1 t0 r
    mkdir -p "$W"
    t0=$(now)
    "$BIN/dtrun" -n 3 "$BIN/fault_peer" "$W" --victim 1 --stall-ms 6000 --count 65536 --iters 6 >"$W/out" 2>"$W/err" ||
        { cat "$W/out" "$W/err"; fail "a busy rank (6 s between allreduces, heartbeat timeout 2 s) failed the job"; }
    for r in 0 1 2; do expect_grep "$W/result.$r" "^status=DT_OK$"; done
    echo "busy rank: the job succeeded in $(elapsed "$t0") s"
}
PAR_JOBS=3
par "$WORK/small.log" frozen_case 65536 "$WORK/small"
par "$WORK/ring.log" frozen_case 4194304 "$WORK/ring"
par "$WORK/busy.log" busy_case "$WORK/busy"
par_wait
for j in small ring busy; do
    cat "$WORK/$j.log"
    par_ok "$WORK/$j.log" || fail "the $j case failed (above)"
done
echo ok
