#!/usr/bin/env bash
# The direct (one-shot) allreduce: its threshold measured at start-up (every
# rank reaches the same verdict), not with 2 ranks or DT_ALGO forced, set by
# DT_DIRECT_MSG (results still checked bit for bit by coll_check), the same
# bits as recursive doubling, and bad settings named.  Across hosts the
# recursive doubling / halving-doubling threshold is measured the same way,
# and halving-doubling gives recursive doubling's bits too.
. "$(dirname "$0")/lib.sh"

# Across "hosts" (TCP between every pair): every rank times both algorithms
# and all of them settle on the same threshold.
DT_TRANSPORT=tcp DT_DEBUG=info "$BIN/dtrun" -n 3 "$BIN/coll_check" --quick --big 4096 >"$WORK/tuned" 2>&1 \
    || { cat "$WORK/tuned"; fail "run with the start-up timing failed"; }
[ "$(grep -cE 'INFO allreduce of 8 bytes across 3 ranks: direct [0-9]+ us, recursive doubling [0-9]+ us' "$WORK/tuned")" = 3 ] \
    || { cat "$WORK/tuned"; fail "not every rank timed the two algorithms"; }
verdicts=$(grep -oE 'INFO allreduce: direct algorithm up to [0-9]+ bytes' "$WORK/tuned" | sort | uniq -c)
[ "$(echo "$verdicts" | wc -l)" = 1 ] && [ "$(echo "$verdicts" | awk '{print $1}')" = 3 ] \
    || { cat "$WORK/tuned"; fail "the ranks disagree on the threshold: $verdicts"; }
[ "$(grep -cE 'INFO allreduce of 16384 bytes across 3 ranks: halving-doubling [0-9]+ us, recursive doubling [0-9]+ us' "$WORK/tuned")" = 3 ] \
    || { cat "$WORK/tuned"; fail "not every rank timed recursive doubling against halving-doubling"; }
verdicts=$(grep -oE 'INFO allreduce: recursive doubling up to (4096|8192|16384) bytes' "$WORK/tuned" | sort | uniq -c)
[ "$(echo "$verdicts" | wc -l)" = 1 ] && [ "$(echo "$verdicts" | awk '{print $1}')" = 3 ] \
    || { cat "$WORK/tuned"; fail "the ranks disagree on the recursive doubling threshold: $verdicts"; }
# Alltoall's Bruck against all at once: timed by every rank, one verdict.
[ "$(grep -cE "INFO alltoall of 64-byte pieces across 3 ranks: Bruck [0-9]+ us, all at once [0-9]+ us" "$WORK/tuned")" = 3 ] \
    || { cat "$WORK/tuned"; fail "not every rank timed Bruck's alltoall against all at once"; }
verdicts=$(grep -oE "INFO alltoall: Bruck's exchange up to [0-9]+-byte pieces" "$WORK/tuned" | sort | uniq -c)
[ "$(echo "$verdicts" | wc -l)" = 1 ] && [ "$(echo "$verdicts" | awk '{print $1}')" = 3 ] \
    || { cat "$WORK/tuned"; fail "the ranks disagree on Bruck's alltoall limit: $verdicts"; }
# The rest runs 3 jobs at a time (lib.sh's par): nothing below checks a
# timing verdict beyond the ranks' agreement.
# DT_SMALL_MSG set: that threshold stands, nothing timed for it.
par "$WORK/small" env DT_TRANSPORT=tcp DT_SMALL_MSG=8192 DT_DEBUG=info "$BIN/dtrun" -n 3 "$BIN/coll_check" --quick --big 4096
# Shared memory without the arena: timed as well, same agreement; with the
# arena (the default) nothing is timed, as no allreduce goes as messages.
par "$WORK/arena" env DT_DEBUG=info "$BIN/dtrun" -n 3 "$BIN/coll_check" --quick --big 64
par "$WORK/local" env DT_SHM_COLL=off DT_DEBUG=info "$BIN/dtrun" -n 4 "$BIN/coll_check" --quick --big 4096
# Two ranks (direct is recursive doubling there) and DT_ALGO forced: nothing timed.
par "$WORK/two" env DT_DEBUG=info "$BIN/dtrun" -n 2 "$BIN/coll_check" --quick --big 64
par "$WORK/rd" env DT_ALGO=rd DT_DEBUG=info "$BIN/dtrun" -n 3 "$BIN/coll_check" --quick --big 64
# DT_DIRECT_MSG set: no timing; direct up to 4 KiB, the other algorithms
# above, on a world that is not a power of two.
par "$WORK/forced" env DT_TRANSPORT=tcp DT_DIRECT_MSG=4096 DT_DEBUG=info "$BIN/dtrun" -n 5 "$BIN/coll_check" --quick --big 65536
# Direct and halving-doubling combine in recursive doubling's order: the same
# bits whichever the start-up timing picks (folded pairs at 3, 5, 6 and 7
# ranks, none at 4 and 8).
for n in 3 4 5 6 7 8; do
    for algo in rd direct rhd; do
        par "$WORK/h.$n.$algo" env DT_TRANSPORT=tcp DT_ALGO=$algo "$BIN/dtrun" -n $n "$BIN/coll_check" --quick --big 64 --hashes
    done
done
# Bad settings are named.
par "$WORK/bad1" env DT_DIRECT_MSG=lots "$BIN/dtrun" -n 2 "$BIN/coll_check" --quick --big 64
par "$WORK/bad2" env DT_ALGO=oneshot "$BIN/dtrun" -n 2 "$BIN/coll_check" --quick --big 64
par_wait

par_ok "$WORK/small" || { cat "$WORK/small"; fail "run with DT_SMALL_MSG=8192 failed"; }
expect_no_grep "$WORK/small" "halving-doubling"
expect_grep "$WORK/small" "direct algorithm up to"
par_ok "$WORK/arena" || { cat "$WORK/arena"; fail "local run with the arena failed"; }
expect_no_grep "$WORK/arena" "direct algorithm up to"
par_ok "$WORK/local" || { cat "$WORK/local"; fail "local run failed"; }
[ "$(grep -oE 'INFO allreduce: direct algorithm up to [0-9]+ bytes' "$WORK/local" | sort -u | wc -l)" = 1 ] \
    || { cat "$WORK/local"; fail "the ranks disagree on the threshold"; }
expect_no_grep "$WORK/local" "halving-doubling" # one host: the bytes cost no link
par_ok "$WORK/two" || { cat "$WORK/two"; fail "2-rank run failed"; }
expect_no_grep "$WORK/two" "direct algorithm up to"
par_ok "$WORK/rd" || { cat "$WORK/rd"; fail "DT_ALGO=rd run failed"; }
expect_no_grep "$WORK/rd" "direct algorithm up to"
par_ok "$WORK/forced" || { cat "$WORK/forced"; fail "DT_DIRECT_MSG=4096 run failed"; }
expect_no_grep "$WORK/forced" "direct algorithm up to"
expect_grep "$WORK/forced" "coll_check: world 5: [0-9]+ checks, 0 mismatches"
for n in 3 4 5 6 7 8; do
    for algo in rd direct rhd; do
        par_ok "$WORK/h.$n.$algo" || { cat "$WORK/h.$n.$algo"; fail "DT_ALGO=$algo on $n ranks failed"; }
        grep '^\[0\] hash' "$WORK/h.$n.$algo" >"$WORK/hashes.$algo"
    done
    [ "$(wc -l <"$WORK/hashes.rd")" -ge 3 ] || { cat "$WORK/h.$n.rd"; fail "no hashes printed"; }
    cmp -s "$WORK/hashes.rd" "$WORK/hashes.direct" \
        || { paste "$WORK/hashes.rd" "$WORK/hashes.direct"; fail "$n ranks: direct and recursive doubling give different bits"; }
    cmp -s "$WORK/hashes.rd" "$WORK/hashes.rhd" \
        || { paste "$WORK/hashes.rd" "$WORK/hashes.rhd"; fail "$n ranks: halving-doubling and recursive doubling give different bits"; }
done
par_ok "$WORK/bad1" && fail "DT_DIRECT_MSG=lots accepted"
expect_grep "$WORK/bad1" "DT_DIRECT_MSG"
par_ok "$WORK/bad2" && fail "DT_ALGO=oneshot accepted"
expect_grep "$WORK/bad2" "DT_ALGO='oneshot': expected auto, ring, rd, rhd, direct or shm"
echo "ok"
