#!/usr/bin/env bash
# Tensor parallelism: linear layers (column then row, Megatron's MLP split), attention split by heads and the vocabulary-parallel cross-entropy
# against the unsplit layers from the same seed, for t = 2, 3, 4 and 6:
# initial shards bitwise, step-0 loss and gradients to 1e-5, 20 SGD steps
# of losses to 1e-4 (tests/tp_check.c).
. "$(dirname "$0")/lib.sh"
for t in 2 3 4 6; do
    "$BIN/dtrun" -n $t "$BIN/tp_check" >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "t=$t"; }
    expect_grep "$WORK/out" "tp_check: t=$t: ok"
    grep "rank 0:" "$WORK/out"
done
echo ok
