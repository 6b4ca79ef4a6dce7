#!/usr/bin/env bash
# dt_comm_abort on one rank: every other rank fails with DT_ERR_ABORTED and
# sees the reason and who aborted; dt_comm_destroy reports the failure too.
. "$(dirname "$0")/lib.sh"
"$BIN/dtrun" -n 4 "$BIN/fault_peer" "$WORK" --victim 1 --abort-at 3 --count 65536 >"$WORK/out" 2>"$WORK/err"
[ $? != 0 ] || fail "dtrun exited 0"
expect_grep "$WORK/out" "rank 1: dt_comm_abort returned DT_ERR_ABORTED"
for r in 0 2 3; do
    f="$WORK/result.$r"
    [ -f "$f" ] || { cat "$WORK/out" "$WORK/err"; fail "rank $r wrote no result"; }
    expect_grep "$f" "^status=DT_ERR_ABORTED$"
    expect_grep "$f" "rank 1 \(127\.0\.0\.1:[0-9]+\) aborted the job: the test asked rank to give up"
done
echo ok
