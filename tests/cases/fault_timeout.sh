#!/usr/bin/env bash
# A frozen rank (SIGSTOP): nothing hangs; the others fail with DT_ERR_TIMEOUT
# (or DT_ERR_PEER once a timed-out rank closes its links) within DT_TIMEOUT.
. "$(dirname "$0")/lib.sh"
t0=$(now)
DT_TIMEOUT=3 "$BIN/dtrun" -n 3 "$BIN/fault_peer" "$WORK" --victim 1 --freeze 1 --delay-ms 500 --count 65536 --iters 100000000 >"$WORK/out" 2>"$WORK/err"
[ $? != 0 ] || fail "dtrun exited 0"
less_than "$(elapsed "$t0")" 15 || fail "the job took $(elapsed "$t0") s to end"
frozen=$(cat "$WORK/killed")
timeouts=0
for r in 0 2; do
    f="$WORK/result.$r"
    [ -f "$f" ] || { cat "$WORK/out" "$WORK/err"; fail "rank $r wrote no result"; }
    expect_grep "$f" "^status=DT_ERR_(TIMEOUT|PEER)$"
    grep -q "status=DT_ERR_TIMEOUT" "$f" && timeouts=$((timeouts + 1)) && expect_grep "$f" "timed out after 3 s"
    at=$(sed -n 's/^failed_at=//p' "$f")
    less_than "$(python3 -c "print($at - $frozen)")" 6 || fail "rank $r failed too late"
done
[ $timeouts -ge 1 ] || fail "no rank reported DT_ERR_TIMEOUT"
echo ok
