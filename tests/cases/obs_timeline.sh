#!/usr/bin/env bash
# dtrun --timeline (docs/observability.md): a 2-rank data-parallel run with
# recomputation and a checkpoint, and a 2-stage pipeline, each merged into
# one Chrome trace: valid JSON, one process per rank (host:rank), named
# threads, and per rank the spans of data wait, forward, backward,
# recompute, optimizer, collectives (communicator, algorithm, bytes) and
# gradient buckets, with a bucket span overlapping a backward span (the
# overlap data parallel claims); the pipeline's ranks have transfer spans.
# The ranks' own files are gone after the merge.
. "$(dirname "$0")/lib.sh"
model=(--config configs/gpt-mini.json --set layers=4 --set dim=64 --set context=32 --set threads=1
       --set steps=6 --set log_interval=2 --set eval_interval=0 --set eval_batches=1 --set warmup_steps=2)
"$BIN/dtrun" -n 2 --timeline "$WORK/ddp.json" "$BIN/dtrain" train "${model[@]}" --set recompute=all \
    --set grad_clip=0 --set bucket_mb=0.02 --set checkpoint_dir="$WORK/ck" --set checkpoint_interval=3 \
    >"$WORK/out" 2>"$WORK/err" || { cat "$WORK/out" "$WORK/err"; fail "the data-parallel run failed"; }
expect_grep "$WORK/err" "dtrun: timeline of 2 ranks \([0-9]+ events\) in $WORK/ddp.json"
ls "$WORK"/ddp.json.rank* 2>/dev/null && fail "the ranks' files were left behind"
python3 tests/cases/obs_check_timeline.py "$WORK/ddp.json" 2 ddp || fail "the data-parallel timeline"

"$BIN/dtrun" -n 2 --timeline "$WORK/pp.json" "$BIN/dtrain" train "${model[@]}" --set pp=2 --set batch_size=8 \
    --set micro_batches=4 >"$WORK/out" 2>"$WORK/err" || { cat "$WORK/out" "$WORK/err"; fail "the pipeline run failed"; }
python3 tests/cases/obs_check_timeline.py "$WORK/pp.json" 2 pp || fail "the pipeline timeline"
