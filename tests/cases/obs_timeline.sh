#!/usr/bin/env bash
# dtrun --timeline (docs/observability.md): a 2-rank data-parallel run with
# recomputation and a checkpoint, and a 2-stage pipeline, each merged into
# one Chrome trace: valid JSON, one process per rank (host:rank), named
# threads, and per rank the spans of data wait, forward, backward,
# recompute, optimizer, collectives (communicator, algorithm, bytes) and
# gradient buckets, with a bucket span overlapping a backward span (the
# overlap data parallel claims); the pipeline's ranks have transfer spans.
# The ranks' own files are gone after the merge.  A rank killed mid-run
# still gives its events but the last few, and dtrun says its file was cut short.
. "$(dirname "$0")/lib.sh"
model=(--config configs/gpt-mini.json --set layers=4 --set dim=64 --set context=32 --set threads=1
       --set eval_interval=0 --set eval_batches=1 --set warmup_steps=2)
short=(--set steps=6 --set log_interval=2)
"$BIN/dtrun" -n 2 --timeline "$WORK/ddp.json" "$BIN/dtrain" train "${model[@]}" "${short[@]}" --set recompute=all \
    --set grad_clip=0 --set bucket_mb=0.02 --set checkpoint_dir="$WORK/ck" --set checkpoint_interval=3 \
    >"$WORK/out" 2>"$WORK/err" || { cat "$WORK/out" "$WORK/err"; fail "the data-parallel run failed"; }
expect_grep "$WORK/err" "dtrun: timeline of 2 ranks \([0-9]+ events\) in $WORK/ddp.json"
ls "$WORK"/ddp.json.rank* 2>/dev/null && fail "the ranks' files were left behind"
python3 tests/cases/obs_check_timeline.py "$WORK/ddp.json" 2 ddp || fail "the data-parallel timeline"

"$BIN/dtrun" -n 2 --timeline "$WORK/pp.json" "$BIN/dtrain" train "${model[@]}" "${short[@]}" --set pp=2 --set batch_size=8 \
    --set micro_batches=4 >"$WORK/out" 2>"$WORK/err" || { cat "$WORK/out" "$WORK/err"; fail "the pipeline run failed"; }
python3 tests/cases/obs_check_timeline.py "$WORK/pp.json" 2 pp || fail "the pipeline timeline"

# A rank killed (kill -9) mid-run: its file, written as it went, still gives
# its events up to its last full chunk; dtrun merges it and says it was cut short.
"$BIN/dtrun" -n 2 --timeline "$WORK/kill.json" "$BIN/dtrain" train "${model[@]}" --set steps=100000 \
    --set log_interval=50 >"$WORK/out" 2>"$WORK/err" &
job=$!
for _ in $(seq 600); do
    grep -q "step 150/" "$WORK/out" 2>/dev/null && break
    sleep 0.1
done
victim=""
for p in $(pgrep -P $job); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx DT_RANK=1 && victim=$p
done
[ -n "$victim" ] || { kill $job; fail "did not find rank 1 among dtrun's children"; }
kill -9 "$victim"
wait $job && fail "the job exited 0 after a rank was killed"
expect_grep "$WORK/err" "dtrun: timeline of 2 ranks \([0-9]+ events\) in $WORK/kill.json: .*cut short \(the rank did not exit normally; its last events are missing\): rank\(s\) [01]"
python3 - "$WORK/kill.json" <<'PY' || fail "the timeline of the killed run"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
per = {r: sum(1 for e in ev if e.get("pid") == r and e.get("ph") == "X" and e["cat"] == "backward") for r in (0, 1)}
print(f"backward spans per rank after rank 1 was killed: {per}")
assert per[1] > 0, "no events from the killed rank"
PY
