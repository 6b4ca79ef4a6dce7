#!/usr/bin/env bash
# The device code paths without a GPU: device=emu runs the cpu kernels
# behind memory the host cannot dereference (a stray host read or write of
# device memory faults), so every run on it must equal the cpu run bit for
# bit.  Covered: the gpt with dropout (keyed masks, saved records on the
# arena's host side, the input and targets copied in, the loss), f32 and
# bf16, accumulation over micro-batches (the gradient scale on the device),
# the mlp with sgd + momentum, the end-of-run evaluation (logits copied out
# for the accuracy), and checkpoints: written from device memory and resumed
# on the cpu, written on the cpu and resumed on the device, each continuing
# the uninterrupted run exactly.  Also: what a device run refuses, by name.
. "$(dirname "$0")/lib.sh"
text=README.md
gpt=(--config configs/gpt-mini.json --set layers=2 --set dim=64 --set heads=4 --set context=32 --set batch_size=4
     --set data_path="$text" --set dropout=0.1 --set steps=12 --set warmup_steps=3 --set log_interval=1
     --set eval_interval=0 --set eval_batches=2 --set threads=1)
mlp=(--config configs/mlp.json --set mlp_sizes=[784,64,10] --set batch_size=32 --set steps=12 --set log_interval=1
     --set optimizer=sgd --set momentum=0.9 --set eval_interval=0 --set eval_batches=2 --set threads=1)
run() { # NAME DEVICE ARGS...
    local name=$1 dev=$2
    shift 2
    par "$WORK/$name.out" "$BIN/dtrain" train "$@" --set device="$dev" --set metrics_file="$WORK/$name.jsonl"
}
run gpt-cpu cpu "${gpt[@]}"
run gpt-emu emu "${gpt[@]}"
run bf16-cpu cpu "${gpt[@]}" --set precision=bf16
run bf16-emu emu "${gpt[@]}" --set precision=bf16
run acc-cpu cpu "${gpt[@]}" --set grad_accumulation=2
run acc-emu emu "${gpt[@]}" --set grad_accumulation=2
if [ -d /usr/share/datasets/fashion-mnist ]; then
    run mlp-cpu cpu "${mlp[@]}"
    run mlp-emu emu "${mlp[@]}"
fi
ck=("${gpt[@]}" --set checkpoint_interval=6)
run ck-emu emu "${ck[@]}" --set checkpoint_dir="$WORK/ck-emu"
run ck-cpu cpu "${ck[@]}" --set checkpoint_dir="$WORK/ck-cpu"
par_wait
for f in "$WORK"/*.out; do par_ok "$f" || { cat "$f"; fail "$(basename "$f" .out) failed"; }; done
# resumed at step 6 on the other device
run ck-emu-then-cpu cpu "${ck[@]}" --set checkpoint_dir="$WORK/ck-emu" --resume "$WORK/ck-emu/step-00000006"
run ck-cpu-then-emu emu "${ck[@]}" --set checkpoint_dir="$WORK/ck-cpu" --resume "$WORK/ck-cpu/step-00000006"
par_wait
for f in ck-emu-then-cpu ck-cpu-then-emu; do par_ok "$WORK/$f.out" || { cat "$WORK/$f.out"; fail "$f failed"; }; done
expect_grep "$WORK/gpt-emu.out" "device: emu"
expect_grep "$WORK/ck-emu-then-cpu.out" "resumed from .*step-00000006 at step 6"
pairs="gpt-emu:gpt-cpu bf16-emu:bf16-cpu acc-emu:acc-cpu ck-emu-then-cpu:ck-emu ck-cpu-then-emu:ck-cpu ck-emu:gpt-cpu"
[ -f "$WORK/mlp-emu.jsonl" ] && pairs="$pairs mlp-emu:mlp-cpu"
python3 - "$WORK" $pairs <<'PY' || fail "a device run differs from its cpu run"
import json, sys
work, pairs = sys.argv[1], sys.argv[2:]
def rows(name):
    r = {}
    for line in open(f"{work}/{name}.jsonl"):
        d = json.loads(line)
        key = ("eval", d["step"]) if "eval_loss" in d else ("train", d["step"])
        r[key] = (d.get("loss"), d.get("grad_norm"), d.get("eval_loss"), d.get("eval_accuracy"))
    return r
bad = 0
for p in pairs:
    a, b = p.split(":")
    x, y = rows(a), rows(b)
    common = sorted(set(x) & set(y))
    diff = [k for k in common if x[k] != y[k]]
    print(f"{a} vs {b}: {len(common)} rows, {len(diff)} differ" + (f" (first {diff[0]}: {x[diff[0]]} vs {y[diff[0]]})" if diff else ""))
    bad += bool(diff) or len(common) < 6
sys.exit(1 if bad else 0)
PY
# eval and generate of a checkpoint on the device (DT_DEVICE) equal the cpu's
"$BIN/dtrain" eval "$WORK/ck-emu" >"$WORK/ev-cpu" 2>/dev/null || fail "eval on the cpu failed"
DT_DEVICE=emu "$BIN/dtrain" eval "$WORK/ck-emu" >"$WORK/ev-emu" 2>"$WORK/ev-emu.err" || { cat "$WORK/ev-emu.err"; fail "eval on emu failed"; }
cmp -s "$WORK/ev-cpu" "$WORK/ev-emu" || { cat "$WORK/ev-cpu" "$WORK/ev-emu"; fail "eval on emu differs from the cpu's"; }
"$BIN/dtrain" generate "$WORK/ck-emu" --prompt "The " --tokens 30 >"$WORK/gen-cpu" 2>/dev/null || fail "generate on the cpu failed"
DT_DEVICE=emu "$BIN/dtrain" generate "$WORK/ck-emu" --prompt "The " --tokens 30 >"$WORK/gen-emu" 2>"$WORK/gen-emu.err" ||
    { cat "$WORK/gen-emu.err"; fail "generate on emu failed"; }
expect_grep "$WORK/gen-emu.err" "device: emu"
cmp -s "$WORK/gen-cpu" "$WORK/gen-emu" || fail "generate on emu differs from the cpu's"
echo "eval and generate on emu: the cpu's output"
# refusals, each naming the key and why
"$BIN/dtrain" train "${gpt[@]}" --set device=emu --set offload=disk >"$WORK/r1" 2>&1 && fail "offload on a device ran"
expect_grep "$WORK/r1" "key 'device' = \"emu\" with offload disk: .*not built yet"
"$BIN/dtrain" train "${gpt[@]}" --set device=tpu >"$WORK/r2" 2>&1 && fail "device tpu ran"
expect_grep "$WORK/r2" "device.*must be cpu, cuda, cuda:N or emu"
# (2 ranks on a device train now: tests/cases/device_strategies.sh; what is not built is refused by its key)
"$BIN/dtrun" -n 2 "$BIN/dtrain" train "${gpt[@]}" --set device=emu --set servers=1 >"$WORK/r3" 2>&1 &&
    fail "a parameter server on a device ran"
expect_grep "$WORK/r3" "key 'device' = \"emu\" with servers 1: .*not built yet"
echo ok
