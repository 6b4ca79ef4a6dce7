#!/usr/bin/env bash
# The shared-memory transport: chosen automatically on one host, mixed with TCP
# when one rank refuses it, DT_TRANSPORT=shm refused with a clear error when a
# peer cannot use it, bad settings named, a kill -9 seen through shared memory,
# and no segment left in /dev/shm afterwards.
. "$(dirname "$0")/lib.sh"
# Segments left behind: new since the start and their creator (the pid in
# the name) gone.  Counting them all would see other jobs' come and go; only
# the transport's names (dtrain-PID-..., dtrain-arena-PID-...) count, not
# another test's directory there (memory snapshots' dtrain-test.XXXXXX).
segments() { ls /dev/shm 2>/dev/null | grep -E '^dtrain-(arena-)?[0-9]+-' | sort || true; }
segments >"$WORK/shm.before"

# auto: every pair on this host uses shared memory
DT_DEBUG=info "$BIN/dtrun" -n 3 "$BIN/coll_check" --quick --big 4096 >"$WORK/auto" 2>&1 || { cat "$WORK/auto"; fail "auto run failed"; }
[ "$(grep -c 'INFO shared memory to 2 ranks on this host' "$WORK/auto")" = 3 ] || { cat "$WORK/auto"; fail "not every rank used shared memory"; }

# mixed: rank 1 forces TCP, the pair (0, 2) still shares memory
DT_DEBUG=info "$BIN/dtrun" -n 3 sh -c '[ "$DT_RANK" = 1 ] && export DT_TRANSPORT=tcp; exec "$0" "$@"' \
    "$BIN/coll_check" --quick --big 4096 >"$WORK/mixed" 2>&1 || { cat "$WORK/mixed"; fail "mixed run failed"; }
expect_grep "$WORK/mixed" "^\[0\] .*INFO shared memory to 1 ranks"
expect_grep "$WORK/mixed" "^\[2\] .*INFO shared memory to 1 ranks"
expect_no_grep "$WORK/mixed" "^\[1\] .*INFO shared memory"
expect_grep "$WORK/mixed" "coll_check: world 3: [0-9]+ checks, 0 mismatches"

# shm required, but rank 1 refuses: a clear error, no hang
DT_TRANSPORT=shm DT_TIMEOUT=20 "$BIN/dtrun" -n 2 sh -c '[ "$DT_RANK" = 1 ] && export DT_TRANSPORT=tcp; exec "$0" "$@"' \
    "$BIN/coll_check" --quick --big 64 >"$WORK/forced" 2>&1 && fail "DT_TRANSPORT=shm with a TCP-only peer succeeded"
expect_grep "$WORK/forced" "DT_TRANSPORT=shm, but rank 1 .* uses DT_TRANSPORT=tcp"

# bad settings are named
DT_TRANSPORT=carrier-pigeon "$BIN/dtrun" -n 2 "$BIN/coll_check" --quick --big 64 >"$WORK/bad" 2>&1 && fail "bad DT_TRANSPORT accepted"
expect_grep "$WORK/bad" "DT_TRANSPORT='carrier-pigeon': expected auto, shm or tcp"
DT_SHM_RING=5000 "$BIN/dtrun" -n 2 "$BIN/coll_check" --quick --big 64 >"$WORK/bad" 2>&1 && fail "DT_SHM_RING=5000 accepted"
expect_grep "$WORK/bad" "DT_SHM_RING=5000: expected a power of two"

# kill -9 of a rank whose peers reach it through shared memory
"$BIN/dtrun" -n 3 "$BIN/fault_peer" "$WORK" --victim 1 --delay-ms 500 --count 1048576 --iters 100000000 >"$WORK/out" 2>"$WORK/err" && fail "dtrun exited 0 after a kill"
killed=$(cat "$WORK/killed") || fail "the victim never recorded its kill"
for r in 0 2; do
    expect_grep "$WORK/result.$r" "^status=DT_ERR_PEER$"
    expect_grep "$WORK/result.$r" "rank 1 \(127\.0\.0\.1:[0-9]+\)"
    at=$(sed -n 's/^failed_at=//p' "$WORK/result.$r")
    less_than "$(python3 -c "print($at - $killed)")" 10 || fail "rank $r noticed the death too late"
done

segments >"$WORK/shm.after"
left=""
for seg in $(comm -13 "$WORK/shm.before" "$WORK/shm.after"); do
    pid=$(echo "$seg" | sed -E 's/^dtrain-(arena-)?([0-9]+)-.*/\2/')
    [ -d "/proc/$pid" ] || left="$left $seg"
done
[ -z "$left" ] || { ls -l /dev/shm; fail "shared segments left behind by processes that are gone:$left"; }
echo ok
