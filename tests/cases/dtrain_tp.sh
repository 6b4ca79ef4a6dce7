#!/usr/bin/env bash
# dtrain train with tensor parallelism: tp=2 on 2 ranks (also sequence
# parallel) against one rank,
# and dp=2 x tp=2 on 4 ranks against dp=2 on 2 ranks, from the same seed
# with dropout 0.1, clipping and AdamW: every logged loss (metrics file,
# 9 digits) within 1e-4 relative, the eval loss too; the first progress
# line names the mesh.  Refusals: heads or vocab not divisible by tp, a
# world not divisible by tp, tp with the cnn; the mlp with tp=2.  Checkpoints of a tp=2 run
# are unsplit and resume with tp=1 and tp=4 on the same trajectory.
. "$(dirname "$0")/lib.sh"
base=(--config configs/gpt-mini.json --set layers=2 --set dim=128 --set context=64 --set steps=16
      --set log_interval=4 --set eval_interval=16 --set eval_batches=2 --set threads=1)
common=("${base[@]}" --set batch_size=8 --set dropout=0.1)
run_job() { # ranks tp out
    "$BIN/dtrun" -n "$1" "$BIN/dtrain" train "${common[@]}" --set tp="$2" --set metrics_file="$3.jsonl" >"$3" 2>&1 ||
        { cat "$3"; fail "dtrun -n $1 tp=$2 failed"; }
}
compare() { # a.jsonl b.jsonl what [keys: default "loss eval_loss"]
    python3 - "$1" "$2" "$3" ${4:-loss eval_loss} <<'PY' || fail "$3: the losses differ"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) and len(a) > 0, f"{len(a)} against {len(b)} records"
worst = 0
for x, y in zip(a, b):
    for k in sys.argv[4:]:
        if k in x:
            worst = max(worst, abs(x[k] - y[k]) / abs(x[k]))
print(f"{sys.argv[3]}: {len(a)} records, losses within {worst:.2g}")
sys.exit(0 if worst <= 1e-4 else 1)
PY
}
run_job 1 1 "$WORK/one"
run_job 2 2 "$WORK/tp2"
expect_grep "$WORK/tp2" "training gpt \([0-9]+ parameters\).*mesh dp=1 x tp=2 \([0-9]+ parameters on each rank\)"
compare "$WORK/one.jsonl" "$WORK/tp2.jsonl" "tp=2 against one rank"
"$BIN/dtrun" -n 2 "$BIN/dtrain" train "${common[@]}" --set tp=2 --set sequence_parallel=true \
    --set metrics_file="$WORK/sp.jsonl" >"$WORK/sp" 2>&1 || { cat "$WORK/sp"; fail "tp=2 with sequence parallelism failed"; }
compare "$WORK/one.jsonl" "$WORK/sp.jsonl" "tp=2 sequence parallel against one rank"
"$BIN/dtrun" -n 1 "$BIN/dtrain" train "${common[@]}" --set sequence_parallel=true >"$WORK/bad" 2>&1 &&
    fail "sequence_parallel without tp accepted"
expect_grep "$WORK/bad" "key 'sequence_parallel' needs the gpt model and tp > 1"
run_job 2 1 "$WORK/dp2"
run_job 4 2 "$WORK/dp2tp2"
expect_grep "$WORK/dp2tp2" "mesh dp=2 x tp=2"
compare "$WORK/dp2.jsonl" "$WORK/dp2tp2.jsonl" "dp=2 x tp=2 against dp=2"
# ... and against one process with the global batch (no dropout: its masks follow the data-parallel rank)
"$BIN/dtrun" -n 1 "$BIN/dtrain" train "${base[@]}" --set batch_size=16 --set dropout=0 \
    --set metrics_file="$WORK/g1.jsonl" >"$WORK/g1" 2>&1 || { cat "$WORK/g1"; fail "one process, batch 16"; }
"$BIN/dtrun" -n 4 "$BIN/dtrain" train "${base[@]}" --set batch_size=8 --set tp=2 --set dropout=0 \
    --set metrics_file="$WORK/g4.jsonl" >"$WORK/g4" 2>&1 || { cat "$WORK/g4"; fail "dp=2 x tp=2 without dropout"; }
# (the training losses: each evaluates eval_batches of its own batch_size)
compare "$WORK/g1.jsonl" "$WORK/g4.jsonl" "dp=2 x tp=2 (batch 8 each) against one process with the global batch 16" loss

"$BIN/dtrun" -n 4 "$BIN/dtrain" train "${common[@]}" --set tp=4 --set heads=2 >"$WORK/bad" 2>&1 && fail "heads 2 over tp=4 accepted"
expect_grep "$WORK/bad" "key 'tp' = 4 must divide heads \(2\) and vocab \(256\)"
"$BIN/dtrun" -n 3 "$BIN/dtrain" train "${common[@]}" --set tp=2 >"$WORK/bad" 2>&1 && fail "3 ranks with tp=2 accepted"
expect_grep "$WORK/bad" "world's 3 ranks are not divisible by 2"
"$BIN/dtrun" -n 2 "$BIN/dtrain" train --config configs/cnn.json --set tp=2 >"$WORK/bad" 2>&1 && fail "tp with the cnn accepted"
expect_grep "$WORK/bad" "built for the gpt and mlp models"

# The mlp: fc1 column, fc2 row, fc3 replicated; tp=2 against one rank.
mlp=(--config configs/mlp.json --set steps=30 --set log_interval=10 --set eval_interval=30 --set threads=1)
"$BIN/dtrun" -n 1 "$BIN/dtrain" train "${mlp[@]}" --set metrics_file="$WORK/mlp1.jsonl" >"$WORK/mlp1" 2>&1 || { cat "$WORK/mlp1"; fail "mlp, one rank"; }
"$BIN/dtrun" -n 2 "$BIN/dtrain" train "${mlp[@]}" --set tp=2 --set metrics_file="$WORK/mlp2.jsonl" >"$WORK/mlp2" 2>&1 || { cat "$WORK/mlp2"; fail "mlp, tp=2"; }
expect_grep "$WORK/mlp2" "training mlp .*mesh dp=1 x tp=2"
compare "$WORK/mlp1.jsonl" "$WORK/mlp2.jsonl" "mlp tp=2 against one rank"

# Checkpoints in the unsplit layout: tp=2 writes steps 8 and 16 with
# PyTorch's shapes (scripts/dtrain_to_torch.py loads it, strict); resumed from step 8 with tp=1 and with tp=4, the run
# continues the uninterrupted one (losses of steps 12 and 16 within 1e-4).
"$BIN/dtrun" -n 2 "$BIN/dtrain" train "${common[@]}" --set tp=2 --set checkpoint_dir="$WORK/ck" \
    --set checkpoint_interval=8 --set metrics_file="$WORK/ck.jsonl" >"$WORK/ckrun" 2>&1 || { cat "$WORK/ckrun"; fail "tp=2 with checkpoints failed"; }
python3 - "$WORK/ck/step-00000016/model.safetensors" <<'PY' || fail "the tp=2 checkpoint is not in the unsplit layout"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
h = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
want = {"transformer.wte.weight": [256, 128], "transformer.h.0.attn.c_attn.weight": [384, 128],
        "transformer.h.1.mlp.c_proj.weight": [128, 512], "transformer.h.0.mlp.c_fc.bias": [512]}
for k, v in want.items():
    assert h[k]["shape"] == v, (k, h[k]["shape"], v)
print("tp=2 checkpoint: unsplit shapes (wte [256, 128], c_attn [384, 128], ...)")
PY
/usr/bin/python3 scripts/dtrain_to_torch.py "$WORK/ck" >"$WORK/torch" 2>&1 || { cat "$WORK/torch"; fail "PyTorch cannot load the tp=2 checkpoint"; }
expect_grep "$WORK/torch" "load_state_dict\(strict=True\) ok"
grep "loaded" "$WORK/torch"
for t in 1 4; do
    mkdir -p "$WORK/ck$t" && cp -r "$WORK/ck/step-00000008" "$WORK/ck$t/"
    "$BIN/dtrun" -n $t "$BIN/dtrain" train "${common[@]}" --set tp=$t --set checkpoint_dir="$WORK/ck$t" \
        --set checkpoint_interval=8 --set metrics_file="$WORK/ck$t.jsonl" --resume "$WORK/ck$t" >"$WORK/res$t" 2>&1 ||
        { cat "$WORK/res$t"; fail "resuming the tp=2 checkpoint with tp=$t failed"; }
    expect_grep "$WORK/res$t" "resumed from .*step-00000008 at step 8"
    python3 - "$WORK/ck.jsonl" "$WORK/ck$t.jsonl" "$t" <<'PY' || fail "tp=$t resumed off the tp=2 trajectory"
import json, sys
full = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r}
res = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2])) if "loss" in r}
assert sorted(res) == [12, 16], sorted(res)
worst = max(abs(res[s] - full[s]) / full[s] for s in res)
print(f"tp=2 checkpoint resumed with tp={sys.argv[3]}: steps 12 and 16 within {worst:.2g} of the uninterrupted run")
sys.exit(0 if worst <= 1e-4 else 1)
PY
done
echo ok
