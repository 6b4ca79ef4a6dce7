#!/usr/bin/env bash
# A rank that exits non-zero or is killed: dtrun stops the others within 5 s
# (they end on SIGTERM: about 2 s under ASan), exits non-zero and names the
# rank and how it ended; a rank that ignores SIGTERM is killed after the
# grace period.
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

# A rank that ignores SIGTERM is killed after the grace period (KILL_AFTER,
# 3 s, in tools/dtrun/supervise.c), not before and not much later.  Rank 0
# fails only once rank 1 ignores SIGTERM (else a SIGTERM before the trap
# would end rank 1 at once), and stamps the time; rank 1 stamps the time
# every 0.1 s while it lives, and leaves a child holding dtrun's pipes (dtrun
# stops reading them 0.5 s after the last rank ended).  The bounds: at least
# the grace from the failure to dtrun's end and to rank 1's last stamp (less
# a few periods of its stamping loop, which a loaded machine slows), and
# under 8 s in all: the grace, the 0.5 s drain, and dtrun's start and end
# (about 1 s, 2 under ASan on a loaded machine).
t0=$(now)
"$BIN/dtrun" -n 2 sh -c 'trap "" TERM
    if [ "$DT_RANK" = 0 ]; then
        while [ ! -s "$1/alive" ]; do sleep 0.05; done
        date +%s.%N >"$1/failed"; exit 3
    fi
    sleep 60 & echo $! >"$1/child"
    while :; do date +%s.%N >>"$1/alive"; sleep 0.1; done' sh "$WORK" >"$WORK/out" 2>"$WORK/err"
rc=$?
took=$(elapsed "$t0")
kill -9 "$(cat "$WORK/child")" 2>/dev/null
[ $rc = 3 ] || { cat "$WORK/err"; fail "dtrun exited $rc, expected 3"; }
failed=$(cat "$WORK/failed")
lived=$(awk -v f="$failed" '{ last = $1 } END { printf "%.3f\n", last - f }' "$WORK/alive")
echo "SIGTERM ignored: rank 1 lived $lived s after rank 0 failed; dtrun took $took s"
less_than "$took" 3 && fail "dtrun needed only $took s with a rank ignoring SIGTERM: it did not wait the 3 s grace"
less_than "$lived" 2.5 && fail "rank 1 (ignoring SIGTERM) lived only $lived s after the failure: killed before the 3 s grace"
less_than "$took" 8 || fail "dtrun needed $took s with a rank ignoring SIGTERM (grace 3 s)"
stamps=$(wc -l <"$WORK/alive")
sleep 0.3
[ "$(wc -l <"$WORK/alive")" = "$stamps" ] || fail "rank 1 still runs after dtrun ended"

# a program that does not exist
"$BIN/dtrun" -n 2 /nonexistent/program >"$WORK/out" 2>"$WORK/err"
[ $? = 127 ] || fail "expected 127 for a missing program"
expect_grep "$WORK/err" "cannot execute /nonexistent/program: No such file or directory"
# a bare name not on PATH, a directory: refused before any rank starts, saying why
PATH=/nonexistent-dir "$BIN/dtrun" -n 2 no-such-program >"$WORK/out" 2>"$WORK/err"
[ $? = 127 ] || fail "expected 127 for a program not on PATH"
expect_grep "$WORK/err" "'no-such-program' is not found on PATH \(/nonexistent-dir\): give its path"
"$BIN/dtrun" -n 2 "$WORK" >"$WORK/out" 2>"$WORK/err"
[ $? = 127 ] || fail "expected 127 for a directory"
expect_grep "$WORK/err" "cannot execute $WORK: Is a directory"
# what only exec refuses (a script whose interpreter is missing): each rank says why
printf '#!/nonexistent/interpreter\n' >"$WORK/script" && chmod +x "$WORK/script"
"$BIN/dtrun" -n 2 "$WORK/script" >"$WORK/out" 2>"$WORK/err"
[ $? = 127 ] || fail "expected 127 for a script without its interpreter"
expect_grep "$WORK/err" "cannot execute the program: $WORK/script: no such file \(or its interpreter is missing\)"
echo ok
