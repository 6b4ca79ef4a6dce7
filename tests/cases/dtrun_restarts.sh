#!/usr/bin/env bash
# dtrun --max-restarts on one node: a rank that fails in generations 0 and 1
# makes dtrun restart every rank twice (saying why, with DT_RESTART set to the
# generation) and the job then succeeds; with one restart allowed the job
# stops after it, naming the failure, with the rank's exit status.
. "$(dirname "$0")/lib.sh"
prog='echo "rank $DT_RANK generation $DT_RESTART restartable ${DT_RESTARTABLE:-0}"
      if [ "$DT_RANK" = 1 ] && [ "$DT_RESTART" -lt 2 ]; then sleep 0.2; exit 5; fi; sleep 0.5'
"$BIN/dtrun" -n 3 --max-restarts 2 sh -c "$prog" >"$WORK/out" 2>"$WORK/err" ||
    { cat "$WORK/out" "$WORK/err"; fail "the job did not succeed after two restarts"; }
expect_grep "$WORK/err" "dtrun: restart 1 of 2: failure: rank 1 \(pid [0-9]+\) exited with status 5"
expect_grep "$WORK/err" "dtrun: restart 2 of 2: failure: rank 1 \(pid [0-9]+\) exited with status 5"
expect_grep "$WORK/err" "dtrun: generation 2: 1 node, 3 ranks"
for g in 0 1 2; do for r in 0 1 2; do
    expect_grep "$WORK/out" "^\[$r\] rank $r generation $g restartable 1$"
done; done
"$BIN/dtrun" -n 3 --max-restarts 1 sh -c "$prog" >"$WORK/out" 2>"$WORK/err"
rc=$?
[ $rc = 5 ] || { cat "$WORK/err"; fail "dtrun exited $rc, expected the failed rank's status 5"; }
expect_grep "$WORK/err" "dtrun: restart 1 of 1: failure: rank 1"
expect_grep "$WORK/err" "the job stops: failure: rank 1 \(pid [0-9]+\) exited with status 5; no restart left \(--max-restarts 1\)"
expect_no_grep "$WORK/out" "generation 2"
# without --max-restarts nothing restarts and ranks are told so
"$BIN/dtrun" -n 2 sh -c "$prog" >"$WORK/out" 2>"$WORK/err"
[ $? = 5 ] || fail "a job without --max-restarts did not stop at the first failure"
expect_grep "$WORK/out" "generation 0 restartable 0"
expect_no_grep "$WORK/out" "generation 1"
echo ok
