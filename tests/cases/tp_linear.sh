#!/usr/bin/env bash
# Tensor parallelism (tests/tp_check.c) for t = 2, 3, 4 and 6, each against
# the unsplit layers built from the same seed: linear layers (column then
# row, Megatron's MLP split: initial shards bitwise, step-0 loss and
# gradients to 1e-5, 20 SGD steps of losses to 1e-4), attention split by
# heads, the vocabulary-parallel cross-entropy with ignored targets, and a
# whole GPT (12 heads) without and with dropout 0.1 and with sequence
# parallelism (step-0 gradients to 1e-5, 50 SGD steps of losses to 1e-4);
# sequence parallel on against off: the 50 losses to 1e-5; clipping over
# the group (dt_clip_grad_norm_group) against clipping the whole vector.
. "$(dirname "$0")/lib.sh"
for t in 2 3 4 6; do
    "$BIN/dtrun" -n $t "$BIN/tp_check" >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "t=$t"; }
    expect_grep "$WORK/out" "tp_check: t=$t: ok"
    grep "rank 0:" "$WORK/out"
done
echo ok
