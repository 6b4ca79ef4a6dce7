#!/usr/bin/env bash
# ZeRO stages 1, 2 and 3 against data parallelism for N = 2, 3 and 4 ranks
# (tests/zero_check.c): a GPT (dropout 0.1, tied embedding) and an MLP, AdamW
# with weight-decay groups, 2 micro-batches of accumulation, clipping; 50
# steps of losses and gradient norms within 1e-5, the shards within 1e-4 of
# the largest parameter; the shard layout covers every element once.
. "$(dirname "$0")/lib.sh"
for n in 2 3 4; do
    par "$WORK/out.$n" "$BIN/dtrun" -n "$n" "$BIN/zero_check"
done
par_wait
for n in 2 3 4; do
    par_ok "$WORK/out.$n" || { cat "$WORK/out.$n"; fail "zero_check on $n ranks"; }
    expect_grep "$WORK/out.$n" "zero_check: N=$n: ok"
    grep "rank 0:" "$WORK/out.$n"
done
echo ok
