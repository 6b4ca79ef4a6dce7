#!/usr/bin/env bash
# Heartbeats (DT_HEARTBEAT_TIMEOUT) with a deadline far away (DT_TIMEOUT=120):
# 1. a rank stopped by SIGSTOP is declared dead by the ranks waiting on it
#    within the heartbeat timeout, naming it;
# 2. a rank that is only busy (sleeps three heartbeat timeouts between two
#    allreduces) keeps beating and is never mistaken for a dead one.
. "$(dirname "$0")/lib.sh"
export DT_TIMEOUT=120 DT_HEARTBEAT_TIMEOUT=2
# small allreduces (recursive doubling / halving) and 16 MiB ones (the ring)
for count in 65536 4194304; do
    rm -f "$WORK"/result.* "$WORK"/ready.* "$WORK"/killed
    t0=$(now)
    "$BIN/dtrun" -n 3 "$BIN/fault_peer" "$WORK" --victim 1 --freeze 1 --delay-ms 500 --count $count --iters 100000000 >"$WORK/out" 2>"$WORK/err"
    [ $? != 0 ] || fail "dtrun exited 0 with a frozen rank"
    less_than "$(elapsed "$t0")" 20 || fail "the job took $(elapsed "$t0") s to end"
    frozen=$(cat "$WORK/killed")
    named=0
    for r in 0 2; do
        f="$WORK/result.$r"
        [ -f "$f" ] || { cat "$WORK/out" "$WORK/err"; fail "rank $r wrote no result"; }
        expect_grep "$f" "^status=DT_ERR_PEER$"
        grep -qE "rank 1 \([0-9.:]+\) sent no heartbeat for [0-9.]+ s or more \(DT_HEARTBEAT_TIMEOUT=2\)" "$f" && named=$((named + 1))
        at=$(sed -n 's/^failed_at=//p' "$f")
        d=$(python3 -c "print(round($at - $frozen, 2))")
        less_than "$d" 4 || fail "rank $r failed $d s after the freeze (heartbeat timeout 2 s)"
        echo "count $count, rank $r: $(sed -n 's/^message=//p' "$f" | cut -c1-100)... $d s after the freeze"
done
[ $named -ge 1 ] || { cat "$WORK"/result.*; fail "no rank named the frozen rank's missing heartbeat"; }
done
rm -f "$WORK"/result.* "$WORK"/ready.*
t0=$(now)
"$BIN/dtrun" -n 3 "$BIN/fault_peer" "$WORK" --victim 1 --stall-ms 6000 --count 65536 --iters 6 >"$WORK/out" 2>"$WORK/err" ||
    { cat "$WORK/out" "$WORK/err"; fail "a busy rank (6 s between allreduces, heartbeat timeout 2 s) failed the job"; }
for r in 0 1 2; do expect_grep "$WORK/result.$r" "^status=DT_OK$"; done
echo "busy rank: the job succeeded in $(elapsed "$t0") s"
echo ok
