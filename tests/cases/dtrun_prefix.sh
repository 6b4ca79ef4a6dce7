#!/usr/bin/env bash
# Every output line carries its rank; stderr stays stderr; the DT_* environment is set.
. "$(dirname "$0")/lib.sh"
"$BIN/dtrun" -n 3 sh -c 'echo "out r=$DT_RANK n=$DT_WORLD_SIZE l=$DT_LOCAL_RANK/$DT_LOCAL_WORLD_SIZE"; echo "err $DT_RANK" >&2; printf "no newline $DT_RANK"' \
    >"$WORK/out" 2>"$WORK/err" || fail "dtrun exited $?"
for r in 0 1 2; do
    expect_grep "$WORK/out" "^\[$r\] out r=$r n=3 l=$r/3$"
    expect_grep "$WORK/out" "^\[$r\] no newline $r$"
    expect_grep "$WORK/err" "^\[$r\] err $r$"
done
[ "$(grep -c . "$WORK/out")" = 6 ] || fail "expected 6 stdout lines"
# each rank gets the same, fresh, non-empty token
"$BIN/dtrun" -n 2 sh -c 'echo "tok=$DT_JOB_TOKEN"' >"$WORK/tok" || fail "token run"
[ "$(sort -u -k2 "$WORK/tok" | awk '{print $2}' | sort -u | wc -l)" = 1 ] || fail "ranks saw different tokens"
expect_grep "$WORK/tok" "tok=[0-9a-f]{32,}"
echo ok
