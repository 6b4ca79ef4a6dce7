#!/usr/bin/env bash
# dtrain train with pipeline parallelism, from the CLI:
#   - pp=2 with each schedule (gpipe, 1f1b, interleaved) against one rank
#     with the same micro-batches: every logged loss (metrics file, 9
#     digits) and the eval loss within 1e-5 relative; the start names the
#     stages the partition found;
#   - dp x pp x tp = 2x2x2 (8 ranks) against one process with the global
#     batch, and its checkpoint (unsplit, the layout in its manifest's
#     configuration) resumed at 1x1x1, 4x1x2 and 1x2x4: each continues the
#     uninterrupted run's losses within 1e-5; eval and generate load it;
#   - refusals: more stages than blocks, micro_batches not dividing
#     batch_size, interleaved with micro-batches not a multiple of pp;
#   - a stage killed mid-step: the job stops with an error naming it.
. "$(dirname "$0")/lib.sh"
model=(--config configs/gpt-mini.json --set layers=4 --set dim=64 --set context=32 --set threads=1)
base=("${model[@]}" --set steps=8 --set log_interval=1 --set eval_interval=8 --set eval_batches=2 --set warmup_steps=2)
# (compare_losses, lib.sh: the eval loss only where both runs have the same batch_size: each evaluates
# eval_batches of its own)
job() { # out ranks settings...
    local out=$1 n=$2
    shift 2
    "$BIN/dtrun" -n "$n" "$BIN/dtrain" train "${base[@]}" "$@" --set metrics_file="$out.jsonl" >"$out" 2>&1
}

# -- each schedule on 2 stages against one rank, the same 4 micro-batches
par "$WORK/one" job "$WORK/one" 1 --set batch_size=8 --set micro_batches=4
for s in gpipe 1f1b interleaved; do
    par "$WORK/pp2-$s" job "$WORK/pp2-$s" 2 --set batch_size=8 --set micro_batches=4 --set pp=2 --set pipeline_schedule=$s
done
par_wait
par_ok "$WORK/one" || { cat "$WORK/one"; fail "one rank failed"; }
for s in gpipe 1f1b interleaved; do
    par_ok "$WORK/pp2-$s" || { cat "$WORK/pp2-$s"; fail "pp=2 $s failed"; }
    compare_losses "$WORK/one.jsonl" "$WORK/pp2-$s.jsonl" "pp=2 $s against one rank"
done
expect_grep "$WORK/pp2-1f1b" "pipeline: 2 stages, 1f1b schedule, 4 micro-batches of 2 per step; blocks by cost hints \(forward FLOPs\): 0 \[0, 3\) [0-9]+% 1 \[3, 6\) [0-9]+%"
expect_grep "$WORK/pp2-interleaved" "pipeline: 2 stages x virtual stages, interleaved schedule.* v0 \[0, 2\) [0-9]+% v1 \[2, 3\)"
expect_grep "$WORK/pp2-gpipe" "activation memory: at most [0-9.]+ MiB held at once, 4 micro-batches in flight"
expect_grep "$WORK/pp2-1f1b" "activation memory: at most [0-9.]+ MiB held at once, 2 micro-batches in flight"

# -- 2x2x2 against one process with the global batch; its checkpoint at step 4 resumed in three layouts
ck="$WORK/ck"
par "$WORK/g1" job "$WORK/g1" 1 --set batch_size=16 --set micro_batches=2
par "$WORK/m8" job "$WORK/m8" 8 --set batch_size=8 --set micro_batches=2 --set pp=2 --set tp=2 \
    --set checkpoint_dir="$ck" --set checkpoint_interval=4 --set checkpoint_keep=0
par_wait
par_ok "$WORK/g1" || { cat "$WORK/g1"; fail "one process with the global batch failed"; }
par_ok "$WORK/m8" || { cat "$WORK/m8"; fail "2x2x2 failed"; }
expect_grep "$WORK/m8" "mesh dp=2 x pp=2 x tp=2"
compare_losses "$WORK/g1.jsonl" "$WORK/m8.jsonl" "dp=2 x pp=2 x tp=2 against one process with the global batch" 1 loss
python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); c = m["config"]
sys.exit(0 if (m["world_size"], c["pp"], c["tp"]) == (2, 2, 2) else 1)' "$ck/step-00000004/manifest.json" ||
    fail "the manifest does not record the layout dp x pp x tp = 2x2x2 (world_size, config pp and tp)"
resume() { # out ranks settings...
    local out=$1 n=$2
    shift 2
    "$BIN/dtrun" -n "$n" "$BIN/dtrain" train "${base[@]}" "$@" --set metrics_file="$out.jsonl" \
        --resume "$ck/step-00000004" >"$out" 2>&1
}
par "$WORK/r111" resume "$WORK/r111" 1 --set batch_size=8 --set micro_batches=2
par "$WORK/r412" resume "$WORK/r412" 8 --set batch_size=4 --set micro_batches=2 --set pp=2
par "$WORK/r124" resume "$WORK/r124" 8 --set batch_size=16 --set micro_batches=4 --set pp=4 --set tp=2
par_wait
for r in r111 r412 r124; do
    par_ok "$WORK/$r" || { cat "$WORK/$r"; fail "resume $r failed"; }
    expect_grep "$WORK/$r" "resumed from .*step-00000004 at step 4"
done
compare_losses "$WORK/m8.jsonl" "$WORK/r111.jsonl" "2x2x2 resumed at 1x1x1" 5
compare_losses "$WORK/m8.jsonl" "$WORK/r412.jsonl" "2x2x2 resumed at 4x1x2" 5 loss
compare_losses "$WORK/m8.jsonl" "$WORK/r124.jsonl" "2x2x2 resumed at 1x2x4" 5 loss
"$BIN/dtrain" eval "$ck" >"$WORK/eval" 2>&1 || { cat "$WORK/eval"; fail "dtrain eval of the pipelined checkpoint"; }
"$BIN/dtrain" generate "$ck" --prompt "The " --tokens 20 >"$WORK/gen" 2>&1 ||
    { cat "$WORK/gen"; fail "dtrain generate from the pipelined checkpoint"; }

# -- refusals
job "$WORK/bad" 8 --set pp=8 && fail "8 stages of a 6-block model accepted"
expect_grep "$WORK/bad" "pp = 8: pipeline: 8 stages but the model has 6 blocks"
job "$WORK/bad" 2 --set pp=2 --set batch_size=8 --set micro_batches=3 && fail "micro_batches 3 of batch 8 accepted"
expect_grep "$WORK/bad" "key 'micro_batches' = 3 does not divide batch_size = 8"
job "$WORK/bad" 2 --set pp=2 --set pipeline_schedule=interleaved --set micro_batches=3 --set batch_size=9 &&
    fail "interleaved with 3 micro-batches on 2 stages accepted"
expect_grep "$WORK/bad" "interleaved needs the micro-batches per step .* = 3\) to be a multiple of pp = 2"

# -- a stage killed mid-step: every rank stops, the error names it
kill_rank_in_training 1 "$WORK/kill" "$BIN/dtrun" -n 2 "$BIN/dtrain" train "${model[@]}" --set steps=100000 \
    --set pp=2 --set micro_batches=4 --set log_interval=5
echo ok
