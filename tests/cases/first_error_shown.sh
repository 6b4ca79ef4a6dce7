#!/usr/bin/env bash
# The first error a user sees is the real one (issue 43, item 6):
#   - layouts that do not fit the job, each run 5 times: pp = 8 on 8 ranks
#     (gpt-mini has 6 blocks), `servers=2` on 2 ranks (no worker left; dtrun --servers refuses that itself),
#     tp = 2 on 3 ranks (not divisible), an mlp whose hidden size tp = 3
#     does not divide: every time the job's first line of output is the
#     reason, no rank reports another's abort, and dtrun exits 2 (a
#     configuration error) naming a rank that exited with status 2.
#     Before: the reason came after "shared-memory collectives set-up ...
#     aborted the job" lines from the other ranks in most runs, and the job
#     often exited 1 (the rank dtrun named had failed joining);
#   - dtrun itself: a rank whose error passes another's failure on (the
#     library ends it "(reported by rank N ...)") is printed after the
#     failing rank's own reason even when it comes first, and dtrun names
#     the failing rank and ends with its status (5 runs).
. "$(dirname "$0")/lib.sh"
# first_line_is OUT RC PATTERN WHAT: the job exited RC, its first line matches PATTERN, nobody passed an abort on
first_line_is() {
    local out=$1 rc=$2 pattern=$3 what=$4
    [ "$(cat "$out.rc")" = "$rc" ] || { cat "$out"; fail "$what: exit $(cat "$out.rc"), expected $rc"; }
    head -n 1 "$out" | grep -qE -- "$pattern" || { cat "$out"; fail "$what: the first line is not the reason /$pattern/"; }
    expect_no_grep "$out" "aborted the job|reported by rank"
    expect_grep "$out" "^dtrun: job failed: rank [0-9]+ \(pid [0-9]+\) exited with status $rc$"
}
run_job() { # out cmd...
    local out=$1
    shift
    "$@" >"$out" 2>&1
    echo $? >"$out.rc"
}
for i in 1 2 3 4 5; do
    run_job "$WORK/pp.$i" "$BIN/dtrun" -n 8 "$BIN/dtrain" train --config configs/gpt-mini.json --set pp=8
    first_line_is "$WORK/pp.$i" 2 "^\[0\] dtrain: pp = 8: pipeline: 8 stages but the model has 6 blocks" "pp = 8 on 8 ranks (run $i)"
    run_job "$WORK/ps.$i" "$BIN/dtrun" -n 2 "$BIN/dtrain" train --config configs/gpt-mini.json --set servers=2
    first_line_is "$WORK/ps.$i" 2 "^\[0\] dtrain: parameter server: 2 servers among 2 ranks leaves 0 workers" \
        "servers=2 on 2 ranks (run $i)"
    run_job "$WORK/tp.$i" "$BIN/dtrun" -n 3 "$BIN/dtrain" train --config configs/gpt-mini.json --set tp=2
    first_line_is "$WORK/tp.$i" 2 "^\[0\] dtrain: pp = 1, tp = 2: mesh dp=\? x tp=2: the world's 3 ranks are not divisible by 2" \
        "tp = 2 on 3 ranks (run $i)"
    run_job "$WORK/mlp.$i" "$BIN/dtrun" -n 3 "$BIN/dtrain" train --config configs/mlp.json --set tp=3
    first_line_is "$WORK/mlp.$i" 2 "^\[[0-2]\] dtrain: configuration: key 'tp' does not fit the model: mlp: tp = 3 must divide the hidden size 256 \(mlp_sizes\[1\]" \
        "an mlp's hidden size tp = 3 does not divide (run $i)"
done
echo "pp = 8 on 8 ranks, servers=2 on 2 ranks, tp = 2 on 3 ranks, an mlp's tp = 3: the reason first, exit 2 (5 runs each)"
expect_grep "$WORK/pp.1" "\(the configuration does not fit the job's 8 ranks\)"

# -- dtrun: rank 1 fails after 0.3 s; ranks 0 and 2 report its abort at once, before it (exit 1)
for i in 1 2 3 4 5; do
    run_job "$WORK/order.$i" "$BIN/dtrun" -n 3 sh -c '
        if [ "$DT_RANK" = 1 ]; then sleep 0.3; echo "dtrain: the real reason, from rank 1" >&2; exit 2; fi
        echo "dtrain: rank $DT_RANK: rank 1 (127.0.0.1:1) aborted the job: failed (reported by rank 1 (127.0.0.1:1))" >&2
        exit 1'
    out="$WORK/order.$i"
    [ "$(cat "$out.rc")" = 2 ] || { cat "$out"; fail "run $i: dtrun exited $(cat "$out.rc"), not the failing rank's 2"; }
    head -n 1 "$out" | grep -qx "\[1\] dtrain: the real reason, from rank 1" ||
        { cat "$out"; fail "run $i: the first line is not rank 1's reason"; }
    expect_grep "$out" "^dtrun: rank 1 \(pid [0-9]+\) exited with status 2; stopping the other ranks$"
    [ "$(grep -c "reported by rank 1" "$out")" = 2 ] || { cat "$out"; fail "run $i: the passed-on lines were lost"; }
    # they come after the reason and after dtrun's line naming rank 1
    awk '/reported by rank 1/ && !named { bad = 1 } /^dtrun: rank 1 / { named = 1 } END { exit bad }' "$out" ||
        { cat "$out"; fail "run $i: a passed-on line came before dtrun named the failing rank"; }
done
echo "dtrun: the failing rank's reason first, the passed-on failures after it, its exit status (5 runs)"
