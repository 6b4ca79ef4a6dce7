#!/usr/bin/env bash
# dtrun names the rank that was declared dead, not the rank that noticed
# (issue 29): rank 1 freezes (SIGSTOP) in every generation; the others fail
# with DT_ERR_PEER and exit first, yet the restart line and the final stop
# name rank 1 and the silence seen.
. "$(dirname "$0")/lib.sh"
export DT_TIMEOUT=60 DT_HEARTBEAT_TIMEOUT=2
"$BIN/dtrun" -n 3 --max-restarts 1 "$BIN/fault_peer" "$WORK" --victim 1 --freeze 1 --delay-ms 300 --count 1024 \
    --iters 100000000 >"$WORK/out" 2>"$WORK/err" && fail "dtrun exited 0 with a frozen rank"
grep "^dtrun" "$WORK/err"
expect_grep "$WORK/err" "dtrun: restart 1 of 1: failure: rank 1 \([0-9.:]+\) sent no heartbeat for [0-9.]+ s or more; declared dead by rank [02] \(pid [0-9]+\)"
expect_grep "$WORK/err" "the job stops: failure: rank 1 \([0-9.:]+\) sent no heartbeat for [0-9.]+ s or more; declared dead by rank [02] .*; no restart left"
echo ok
