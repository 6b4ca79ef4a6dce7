#!/usr/bin/env bash
# Pipeline parallelism against one process (tests/pp_check.c): GPipe, 1F1B
# and interleaved (v = 2) on pp = 2 and 4 stages of a GPT (dropout 0.1,
# tied embedding) and of an MLP, and dp=2 x pp=2 x tp=2 on 8 ranks; each
# against the whole model trained on the global batch: 20 steps of losses,
# gradients, norms and parameters within 1e-5; the micro-batches a stage
# holds at once (GPipe m, 1F1B p - stage); the refusals.
. "$(dirname "$0")/lib.sh"
for args in "2 --pp 2" "4 --pp 4" "2 --pp 2 --model mlp" "4 --pp 4 --model mlp" "8 --pp 2 --tp 2"; do
    set -- $args
    n=$1
    shift
    par "$WORK/out.$n.$*" "$BIN/dtrun" -n "$n" "$BIN/pp_check" "$@"
done
par_wait
for f in "$WORK"/out.*; do
    case $f in *.rc) continue ;; esac
    par_ok "$f" || { cat "$f"; fail "pp_check ${f#$WORK/out.}"; }
    expect_grep "$f" "pp_check: .*: ok"
    grep "rank 0:" "$f"
done
echo ok
