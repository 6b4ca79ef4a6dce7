#!/usr/bin/env bash
# dtrain train with ZeRO (zero_stage 1, 2, 3) from the CLI:
#   - each stage on 2 ranks against data parallelism (zero_stage 0) from the
#     same seed, with dropout, AdamW, clipping and 2 micro-batches: every
#     logged loss and the eval loss within 1e-5;
#   - a checkpoint of 2 ranks at stage 1 resumed at stage 2;
#   - a checkpoint written by 4 ranks at stage 3 (unsplit: every rank's
#     shard of the values and of AdamW's state gathered) resumed by 2 ranks
#     at stage 1 and by one process: each continues the uninterrupted run's
#     losses within 1e-5;
#   - offload=disk against the state in memory, at stage 1 (the optimizer
#     state) and stage 3 (also the parameter shard): the same losses and
#     the same checkpoint bits, no file left;
#   - refusals: zero_stage with tp, with gradient compression, a
#     memory_limit below the stage's model states (naming the stage that
#     fits), a memory_limit that is not a size;
#   - a rank killed mid-step at stage 3 (gathers every block): the job stops
#     and names it.
. "$(dirname "$0")/lib.sh"
model=(--config configs/gpt-mini.json --set layers=2 --set dim=64 --set context=32 --set threads=1)
base=("${model[@]}" --set steps=8 --set log_interval=1 --set eval_interval=8 --set eval_batches=2 --set warmup_steps=2)
job() { # out ranks settings...
    local out=$1 n=$2
    shift 2
    "$BIN/dtrun" -n "$n" "$BIN/dtrain" train "${base[@]}" "$@" --set metrics_file="$out.jsonl" >"$out" 2>&1
}
common=(--set batch_size=4 --set micro_batches=2 --set dropout=0.1)
for z in 0 2 3; do
    par "$WORK/z$z" job "$WORK/z$z" 2 "${common[@]}" --set zero_stage=$z
done
par "$WORK/z1" job "$WORK/z1" 2 "${common[@]}" --set zero_stage=1 --set checkpoint_dir="$WORK/ck1" \
    --set checkpoint_interval=4 --set checkpoint_keep=0
par_wait
for z in 0 1 2 3; do
    par_ok "$WORK/z$z" || { cat "$WORK/z$z"; fail "zero_stage=$z on 2 ranks failed"; }
done
for z in 1 2 3; do
    expect_grep "$WORK/z$z" "ZeRO stage $z"
    compare_losses "$WORK/z0.jsonl" "$WORK/z$z.jsonl" "zero_stage=$z against data parallelism on 2 ranks"
done

# -- a stage-3 checkpoint of 4 ranks, resumed by 2 ranks at stage 1 and by one process
ck="$WORK/ck"
job "$WORK/w4" 4 --set batch_size=4 --set zero_stage=3 --set checkpoint_dir="$ck" --set checkpoint_interval=4 \
    --set checkpoint_keep=0 || { cat "$WORK/w4"; fail "4 ranks at stage 3 failed"; }
resume() { # out ranks settings...
    local out=$1 n=$2
    shift 2
    "$BIN/dtrun" -n "$n" "$BIN/dtrain" train "${base[@]}" "$@" --set metrics_file="$out.jsonl" \
        --resume "$ck/step-00000004" >"$out" 2>&1
}
par "$WORK/r2" resume "$WORK/r2" 2 --set batch_size=4 --set zero_stage=1
par "$WORK/r1" resume "$WORK/r1" 1 --set batch_size=4
# stage 1's checkpoint (2 ranks) resumed at stage 2 on 2 ranks
par "$WORK/r12" "$BIN/dtrun" -n 2 "$BIN/dtrain" train "${base[@]}" "${common[@]}" --set zero_stage=2 \
    --set metrics_file="$WORK/r12.jsonl" --resume "$WORK/ck1/step-00000004"
par_wait
par_ok "$WORK/r12" || { cat "$WORK/r12"; fail "stage 1 resumed at stage 2 failed"; }
compare_losses "$WORK/z1.jsonl" "$WORK/r12.jsonl" "2 ranks at stage 1 resumed at stage 2" 5
for r in r2 r1; do
    par_ok "$WORK/$r" || { cat "$WORK/$r"; fail "resume $r failed"; }
    expect_grep "$WORK/$r" "resumed from .*step-00000004 at step 4"
done
expect_grep "$WORK/r2" "gradient accumulation 1 -> 2 keeps the global batch at 16"
compare_losses "$WORK/w4.jsonl" "$WORK/r2.jsonl" "4 ranks at stage 3 resumed by 2 ranks at stage 1" 5
compare_losses "$WORK/w4.jsonl" "$WORK/r1.jsonl" "4 ranks at stage 3 resumed by one process" 5
"$BIN/dtrain" eval "$ck" >"$WORK/eval" 2>&1 || { cat "$WORK/eval"; fail "dtrain eval of the ZeRO checkpoint"; }

# -- the optimizer state offloaded to disk (stage 1), and with it stage 3's parameter shard: the same bits
# (losses and every checkpointed tensor)
for z in 1 3; do
    par "$WORK/on$z" job "$WORK/on$z" 2 "${common[@]}" --set zero_stage=$z --set offload=disk --set offload_dir="$WORK" \
        --set checkpoint_dir="$WORK/ck-on$z"
    par "$WORK/off$z" job "$WORK/off$z" 2 "${common[@]}" --set zero_stage=$z --set checkpoint_dir="$WORK/ck-off$z"
    par_wait
    par_ok "$WORK/on$z" || { cat "$WORK/on$z"; fail "offload=disk failed at stage $z"; }
    par_ok "$WORK/off$z" || { cat "$WORK/off$z"; fail "the run without offload failed at stage $z"; }
    python3 -c 'import json, sys
a, b = ([json.loads(l).get("loss") for l in open(f)] for f in sys.argv[1:])
sys.exit(0 if a == b and len(a) > 1 else 1)' "$WORK/on$z.jsonl" "$WORK/off$z.jsonl" ||
        fail "offload changed the losses at stage $z"
    for f in model optim_m optim_v; do
        cmp "$WORK/ck-on$z/step-00000008/$f.safetensors" "$WORK/ck-off$z/step-00000008/$f.safetensors" ||
            fail "offload changed $f.safetensors at stage $z"
    done
done
expect_grep "$WORK/on1" "offload: the optimizer state on disk .*: [0-9.]+ MiB read and [0-9.]+ MiB written per step"
expect_grep "$WORK/on1" "optimizer state 0.0 \([0-9.]+ on disk\)"
expect_grep "$WORK/on3" "offload: the optimizer state and the parameter shard on disk .*: [0-9.]+ MiB read"
expect_grep "$WORK/on3" "the strategy's shard [0-9.]+; its parameters on disk"
ls "$WORK" | grep -q dtrain-offload && fail "the offload file was left behind"
echo "offload=disk (stages 1 and 3): the same losses and checkpoint bits as the state in memory"

# -- refusals
job "$WORK/bad" 2 --set zero_stage=1 --set tp=2 && fail "zero_stage with tp accepted"
expect_grep "$WORK/bad" "key 'zero_stage' > 0 shards over data parallelism alone"
job "$WORK/bad" 2 --set zero_stage=2 --set grad_compression=bf16 && fail "zero_stage with bf16 gradients accepted"
expect_grep "$WORK/bad" "key 'grad_compression' is for data parallelism"
# a memory_limit the chosen stage does not fit: refused, naming the stage that does
job "$WORK/bad" 2 --set zero_stage=0 --set memory_limit=1.7MiB && fail "a stage over memory_limit accepted"
expect_grep "$WORK/bad" "zero_stage 0 needs [0-9.]+ MiB of model states per rank .* above 1.7 MiB \(memory_limit\); zero_stage [1-3] needs [0-9.]+ MiB and fits"
job "$WORK/bad" 2 --set zero_stage=0 --set memory_limit=1MiB && fail "a memory_limit nothing fits accepted"
expect_grep "$WORK/bad" "no zero_stage fits on 2 ranks \(the least, zero_stage [0-3], needs [0-9.]+ MiB\)"
job "$WORK/bad" 2 --set memory_limit=lots && fail "memory_limit=lots accepted"
expect_grep "$WORK/bad" "key 'memory_limit' is not a size"

# -- a rank killed while stage 3 gathers parameters every block: the job stops, naming it
kill_rank_in_training 2 "$WORK/kill" "$BIN/dtrun" -n 3 "$BIN/dtrain" train "${model[@]}" --set steps=100000 \
    --set zero_stage=3 --set batch_size=4 --set log_interval=5
echo ok
