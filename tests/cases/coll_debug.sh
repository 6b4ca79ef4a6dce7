#!/usr/bin/env bash
# DT_DEBUG=coll: (1) rank 1 calls allgather where the others call allreduce:
# every rank fails at once with a mismatch naming both calls and their tags;
# (2) rank 2 stops calling collectives: the others time out and print every
# rank's recent collectives, rank 2's ending one before theirs; (3) a correct
# program (coll_check: every collective) passes and prints nothing extra.
. "$(dirname "$0")/lib.sh"
export DT_DEBUG=coll DT_TIMEOUT=30
# (2) waits: its DT_TIMEOUT, then dtrun's 3 s SIGTERM grace (the stalled rank
# ignores SIGTERM to report first): it runs alongside the others.
DT_TIMEOUT=3 "$BIN/dtrun" -n 3 "$BIN/coll_mismatch" stall >"$WORK/stall.out" 2>"$WORK/stall.err" &
stall=$!
t0=$(now)
"$BIN/dtrun" -n 3 "$BIN/coll_mismatch" mismatch >"$WORK/out" 2>"$WORK/err" && fail "a mismatched sequence succeeded"
less_than "$(elapsed "$t0")" 10 || fail "the mismatch took $(elapsed "$t0") s to report (it needs no timeout)"
for r in 0 1 2; do
    expect_grep "$WORK/out" "^\[$r\] rank $r: DT_ERR_INVALID: .*collective mismatch \(DT_DEBUG=coll\): rank 0 calls #4 allreduce\(256 x f32, sum\) 'step 3' but rank 1 calls #4 allgather\(256 x f32\) 'step 3'"
done
expect_grep "$WORK/err" "^\[1\]   rank 1 \(this rank\): .*#3 broadcast\(16 x f32, root 0\) 'step 2' \| #4 allgather\(256 x f32\) 'step 3'$"
wait $stall && fail "a stalled rank went unnoticed"
expect_grep "$WORK/stall.out" "^\[0\] rank 0: DT_ERR_TIMEOUT: allreduce: timed out after 3 s waiting for a message from rank 2"
expect_grep "$WORK/stall.err" "^\[0\]   rank 0 \(this rank\): .* \| #4 allreduce\(256 x f32, sum\) 'step 3'$"
expect_grep "$WORK/stall.err" "^\[0\]   rank 2 \(its newest 4, as published up to a heartbeat period ago\): .*#3 broadcast\(16 x f32, root 0\) 'step 2'$"
# Every collective, sub-communicators and nonblocking ones included, passes
# the check when the program is right, and an orderly end prints no dump.
"$BIN/dtrun" -n 3 "$BIN/coll_check" --quick --big 4096 >"$WORK/out" 2>"$WORK/err" ||
    { cat "$WORK/out" "$WORK/err"; fail "coll_check under DT_DEBUG=coll"; }
expect_grep "$WORK/out" "0 mismatches"
expect_no_grep "$WORK/err" "recent collectives"
# Without DT_DEBUG=coll the always-on signature check (docs/failures.md)
# still fails every rank at once, naming both calls (without the tags and
# the dump, which need the descriptor exchange of DT_DEBUG=coll).
t0=$(now)
DT_DEBUG= DT_TIMEOUT=30 "$BIN/dtrun" -n 3 "$BIN/coll_mismatch" mismatch >"$WORK/out" 2>"$WORK/err" &&
    fail "a mismatched sequence succeeded without DT_DEBUG=coll"
less_than "$(elapsed "$t0")" 10 || fail "the mismatch took $(elapsed "$t0") s to report without DT_DEBUG=coll"
for r in 0 1 2; do
    expect_grep "$WORK/out" "^\[$r\] rank $r: DT_ERR_INVALID: .*collective mismatch: .*(allreduce\(256 x f32, sum\).*allgather\(256 x f32\)|allgather\(256 x f32\).*allreduce\(256 x f32, sum\))"
done
expect_no_grep "$WORK/out" "DT_DEBUG=coll"
echo ok
