#!/usr/bin/env bash
# Always-on collective mismatch check (no DT_DEBUG): for every collective
# kind and every field a call is made of (count, dtype, op, root, kind), one
# of 3 ranks calls it differently from the others, over TCP and over shared
# memory (the arena's rounds), at a small count and for allreduce also at a
# large one (ring, several arena rounds).  Every rank must fail, at that call
# or, for a rank that exchanged nothing with a differing rank, at the barrier after it, with
# "collective mismatch" naming both calls; none may hang or return DT_OK from
# both (DT_OK from the call itself only where the rank exchanged nothing
# with a differing rank: its result is right).  Prints how many ranks failed at the call itself.
# Every case runs over TCP and every second one over shared memory (each
# kind at least once; "reduce kind" and "gather kind" too: rank 1 in the
# arena's allgather, the others in messages that never reach it); under DT_TEST_QUICK (the sanitizer builds) every
# fourth case, each transport starting at another, and one large allreduce
# per transport.
. "$(dirname "$0")/lib.sh"
export DT_TIMEOUT=20
cases=(
    "allreduce count" "allreduce dtype" "allreduce op" "allreduce kind"
    "allreduce_half count" "allreduce_half dtype" "allreduce_half op" "allreduce_half kind"
    "reduce count" "reduce dtype" "reduce op" "reduce root" "reduce kind"
    "reduce_scatter count" "reduce_scatter dtype" "reduce_scatter op" "reduce_scatter kind"
    "broadcast count" "broadcast dtype" "broadcast root" "broadcast kind"
    "gather count" "gather dtype" "gather root" "gather kind"
    "scatter count" "scatter dtype" "scatter root" "scatter kind"
    "allgather count" "allgather dtype" "allgather kind"
    "alltoall count" "alltoall dtype" "alltoall kind"
    "barrier kind"
)
# The cases run 4 at a time (each one mostly waits: about 0.6 s of CPU in
# 1.5 to 3 s), 2 under the sanitizers (1.5 s of CPU each), each with its own
# output files; dtrun -n binds its store to a free port and the segments are
# named by pid, so the jobs do not meet.  The reports print in order at the end.
ncases=0
run_case() { # transport ranks kind field count
    ncases=$((ncases + 1))
    while [ "$(jobs -rp | wc -l)" -ge $PARALLEL ]; do wait -n; done
    one_case "$WORK/case.$ncases" "$@" &
}
one_case() { # file-prefix transport ranks kind field count
    local f=$1; shift
    local t0 out="$f.out"
    t0=$(now)
    DT_TRANSPORT=$1 timeout 60 "$BIN/dtrun" -n "$2" "$BIN/coll_mismatch" field "$3" "$4" "$5" >"$out" 2>"$f.err"
    local rc=$? took
    took=$(elapsed "$t0")
    local oks at_call
    oks=$(grep -c ": OK at the" "$out")
    at_call=$(grep -c ": OK at the call" "$out")
    if [ "$oks" != "$2" ] || ! less_than "$took" 15; then
        { echo "FAILED: DT_TRANSPORT=$1 -n $2 $3 $4 $5 (rc $rc, $took s):"; cat "$out" "$f.err"; } >"$f.report"
        touch "$f.bad"
    else
        printf '%-4s n=%s %-15s %-6s count %-6s: %s of %s ranks failed at the call, the rest at the next (%.1f s)\n' \
            "$1" "$2" "$3" "$4" "$5" "$at_call" "$2" "$took" >"$f.report"
    fi
}
# Issue 43, item 7b: the last of 4 ranks leaves dt_comm_init_env while the
# others are still in it (DT_HIER=off on it alone: it skips the hierarchy's
# set-up), then calls allreduce or aborts.  The others' init error must
# start with what happened (the mismatch naming that allreduce, or the
# abort naming the rank), then say where this rank was; before, it read
# "setting up hierarchical collectives: allgather: collective mismatch ...".
init_case() { # transport action
    ncases=$((ncases + 1))
    while [ "$(jobs -rp | wc -l)" -ge $PARALLEL ]; do wait -n; done
    one_init_case "$WORK/case.$ncases" "$@" &
}
one_init_case() {
    local f=$1 oks
    DT_TRANSPORT=$2 timeout 60 "$BIN/dtrun" -n 4 sh -c '[ "$DT_RANK" = 3 ] && export DT_HIER=off; exec "$0" "$@"' \
        "$BIN/coll_mismatch" init "$3" >"$f.out" 2>"$f.err"
    oks=$(grep -c ": OK in dt_comm_init_env: \|: OK after dt_comm_init_env: " "$f.out")
    if [ "$oks" != 4 ]; then
        { echo "FAILED: DT_TRANSPORT=$2 init $3:"; cat "$f.out" "$f.err"; } >"$f.report"
        touch "$f.bad"
    else
        echo "$2 init $3: the ranks still starting up name what happened first ($(grep -c ': OK in dt_comm_init_env' "$f.out") of 3)" >"$f.report"
    fi
}
quick=${QUICK:-${DT_TEST_QUICK:-0}}
PARALLEL=4; [ "$quick" = 1 ] && PARALLEL=2
for tr in tcp shm; do
    i=0
    for c in "${cases[@]}"; do
        i=$((i + 1))
        off=0; [ "$tr" = shm ] && off=2
        if [ "$quick" = 1 ] && [ $(((i + off) % 4)) != 0 ]; then continue; fi
        # shared memory: every second case (each kind at least once), to keep the suite's time
        # (and the arena-against-messages cases: rank 1 in the arena's allgather, the others in
        # a reduce or gather that sends it nothing, which the arena rank must see in their records)
        if [ "$quick" != 1 ] && [ "$tr" = shm ] && [ $((i % 2)) = 1 ] && [ "$c" != "reduce kind" ] &&
            [ "$c" != "gather kind" ]; then continue; fi
        # shellcheck disable=SC2086
        run_case "$tr" 3 $c 7
    done
    run_case "$tr" 3 allreduce count 70000
    [ "$quick" = 1 ] && continue
    run_case "$tr" 3 allreduce kind 70000
    run_case "$tr" 4 allreduce dtype 7
    run_case "$tr" 4 broadcast root 7
done
for tr in tcp shm; do
    for action in mismatch abort; do
        init_case $tr $action
        [ "$quick" = 1 ] || init_case $tr $action
    done
done
wait
bad=0
for i in $(seq "$ncases"); do
    cat "$WORK/case.$i.report" 2>/dev/null || { echo "case $i wrote no report"; bad=$((bad + 1)); }
    [ -e "$WORK/case.$i.bad" ] && bad=$((bad + 1))
done
[ "$bad" = 0 ] || fail "$bad mismatch cases were not reported on every rank"
echo ok
