#!/usr/bin/env bash
# The first error is the one the user sees (issue 29, E): a failure late in
# joining the job (here a malformed DT_HEARTBEAT_TIMEOUT, read after the
# engine connected) is reported as itself, not as the clean-up's "the
# communicator was destroyed".
. "$(dirname "$0")/lib.sh"
DT_HEARTBEAT_TIMEOUT=abc "$BIN/dtrun" -n 2 "$BIN/fault_peer" "$WORK" --iters 1 >"$WORK/out" 2>"$WORK/err" &&
    fail "DT_HEARTBEAT_TIMEOUT=abc: the job succeeded"
expect_grep "$WORK/err" "init: .*DT_HEARTBEAT_TIMEOUT"
expect_no_grep "$WORK/err" "communicator was destroyed"
echo ok
