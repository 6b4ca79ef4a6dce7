#!/usr/bin/env bash
# The strategies on device buffers without a GPU: 2 ranks on the emu device
# (the cpu kernels behind memory the host cannot dereference: a host read
# or write of device memory faults) against the same runs on the cpu, for
# data parallelism (buckets reduced on device pointers as backward
# produces them; with clipping and 2 micro-batches), ZeRO 1, 2 and 3 (its
# shard, gathers and update on the device), tensor parallel (tp=2) and the
# pipeline (pp=2, 1f1b, 4 micro-batches): every loss, gradient norm and
# evaluation bitwise the cpu run's.  A checkpoint written by an emu run
# (data parallel, and ZeRO-2's and ZeRO-3's shard files) resumed on the cpu
# continues the uninterrupted trajectory.  What is not built on a device
# (recompute, here) is refused by name.
. "$(dirname "$0")/lib.sh"
gpt=(--config configs/gpt-mini.json --set layers=2 --set dim=64 --set heads=4 --set context=32 --set batch_size=4
     --set data_path=README.md --set dropout=0.1 --set steps=6 --set warmup_steps=2 --set log_interval=1
     --set eval_interval=3 --set eval_batches=2 --set threads=1)
run() { # NAME DEVICE ARGS...
    local name=$1 dev=$2
    shift 2
    par "$WORK/$name.out" "$BIN/dtrun" -n 2 "$BIN/dtrain" train "${gpt[@]}" "$@" --set device="$dev" \
        --set metrics_file="$WORK/$name.jsonl" --set checkpoint_dir="$WORK/ck-$name"
}
both() { # NAME ARGS...: the run on cpu and on emu
    local name=$1
    shift
    run "$name-cpu" cpu "$@"
    run "$name-emu" emu "$@"
}
both ddp --set checkpoint_interval=3
both ddp-clip-acc --set grad_clip=0.05 --set grad_accumulation=2
both zero1 --set zero_stage=1
both zero2 --set zero_stage=2 --set grad_clip=0.05 --set checkpoint_interval=3
both zero3 --set zero_stage=3 --set grad_clip=0.05 --set checkpoint_interval=3
both tp --set tp=2
both pp --set pp=2 --set pipeline_schedule=1f1b --set micro_batches=4
par_wait
for f in "$WORK"/*.out; do par_ok "$f" || { cat "$f"; fail "$(basename "$f" .out) failed"; }; done
# the emu runs' checkpoints at step 3, resumed on the cpu
run ddp-emu-then-cpu cpu --resume "$WORK/ck-ddp-emu/step-00000003"
run zero2-emu-then-cpu cpu --set zero_stage=2 --set grad_clip=0.05 --resume "$WORK/ck-zero2-emu/step-00000003"
run zero3-emu-then-cpu cpu --set zero_stage=3 --set grad_clip=0.05 --resume "$WORK/ck-zero3-emu/step-00000003"
par_wait
for f in ddp-emu-then-cpu zero2-emu-then-cpu zero3-emu-then-cpu; do par_ok "$WORK/$f.out" || { cat "$WORK/$f.out"; fail "$f failed"; }; done
expect_grep "$WORK/ddp-emu.out" "device: emu.*communication: the native backend"
expect_grep "$WORK/ddp-emu-then-cpu.out" "resumed from .*step-00000003 at step 3"
expect_grep "$WORK/zero2-emu-then-cpu.out" "resumed from .*step-00000003 at step 3"
expect_grep "$WORK/zero3-emu-then-cpu.out" "resumed from .*step-00000003 at step 3"
# ZeRO-3's checkpoint on emu: the same shard files (values and moments) and weights as the cpu run's
for f in model.safetensors zero-shard-00000-of-00002.safetensors zero-shard-00001-of-00002.safetensors; do
    cmp -s "$WORK/ck-zero3-emu/step-00000003/$f" "$WORK/ck-zero3-cpu/step-00000003/$f" ||
        fail "zero3's checkpoint file $f at step 3 differs between emu and cpu"
done
pairs="ddp-emu:ddp-cpu ddp-clip-acc-emu:ddp-clip-acc-cpu zero1-emu:zero1-cpu zero2-emu:zero2-cpu zero3-emu:zero3-cpu"
pairs="$pairs tp-emu:tp-cpu pp-emu:pp-cpu ddp-emu-then-cpu:ddp-cpu zero2-emu-then-cpu:zero2-cpu zero3-emu-then-cpu:zero3-cpu"
python3 - "$WORK" $pairs <<'PY' || fail "a run on emu differs from its cpu run"
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
    bad += bool(diff) or len(common) < (4 if "then" in a else 8)
sys.exit(1 if bad else 0)
PY
# the clipped runs clipped (a threshold under every norm), so the norm's path on the device counted
python3 - "$WORK/ddp-clip-acc-emu.jsonl" <<'PY' || fail "grad_clip 0.05 did not bind"
import json, sys
norms = [json.loads(l)["grad_norm"] for l in open(sys.argv[1]) if "grad_norm" in l]
sys.exit(0 if norms and min(norms) > 0.05 else 1)
PY
# the ZeRO-3 runs clipped too (the norm over the device's shards)
python3 - "$WORK/zero3-emu.jsonl" <<'PY' || fail "grad_clip 0.05 did not bind for zero3"
import json, sys
norms = [json.loads(l)["grad_norm"] for l in open(sys.argv[1]) if "grad_norm" in l]
sys.exit(0 if norms and min(norms) > 0.05 else 1)
PY
# not built on a device: refused by name
"$BIN/dtrun" -n 2 "$BIN/dtrain" train "${gpt[@]}" --set device=emu --set zero_stage=3 --set recompute=blocks >"$WORK/r1" 2>&1 &&
    fail "recompute on a device ran"
expect_grep "$WORK/r1" "key 'device' = \"emu\" with recompute blocks: .*not built yet"
echo ok
