#!/usr/bin/env bash
# A rank that exits non-zero or is killed: dtrun stops the others within 5 s,
# exits non-zero and names the rank and how it ended.
. "$(dirname "$0")/lib.sh"
t0=$(now)
"$BIN/dtrun" -n 4 sh -c 'if [ "$DT_RANK" = 1 ]; then sleep 0.3; exit 7; fi; sleep 60' >"$WORK/out" 2>"$WORK/err"
rc=$?
[ $rc = 7 ] || fail "dtrun exited $rc, expected the failed rank's status 7"
less_than "$(elapsed "$t0")" 5 || fail "dtrun took $(elapsed "$t0") s to stop the job"
expect_grep "$WORK/err" "dtrun: rank 1 \(pid [0-9]+\) exited with status 7"

t0=$(now)
"$BIN/dtrun" -n 3 sh -c 'if [ "$DT_RANK" = 2 ]; then sleep 0.3; kill -9 $$; fi; exec sleep 60' >"$WORK/out" 2>"$WORK/err"
rc=$?
[ $rc = 137 ] || fail "dtrun exited $rc, expected 137 (128+SIGKILL)"
less_than "$(elapsed "$t0")" 5 || fail "dtrun took too long"
expect_grep "$WORK/err" "rank 2 \(pid [0-9]+\) was killed by signal 9 \(Killed\)"

# a rank that ignores SIGTERM is killed after the grace period, still within 5 s
t0=$(now)
"$BIN/dtrun" -n 2 sh -c 'trap "" TERM; if [ "$DT_RANK" = 0 ]; then exit 3; fi; sleep 60 & wait; sleep 60' >"$WORK/out" 2>"$WORK/err"
rc=$?
[ $rc = 3 ] || fail "dtrun exited $rc, expected 3"
less_than "$(elapsed "$t0")" 5 || fail "dtrun needed $(elapsed "$t0") s with a rank ignoring SIGTERM"

# a program that does not exist
"$BIN/dtrun" -n 2 /nonexistent/program >"$WORK/out" 2>"$WORK/err"
[ $? = 127 ] || fail "expected 127 for a missing program"
expect_grep "$WORK/err" "cannot execute the program: /nonexistent/program"
echo ok
