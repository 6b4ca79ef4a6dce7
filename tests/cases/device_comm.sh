#!/usr/bin/env bash
# A communicator for device buffers beside the job's (dt_comm_attach_device,
# docs/gpu.md "Which communication backend"), on the emu device:
# tests/device_comm.c on 2, 3 and 4 ranks (the refusals; a device buffer's
# call runs on the companion, a host buffer's on the host communicator;
# nonblocking and point to point follow their buffers; splits carry a
# companion of the same members); coll_check with every buffer on the
# device and a native companion gives the host run's bits; the trainer with
# DT_DEVICE_BACKEND=native (data parallel, ZeRO-2, ZeRO-3, tp=2, pp=2) gives the cpu
# run's losses bit for bit and names the companion on its start line, and
# refuses an unknown DT_DEVICE_BACKEND by name.
. "$(dirname "$0")/lib.sh"
for n in 2 3 4; do
    par "$WORK/route$n" "$BIN/dtrun" -n $n "$BIN/device_comm"
done
par "$WORK/host3" "$BIN/dtrun" -n 3 "$BIN/coll_check" --quick --big 4096 --hashes
par "$WORK/attached3" "$BIN/dtrun" -n 3 "$BIN/coll_check" --quick --big 4096 --hashes --device emu --attach native
par_wait
for n in 2 3 4; do
    par_ok "$WORK/route$n" || { cat "$WORK/route$n"; fail "device_comm on $n ranks"; }
done
for k in host3 attached3; do par_ok "$WORK/$k" || { cat "$WORK/$k"; fail "coll_check ($k)"; }; done
diff "$WORK/host3" "$WORK/attached3" || fail "coll_check with a native companion gave other bits than the host run"

gpt=(--config configs/gpt-mini.json --set layers=2 --set dim=64 --set heads=4 --set context=32 --set batch_size=4
     --set data_path=README.md --set dropout=0.1 --set steps=4 --set warmup_steps=2 --set log_interval=1
     --set eval_interval=2 --set eval_batches=2 --set threads=1)
run() { # NAME DEVICE-BACKEND DEVICE ARGS...
    local name=$1 db=$2 dev=$3
    shift 3
    DT_DEVICE_BACKEND=$db par "$WORK/$name.out" "$BIN/dtrun" -n 2 "$BIN/dtrain" train "${gpt[@]}" "$@" \
        --set device="$dev" --set metrics_file="$WORK/$name.jsonl"
}
run ddp-cpu auto cpu
run ddp-emu native emu
run zero2-cpu auto cpu --set zero_stage=2
run zero2-emu native emu --set zero_stage=2
run zero3-cpu auto cpu --set zero_stage=3
run zero3-emu native emu --set zero_stage=3
run tp-cpu auto cpu --set tp=2
run tp-emu native emu --set tp=2
run pp-cpu auto cpu --set pp=2 --set pipeline_schedule=1f1b --set micro_batches=2
run pp-emu native emu --set pp=2 --set pipeline_schedule=1f1b --set micro_batches=2
par_wait
for f in "$WORK"/*.out; do par_ok "$f" || { cat "$f"; fail "$(basename "$f" .out) failed"; }; done
expect_grep "$WORK/ddp-emu.out" "device: emu.*communication: device buffers on a native communicator of their own"
rows() { # the trajectory of a metrics file: step, loss, gradient norm, evaluation loss
    python3 -c '
import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    print(d.get("step"), d.get("loss"), d.get("grad_norm"), d.get("eval_loss"))' "$1"
}
for k in ddp zero2 zero3 tp pp; do
    [ "$(grep -c '"loss"' "$WORK/$k-emu.jsonl")" -ge 4 ] || fail "$k: fewer than 4 rows in $k-emu.jsonl"
    cmp <(rows "$WORK/$k-cpu.jsonl") <(rows "$WORK/$k-emu.jsonl") ||
        fail "$k: emu with a native companion differs from the cpu run"
done
DT_DEVICE_BACKEND=tpu "$BIN/dtrun" -n 2 "$BIN/dtrain" train "${gpt[@]}" --set device=emu >"$WORK/bad" 2>&1 &&
    fail "DT_DEVICE_BACKEND=tpu accepted"
expect_grep "$WORK/bad" "DT_DEVICE_BACKEND='tpu': expected auto, nccl, native or none"
echo "ok: device buffers on a companion communicator (emu): routed, split, the host run's bits"
