#!/usr/bin/env bash
# Heartbeat silence is measured from the last evidence of life (issue 29, D):
# 1. the store (dtrun) and rank 1 paused for 1.5 s after 5 s of quiet running,
#    DT_HEARTBEAT_TIMEOUT=4: nobody was silent for 4 s, so the job succeeds
#    (it used to fail at once, counting the quiet time as store silence);
# 2. rank 1 frozen for good: declared after at least the timeout, and the
#    silence reported is at least the timeout (it used to say 3.6 s of 4);
# 3. the store frozen for good: the silence reported is at least the timeout
#    and no more than the time since the freeze (plus a period or two).
. "$(dirname "$0")/lib.sh"
export DT_TIMEOUT=60 DT_HEARTBEAT_TIMEOUT=4
wait_ready() {
    for _ in $(seq 200); do
        [ -s "$W/ready.0" ] && [ -s "$W/ready.1" ] && [ -s "$W/ready.2" ] && return 0
        sleep 0.1
    done
    cat "$W/out" "$W/err"; fail "the ranks did not start"
}
start_job() {
    rm -f "$W"/result.* "$W"/ready.*
    "$BIN/dtrun" -n 3 "$BIN/fault_peer" "$W" --count 1024 "$@" >"$W/out" 2>"$W/err" &
    JOB=$!
    wait_ready
}
wait_results() { # wait_results R...: until these ranks wrote a result (30 s at most)
    for _ in $(seq 300); do
        local all=1
        for r in "$@"; do [ -f "$W/result.$r" ] || all=0; done
        [ $all = 1 ] && return 0
        sleep 0.1
    done
    kill -CONT "$JOB" 2>/dev/null; cat "$W/out" "$W/err"; fail "ranks $* wrote no result"
}
seconds_in() { sed -n "s/.*$2 \([0-9.]*\) s.*/\1/p" "$1" | head -n 1; }

# 1. a short pause of the store and a rank after a long quiet run
short_pause() {
    W=$1; mkdir -p "$W"
    start_job --iters 45 --pause-ms 200
    sleep 5
    r1=$(cat "$W/ready.1")
    kill -STOP "$JOB" "$r1"; sleep 1.5; kill -CONT "$JOB" "$r1"
    wait "$JOB" || { cat "$W/out" "$W/err"; fail "a 1.5 s pause of the store and rank 1 (heartbeat timeout 4 s) failed the job"; }
    for r in 0 1 2; do expect_grep "$W/result.$r" "^status=DT_OK$"; done
    echo "1. store and rank 1 paused 1.5 s after 5 s: the job succeeded"
}

# 2. rank 1 frozen for good
rank_frozen() {
    W=$1; mkdir -p "$W"
    start_job --iters 100000 --pause-ms 20
    sleep 1
    r1=$(cat "$W/ready.1")
    t0=$(now)
    kill -STOP "$r1"
    wait_results 0 2
    wait "$JOB" && fail "dtrun exited 0 with a frozen rank"
    named=0
    for r in 0 2; do
        f="$W/result.$r"
        expect_grep "$f" "^status=DT_ERR_PEER$"
        grep -q "sent no heartbeat" "$f" || continue
        named=$((named + 1))
        s=$(seconds_in "$f" "for")
        less_than "$s" 4 && { cat "$f"; fail "rank $r reported $s s of silence with DT_HEARTBEAT_TIMEOUT=4"; }
        d=$(awk -v a="$(sed -n 's/^failed_at=//p' "$f")" -v t0="$t0" 'BEGIN { printf "%.2f\n", a - t0 }')
        less_than "$d" 3.6 && fail "rank $r declared rank 1 dead $d s after the freeze (timeout 4 s)"
        less_than "$d" 6 || fail "rank $r declared rank 1 dead only $d s after the freeze (timeout 4 s)"
        echo "2. rank $r: rank 1 declared dead $d s after the freeze, reported silence $s s"
    done
    [ $named -ge 1 ] || { cat "$W"/result.*; fail "no rank named the frozen rank's missing heartbeat"; }
}

# 3. the store frozen for good after 4.5 s of quiet running (rank 1 too, so that the others wait)
store_frozen() {
    W=$1; mkdir -p "$W"
    start_job --iters 100000 --pause-ms 100
    sleep 4.5
    r1=$(cat "$W/ready.1")
    t0=$(now)
    kill -STOP "$JOB" "$r1"
    wait_results 0 2
    since=$(elapsed "$t0")
    kill -CONT "$JOB" "$r1"
    wait "$JOB" && fail "dtrun exited 0 with a frozen store"
    for r in 0 2; do
        f="$W/result.$r"
        expect_grep "$f" "could not reach the rendezvous store"
        s=$(seconds_in "$f" "for")
        less_than "$s" 4 && { cat "$f"; fail "rank $r reported $s s without the store, DT_HEARTBEAT_TIMEOUT=4"; }
        less_than "$s" "$(awk -v s="$since" 'BEGIN { print s + 1 }')" || { cat "$f"; fail "rank $r reported $s s without the store, which was frozen $since s before"; }
        echo "3. rank $r: store unreachable for $s s (frozen $since s before all results)"
    done
}

# The three jobs run side by side, each in a directory of its own (their
# ranks mostly sleep; every bound is against the job's own freeze).
PAR_JOBS=3
for c in short_pause rank_frozen store_frozen; do par "$WORK/$c.log" $c "$WORK/$c"; done
par_wait
for c in short_pause rank_frozen store_frozen; do
    cat "$WORK/$c.log"
    par_ok "$WORK/$c.log" || fail "$c failed (above)"
done
echo ok
