#!/usr/bin/env bash
# kill -9 of one rank in the middle of large allreduces: every other rank gets
# DT_ERR_PEER naming the dead rank and its host:port within 10 s, later calls
# fail at once, and dtrun exits non-zero naming the rank.
. "$(dirname "$0")/lib.sh"
"$BIN/dtrun" -n 4 "$BIN/fault_peer" "$WORK" --victim 2 --delay-ms 700 --count 4194304 --iters 100000000 >"$WORK/out" 2>"$WORK/err"
rc=$?
[ $rc != 0 ] || fail "dtrun exited 0"
expect_grep "$WORK/err" "dtrun: rank 2 \(pid [0-9]+\) was killed by signal 9"
killed=$(cat "$WORK/killed") || fail "the victim never recorded its kill"
for r in 0 1 3; do
    f="$WORK/result.$r"
    [ -f "$f" ] || { cat "$WORK/out" "$WORK/err"; fail "rank $r wrote no result"; }
    expect_grep "$f" "^status=DT_ERR_PEER$"
    expect_grep "$f" "rank 2 \(127\.0\.0\.1:[0-9]+\)"
    at=$(sed -n 's/^failed_at=//p' "$f")
    delay=$(python3 -c "print($at - $killed)")
    less_than "$delay" 10 || fail "rank $r noticed the death after $delay s"
    echo "rank $r: DT_ERR_PEER $delay s after the kill"
done
expect_no_grep "$WORK/err" "barrier succeeded after a failure"
echo ok
