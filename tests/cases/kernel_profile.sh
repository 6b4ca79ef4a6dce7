#!/usr/bin/env bash
# DT_KERNEL_PROFILE=1 (src/tensor/profile.c) on the emu device: the trainer's
# end prints the table, every entry the step uses is in it (matrix products
# with their precision, shape and TFLOP/s; attention; LayerNorm; AdamW), the
# shares add up to 100%, and the run's losses are the unprofiled run's bit
# for bit (the wrapper only times).  Without the variable nothing is printed.
. "$(dirname "$0")/lib.sh"
gpt=(--config configs/gpt-mini.json --set layers=2 --set dim=64 --set heads=4 --set context=32 --set batch_size=4
     --set data_path=README.md --set steps=3 --set threads=1 --set eval_interval=0 --set device=emu)
DT_KERNEL_PROFILE=1 "$BIN/dtrain" train "${gpt[@]}" --set precision=bf16 --set metrics_file="$WORK/p.jsonl" >"$WORK/p" 2>&1 ||
    { cat "$WORK/p"; fail "the profiled run failed"; }
"$BIN/dtrain" train "${gpt[@]}" --set precision=bf16 --set metrics_file="$WORK/q.jsonl" >"$WORK/q" 2>&1 ||
    { cat "$WORK/q"; fail "the unprofiled run failed"; }
expect_grep "$WORK/p" "kernel profile \(DT_KERNEL_PROFILE=1, emu"
for e in "gemm\+bias bf16 NT m=128 n=64 k=64" "linear dW\+dx bf16 TN" "attention fwd bf16 B=4 T=32 H=4 hd=16" \
         "attention bwd bf16" "layernorm_fwd" "adamw" "softmax cross-entropy"; do
    expect_grep "$WORK/p" "$e"
done
grep -q "kernel profile" "$WORK/q" && fail "a run without DT_KERNEL_PROFILE printed a profile"
python3 - "$WORK/p" <<'PY' || fail "the shares do not add up to 100%"
import re, sys
shares = [float(m.group(1)) for m in re.finditer(r"^\s+([0-9.]+)%", open(sys.argv[1]).read(), re.M)]
print("shares", len(shares), sum(shares))
sys.exit(0 if shares and abs(sum(shares) - 100) < 0.5 else 1)
PY
cmp <(grep -o '"loss": [0-9.]*' "$WORK/p.jsonl") <(grep -o '"loss": [0-9.]*' "$WORK/q.jsonl") ||
    fail "profiling changed the losses"
echo "ok: DT_KERNEL_PROFILE=1 times every entry on emu and changes nothing"
