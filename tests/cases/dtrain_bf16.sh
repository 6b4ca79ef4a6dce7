#!/usr/bin/env bash
# precision = bf16 (issue 35): mixed-precision training converges like f32.
# A small gpt trained 150 steps in f32, in bf16 on the CPU's own kernel (AMX
# or AVX512_BF16 where present) and in bf16 emulated (DT_BF16_GEMM=emulated,
# which every CPU runs): each bf16 evaluation loss within 2% of f32's, and
# all of them well below the starting loss.  The mlp in bf16 reaches f32's
# test accuracy within 2 points.  Two data-parallel ranks in bf16 send bf16
# gradients by default (grad_compression auto) and train to the one-rank
# loss within 3%.  The start line names the precision and the kernel; an
# unsupported precision is refused naming the key.
. "$(dirname "$0")/lib.sh"
# DT_TEST_QUICK (the sanitizer builds): the same runs and checks, 60 gpt and
# 100 mlp steps (the plain build measured f32 at 0.69 of its first loss,
# bf16 0.02% and 2 ranks 1.3% from it; mlp accuracy 76.8 and 77.0%): the
# sanitizers see every kernel and path in the first steps.
gsteps=150 msteps=300
[ "${QUICK:-${DT_TEST_QUICK:-0}}" = 1 ] && gsteps=60 msteps=100
gpt=(--config configs/gpt-mini.json --set layers=2 --set dim=128 --set heads=4 --set context=64
     --set steps=$gsteps --set warmup_steps=10 --set log_interval=10 --set eval_interval=$gsteps --set eval_batches=4
     --set threads=1)
par "$WORK/f32" "$BIN/dtrain" train "${gpt[@]}" --set batch_size=8 --set metrics_file="$WORK/f32.jsonl"
par "$WORK/bf16" "$BIN/dtrain" train "${gpt[@]}" --set batch_size=8 --set precision=bf16 --set metrics_file="$WORK/bf16.jsonl"
par_wait
par "$WORK/emul" env DT_BF16_GEMM=emulated "$BIN/dtrain" train "${gpt[@]}" --set batch_size=8 \
    --set precision=bf16 --set metrics_file="$WORK/emul.jsonl"
par "$WORK/dp2" "$BIN/dtrun" -n 2 "$BIN/dtrain" train "${gpt[@]}" --set batch_size=4 --set precision=bf16 \
    --set metrics_file="$WORK/dp2.jsonl"
par_wait
for r in f32 bf16 emul dp2; do
    par_ok "$WORK/$r" || { cat "$WORK/$r"; fail "gpt run $r failed"; }
done
expect_grep "$WORK/bf16" "precision: bf16 (matrix products on (AMX tiles|AVX512_BF16)|emulated)"
expect_grep "$WORK/emul" "precision: bf16 emulated"
expect_no_grep "$WORK/f32" "precision:"
expect_grep "$WORK/dp2" "gradients as bf16"
python3 - "$WORK" <<'PY' || fail "bf16 gpt losses too far from f32"
import json, sys
def losses(name):
    rows = [json.loads(l) for l in open(f"{sys.argv[1]}/{name}.jsonl")]
    first = next(r["loss"] for r in rows if "loss" in r)
    ev = [r["eval_loss"] for r in rows if "eval_loss" in r]
    assert ev, f"{name}: no evaluation"
    return first, ev[-1]
f0, f = losses("f32")
print(f"f32: first loss {f0:.4f}, eval loss at the last step {f:.4f}")
assert f < 0.75 * f0, "f32 did not learn"
def trace(name):
    return [r["loss"] for r in map(json.loads, open(f"{sys.argv[1]}/{name}.jsonl")) if "loss" in r]
# bf16 must really round: its losses are not f32's bits
assert trace("bf16") != trace("f32") and trace("emul") != trace("f32"), "bf16 losses equal f32's: not rounding"
for name, tol in (("bf16", 0.02), ("emul", 0.02), ("dp2", 0.03)):
    b0, b = losses(name)
    rel = abs(b - f) / f
    print(f"{name}: eval loss {b:.4f}, {100 * rel:.2f}% from f32 (limit {100 * tol:.0f}%)")
    assert rel <= tol, f"{name}: {b} against f32 {f}"
PY
mlp=(--config configs/mlp.json --set steps=$msteps --set log_interval=100 --set eval_interval=$msteps --set eval_batches=20
     --set threads=1)
par "$WORK/mf32" "$BIN/dtrain" train "${mlp[@]}" --set metrics_file="$WORK/mf32.jsonl"
par "$WORK/mbf16" "$BIN/dtrain" train "${mlp[@]}" --set precision=bf16 --set metrics_file="$WORK/mbf16.jsonl"
par_wait
par_ok "$WORK/mf32" && par_ok "$WORK/mbf16" || { cat "$WORK/mf32" "$WORK/mbf16"; fail "mlp runs failed"; }
python3 - "$WORK" "$msteps" <<'PY' || fail "bf16 mlp accuracy too far from f32"
import json, sys
acc = {}
for name in ("mf32", "mbf16"):
    rows = [json.loads(l) for l in open(f"{sys.argv[1]}/{name}.jsonl")]
    acc[name] = [r["eval_accuracy"] for r in rows if "eval_accuracy" in r][-1]
print(f"mlp test accuracy after {sys.argv[2]} steps: f32 {acc['mf32']:.4f}, bf16 {acc['mbf16']:.4f}")
assert acc["mf32"] > 0.7 and abs(acc["mbf16"] - acc["mf32"]) <= 0.02, acc
PY
"$BIN/dtrain" train "${gpt[@]}" --set precision=f16 >"$WORK/bad" 2>&1 && fail "precision=f16 accepted"
expect_grep "$WORK/bad" "key 'precision'"
echo ok
