#!/usr/bin/env bash
# Shared-memory collectives (the arena): every check of coll_check right with
# rounds of one page (many rounds per call, reduce_scatter and alltoall cut
# into pieces), the same bits whatever the round size and on every rank (the
# f16/bf16-wire allreduce the same bits as over messages), no
# name left in /dev/shm, a rank that cannot join turning the arena off for
# everyone (messages instead, still right), small broadcasts across the round
# counter's wrap, and bad settings named.
. "$(dirname "$0")/lib.sh"

# same_hashes PATTERN RUN_A RUN_B WHY: the lines rank 0 printed that match
# PATTERN are present (at least 2) and equal in both runs' output.
same_hashes() {
    grep "$1" "$WORK/$2" >"$WORK/h.$2"
    grep "$1" "$WORK/$3" >"$WORK/h.$3"
    [ "$(wc -l <"$WORK/h.$3")" -ge 2 ] || { cat "$WORK/$3"; fail "no hashes matching $1 printed"; }
    cmp -s "$WORK/h.$2" "$WORK/h.$3" || { paste "$WORK/h.$2" "$WORK/h.$3"; fail "$4"; }
}

# The jobs run 3 at a time (lib.sh's par), each with its own output; the
# checks follow once all ended.
ls /dev/shm >"$WORK/shm.before" 2>/dev/null
par "$WORK/small" env DT_DEBUG=info DT_SHM_COLL_SLOT=4096 "$BIN/dtrun" -n 4 "$BIN/coll_check" --quick --big 65536 --hashes
par "$WORK/default" "$BIN/dtrun" -n 4 "$BIN/coll_check" --quick --big 65536 --hashes
par "$WORK/off" env DT_SHM_COLL=off "$BIN/dtrun" -n 4 "$BIN/coll_check" --quick --big 65536 --hashes
for n in 2 3; do
    par "$WORK/w$n" env DT_SHM_COLL_SLOT=8192 "$BIN/dtrun" -n $n "$BIN/coll_check" --quick --big 20000
done
par "$WORK/mismatch" "$BIN/dtrun" -n 3 sh -c '[ "$DT_RANK" = 2 ] && export DT_SHM_COLL_SLOT=8192; exec "$0" "$@"' \
    "$BIN/coll_check" --quick --big 4096
# A job that starts with a loop of small broadcasts crosses the round
# counter's wrap (about 1024 rounds in) in them, on either parity of rounds,
# with the rooted collectives' agreement and without it (DT_DEBUG=coll);
# before, round 0 read an unwritten signature line (issue 43).
for n in 2 3; do
    for shift in 0 1; do
        par "$WORK/wrap.$n.$shift" "$BIN/dtrun" -n $n "$BIN/arena_wrap" $shift
        par "$WORK/wrapc.$n.$shift" env DT_DEBUG=coll "$BIN/dtrun" -n $n "$BIN/arena_wrap" $shift
    done
done
par "$WORK/bad1" env DT_SHM_COLL=sometimes "$BIN/dtrun" -n 2 "$BIN/coll_check" --quick --big 64
par "$WORK/bad2" env DT_SHM_COLL_SLOT=5000 "$BIN/dtrun" -n 2 "$BIN/coll_check" --quick --big 64
par_wait

par_ok "$WORK/small" || { cat "$WORK/small"; fail "coll_check with 4 KiB arena rounds failed"; }
[ "$(grep -c 'shared-memory collectives: an arena of 2 x 4 slots of 4096 bytes' "$WORK/small")" = 4 ] \
    || { cat "$WORK/small"; fail "not every rank set the arena up"; }
expect_grep "$WORK/small" "coll_check: world 4: [0-9]+ checks, 0 mismatches"

# Default round size: the same bits (reductions go in rank order, whatever the rounds).
par_ok "$WORK/default" || { cat "$WORK/default"; fail "coll_check with the default arena failed"; }
same_hashes '^\[0\] hash' small default "the arena's bits depend on its round size"

# The f16/bf16-wire allreduce gives the bits of its message version.
par_ok "$WORK/off" || { cat "$WORK/off"; fail "coll_check with the arena off failed"; }
same_hashes '^\[0\] hash half' off default "the half-wire allreduce differs between the arena and the messages"

# 3 ranks (blocks of unequal length) and 2.
for n in 2 3; do
    par_ok "$WORK/w$n" || { cat "$WORK/w$n"; fail "coll_check on $n ranks through the arena failed"; }
done

# Nothing of the arenas (world and split communicators) left behind.
ls /dev/shm >"$WORK/shm.after" 2>/dev/null
# (A segment whose creator still runs belongs to another job on this
# machine, between its creation and its unlink: not left behind.)
new=""
for seg in $(comm -13 <(sort "$WORK/shm.before") <(sort "$WORK/shm.after") | grep dtrain-arena || true); do
    pid=$(echo "$seg" | cut -d- -f3)
    kill -0 "$pid" 2>/dev/null || new="$new $seg"
done
[ -z "$new" ] || fail "arena segments left in /dev/shm:$new"

# One rank asks for another geometry: it cannot map rank 0's arena, every rank
# hears so and the collectives go as messages, still right.
par_ok "$WORK/mismatch" || { cat "$WORK/mismatch"; fail "coll_check with one rank unable to map the arena failed"; }
expect_grep "$WORK/mismatch" "^\[2\].*shared-memory collectives off.*not an arena for 3 ranks with 8192-byte slots"
expect_grep "$WORK/mismatch" "coll_check: world 3: [0-9]+ checks, 0 mismatches"

for f in "$WORK"/wrap.?.? "$WORK"/wrapc.?.?; do
    par_ok "$f" || { cat "$f"; fail "$(basename "$f"): broadcasts across the arena's round wrap failed"; }
done

# Bad settings are named.
par_ok "$WORK/bad1" && fail "DT_SHM_COLL=sometimes accepted"
expect_grep "$WORK/bad1" "DT_SHM_COLL='sometimes': expected auto or off"
par_ok "$WORK/bad2" && fail "DT_SHM_COLL_SLOT=5000 accepted"
expect_grep "$WORK/bad2" "DT_SHM_COLL_SLOT=5000: expected a multiple of 4096"
echo ok
