#!/usr/bin/env bash
# dtrain on the sparse text classifier (configs/textclf.json: textclf on the
# fortunes categories, Adagrad): a short run beats chance on the held-out
# fortunes by far; a run resumed from a checkpoint (the Adagrad sums in it)
# follows the uninterrupted one; two data-parallel ranks (dense allreduce of
# the table, every row then touched) and a parameter server with two BSP
# workers follow one rank with the global batch;
# configuration errors name the key.
. "$(dirname "$0")/lib.sh"
T="$BIN/dtrain"
check_err() { # pattern args...
    local want=$1; shift
    "$T" "$@" >"$WORK/out" 2>"$WORK/err" && fail "dtrain $* succeeded"
    expect_grep "$WORK/err" "$want"
}
check_err "key 'data' must be fortunes for the textclf" train --config configs/textclf.json --set data=text
check_err "key 'data' fortunes is for the textclf" train --config configs/mlp.json --set data=fortunes
check_err "textclf trains single-process or data-parallel" train --config configs/textclf.json --set zero_stage=1
check_err "key 'classes' = 10, but .* holds 43 categories \(art .. zippy\)" train --config configs/textclf.json --set classes=10

# 400 steps of 64 (two passes over the 13754 training fortunes): the held-out
# accuracy against 43 categories, the largest of them (people) 8% of the fortunes
"$T" train --config configs/textclf.json --set steps=400 --set eval_interval=0 --set log_interval=100 \
    --set threads=2 >"$WORK/train.out" 2>&1 || { cat "$WORK/train.out"; fail "textclf training"; }
cat "$WORK/train.out"
expect_grep "$WORK/train.out" "training textclf \(33555851 parameters\) on fortunes"
acc=$(sed -n 's/^[0-9T:.Z-]* eval at step 400 | loss [0-9.]* | accuracy \([0-9.]*\)% | .* of the 1463 held-out fortunes.*/\1/p' "$WORK/train.out")
python3 -c "import sys; sys.exit(0 if float('$acc') >= 30 else 1)" || fail "held-out accuracy '$acc'% after 400 steps (want >= 30%)"
echo "held-out accuracy after 400 steps: $acc% (43 categories; the largest is 8%)"

# resume: 120 steps straight against 60 + 60 from the checkpoint at 60
small=(--set buckets=65536 --set log_interval=10 --set eval_interval=60 --set eval_batches=5 --set threads=1)
"$T" train --config configs/textclf.json "${small[@]}" --set steps=120 --set metrics_file="$WORK/a.jsonl" \
    >"$WORK/a.out" 2>&1 || { cat "$WORK/a.out"; fail "the uninterrupted run"; }
"$T" train --config configs/textclf.json "${small[@]}" --set steps=60 --set checkpoint_dir="$WORK/ck" \
    >"$WORK/b1.out" 2>&1 || { cat "$WORK/b1.out"; fail "the first half"; }
"$T" train --config configs/textclf.json "${small[@]}" --set steps=120 --set checkpoint_dir="$WORK/ck" \
    --set metrics_file="$WORK/b.jsonl" --resume "$WORK/ck" >"$WORK/b2.out" 2>&1 || { cat "$WORK/b2.out"; fail "the resumed half"; }
expect_grep "$WORK/b2.out" "resumed from .*step-00000060 at step 60"
compare_losses "$WORK/a.jsonl" "$WORK/b.jsonl" "textclf resumed at step 60" 61
"$T" eval "$WORK/ck" >"$WORK/eval.out" 2>&1 || { cat "$WORK/eval.out"; fail "eval"; }
expect_grep "$WORK/eval.out" "eval: 1463 fortunes, loss [0-9.]+, accuracy"

# data parallel: 2 ranks x 32 against 1 rank x 64 (the same samples per step)
"$BIN/dtrun" -n 2 "$T" train --config configs/textclf.json "${small[@]}" --set steps=40 --set batch_size=32 \
    --set metrics_file="$WORK/dp.jsonl" >"$WORK/dp.out" 2>&1 || { cat "$WORK/dp.out"; fail "2 ranks"; }
compare_losses "$WORK/a.jsonl" "$WORK/dp.jsonl" "textclf on 2 ranks against 1" 1 loss
# a parameter server (1 server, 2 workers, BSP) follows one rank as well
"$BIN/dtrun" -n 3 --servers 1 "$T" train --config configs/textclf.json "${small[@]}" --set steps=40 --set batch_size=32 \
    --set metrics_file="$WORK/ps.jsonl" >"$WORK/ps.out" 2>&1 || { cat "$WORK/ps.out"; fail "parameter server"; }
compare_losses "$WORK/a.jsonl" "$WORK/ps.jsonl" "textclf through a parameter server (BSP) against 1 rank" 1 loss
echo ok
