#!/usr/bin/env bash
# dtrain train with ZeRO (zero_stage 1, 2, 3) from the CLI:
#   - each stage on 2 ranks against data parallelism (zero_stage 0) from the
#     same seed, with dropout, AdamW, clipping and 2 micro-batches: every
#     logged loss and the eval loss within 1e-5;
#   - a checkpoint of 2 ranks at stage 1 resumed at stage 2; one of data
#     parallelism (unsplit, as ZeRO's were before shard files) at stage 3;
#   - a checkpoint written by 4 ranks at stage 3 in shard files (one per
#     rank, the values' and AdamW's state; no optim_m/optim_v, the manifest's
#     sharding enough to put the values together bit for bit without the
#     model) resumed by 2 ranks at stage 1, by one process and by 3 ranks at
#     stage 2 (a per-rank batch of 4: the same global batch of 12): each
#     continues the uninterrupted run's losses within 1e-5;
#   - a corrupt shard file: named, and a resume from the root falls back to
#     the previous checkpoint and continues the losses; a missing one, a unit
#     that is not the model's, a file list short of the ranks: named; a
#     disk too full for a rank's shard (root only): named, the step dropped
#     whole, training goes on, exit 3;
#   - offload=disk against the state in memory, at stage 1 (the optimizer
#     state) and stage 3 (also the parameter shard): the same losses and
#     the same checkpoint bits, no file left;
#   - refusals: zero_stage 3 with tp (1 and 2 run in meshes: zero_mesh.sh), with gradient compression, a
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
for z in 2 3; do
    par "$WORK/z$z" job "$WORK/z$z" 2 "${common[@]}" --set zero_stage=$z
done
par "$WORK/z0" job "$WORK/z0" 2 "${common[@]}" --set zero_stage=0 --set checkpoint_dir="$WORK/ck0" \
    --set checkpoint_interval=4 --set checkpoint_keep=0
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

# -- a stage-3 checkpoint of 4 ranks in shard files, resumed by 2 ranks at stage 1, by one process and by 3
# ranks at stage 2 (global batch 12: 4 x 3, 2 x 3 x 2, 1 x 3 x 4, 3 x 4)
ck="$WORK/ck"
job "$WORK/w4" 4 --set batch_size=3 --set zero_stage=3 --set checkpoint_dir="$ck" --set checkpoint_interval=4 \
    --set checkpoint_keep=0 || { cat "$WORK/w4"; fail "4 ranks at stage 3 failed"; }
for s in 4 8; do
    d="$ck/step-0000000$s"
    [ "$(ls "$d" | grep -c '^zero-shard-0000[0-3]-of-00004\.safetensors$')" = 4 ] || { ls -l "$d"; fail "$d: not 4 shard files"; }
    [ -e "$d/optim_m.safetensors" ] || [ -e "$d/optim_v.safetensors" ] && fail "$d: the optimizer state gathered on rank 0"
done
# the manifest alone (its units, not the model) puts the values' shards together: model.safetensors to the bit
python3 - "$ck/step-00000004" <<'PY' || fail "the shard files do not put model.safetensors together"
import json, struct, sys
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
sh = m["sharding"]
assert (sh["kind"], sh["stage"], sh["ranks"], sh["tensors"]) == ("zero", 3, 4, ["values", "optim_m", "optim_v"]), sh
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]
hdr, data = tensors(d + "/model.safetensors")
numel = sum(u["numel"] for u in sh["units"])
flat = [0.0] * numel
for name, t in hdr.items():
    if name != "__metadata__":
        b, e = t["data_offsets"]
        # the registry's flat layout: data_offsets are the flat offsets x 4 (src/ckpt/safetensors.c)
        flat[b // 4:e // 4] = struct.unpack("<%df" % ((e - b) // 4), data[b:e])
got = [None] * numel
for q, f in enumerate(sh["files"]):
    h, raw = tensors(d + "/" + f)
    b, e = h["values"]["data_offsets"]
    shard = struct.unpack("<%df" % sh["shard_numel"], raw[b:e])
    at = 0
    for u in sh["units"]:
        for i in range(u["slice"]):
            if q * u["slice"] + i < u["numel"]:
                got[u["offset"] + q * u["slice"] + i] = shard[at + i]
            else:
                assert shard[at + i] == 0.0, "padding is not zero"
        at += u["slice"]
assert got == flat, "values differ"
print(f"4 shard files put together: {numel} values equal model.safetensors'")
PY
resume() { # out ranks settings...
    local out=$1 n=$2
    shift 2
    "$BIN/dtrun" -n "$n" "$BIN/dtrain" train "${base[@]}" "$@" --set metrics_file="$out.jsonl" \
        --resume "$ck/step-00000004" >"$out" 2>&1
}
par "$WORK/r2" resume "$WORK/r2" 2 --set batch_size=3 --set zero_stage=1
par "$WORK/r1" resume "$WORK/r1" 1 --set batch_size=3
par "$WORK/r3" resume "$WORK/r3" 3 --set batch_size=4 --set zero_stage=2
# stage 1's checkpoint (2 ranks) resumed at stage 2 on 2 ranks
par "$WORK/r12" "$BIN/dtrun" -n 2 "$BIN/dtrain" train "${base[@]}" "${common[@]}" --set zero_stage=2 \
    --set metrics_file="$WORK/r12.jsonl" --resume "$WORK/ck1/step-00000004"
# data parallelism's unsplit checkpoint resumed at stage 3
par "$WORK/r03" "$BIN/dtrun" -n 2 "$BIN/dtrain" train "${base[@]}" "${common[@]}" --set zero_stage=3 \
    --set metrics_file="$WORK/r03.jsonl" --resume "$WORK/ck0/step-00000004"
par_wait
par_ok "$WORK/r12" || { cat "$WORK/r12"; fail "stage 1 resumed at stage 2 failed"; }
compare_losses "$WORK/z1.jsonl" "$WORK/r12.jsonl" "2 ranks at stage 1 resumed at stage 2" 5
par_ok "$WORK/r03" || { cat "$WORK/r03"; fail "an unsplit checkpoint resumed at stage 3 failed"; }
compare_losses "$WORK/z0.jsonl" "$WORK/r03.jsonl" "an unsplit checkpoint (data parallelism) resumed at stage 3" 5
for r in r2 r1 r3; do
    par_ok "$WORK/$r" || { cat "$WORK/$r"; fail "resume $r failed"; }
    expect_grep "$WORK/$r" "resumed from .*step-00000004 at step 4"
done
expect_grep "$WORK/r2" "gradient accumulation 1 -> 2 keeps the global batch at 12"
compare_losses "$WORK/w4.jsonl" "$WORK/r2.jsonl" "4 ranks at stage 3 resumed by 2 ranks at stage 1" 5
compare_losses "$WORK/w4.jsonl" "$WORK/r1.jsonl" "4 ranks at stage 3 resumed by one process" 5
# (the eval batches are per-rank batches: 4 samples here, 3 there, so the training losses alone)
compare_losses "$WORK/w4.jsonl" "$WORK/r3.jsonl" "4 ranks at stage 3 resumed by 3 ranks at stage 2" 5 loss
"$BIN/dtrain" eval "$ck" >"$WORK/eval" 2>&1 || { cat "$WORK/eval"; fail "dtrain eval of the ZeRO checkpoint"; }

# -- a corrupt shard file in the newest checkpoint: named, and the resume falls back to the previous one
cp -r "$ck" "$WORK/ckbad"
printf 'X' | dd of="$WORK/ckbad/step-00000008/zero-shard-00002-of-00004.safetensors" bs=1 seek=1000 conv=notrunc 2>/dev/null
"$BIN/dtrun" -n 2 "$BIN/dtrain" train "${base[@]}" --set batch_size=3 --set zero_stage=1 \
    --set metrics_file="$WORK/rbad.jsonl" --resume "$WORK/ckbad" >"$WORK/rbad" 2>&1 ||
    { cat "$WORK/rbad"; fail "the resume past a corrupt shard file failed"; }
expect_grep "$WORK/rbad" "checkpoint file .*/ckbad/step-00000008/zero-shard-00002-of-00004.safetensors has checksum [0-9a-f]+, the manifest says [0-9a-f]+ \(corrupt\)"
expect_grep "$WORK/rbad" "skipping checkpoint .*/ckbad/step-00000008 .*falling back to the previous one"
expect_grep "$WORK/rbad" "resumed from .*/ckbad/step-00000004 at step 4"
compare_losses "$WORK/w4.jsonl" "$WORK/rbad.jsonl" "the fallback past a corrupt shard file" 5
# a missing shard file; a unit that is not the model's, a file list short of the ranks (each resealed)
mv "$WORK/ckbad/step-00000008/zero-shard-00002-of-00004.safetensors" "$WORK/away"
refused() { # step_dir pattern what
    "$BIN/dtrun" -n 1 "$BIN/dtrain" train "${base[@]}" --set batch_size=3 --resume "$1" >"$WORK/refused" 2>&1 &&
        fail "$3 accepted"
    expect_grep "$WORK/refused" "$2"
}
refused "$WORK/ckbad/step-00000008" "checkpoint file missing: .*/ckbad/step-00000008/zero-shard-00002-of-00004.safetensors" \
    "a missing shard file"
python3 tests/cases/manifest_edit.py "$WORK/ckbad/step-00000004/manifest.json" set sharding/units/1/offset 18433 >/dev/null
refused "$WORK/ckbad/step-00000004" "step-00000004: the manifest's field sharding.units\[1\].offset = 18433, the model's ZeRO layout has 18432" \
    "a unit that is not the model's"
python3 tests/cases/manifest_edit.py "$WORK/ckbad/step-00000004/manifest.json" set sharding/units/1/offset 18432 >/dev/null
python3 tests/cases/manifest_edit.py "$WORK/ckbad/step-00000004/manifest.json" set sharding/ranks 3 >/dev/null
refused "$WORK/ckbad/step-00000004" "the manifest's field sharding.files lists 4 files, sharding.ranks is 3" \
    "a file list short of the ranks"
echo "shard files: a corrupt one skipped (fallback), a missing one, a foreign unit and a short file list refused"
# a disk too small for the second checkpoint's shards: named, dropped whole (no temporary directory left),
# training goes on and ends with exit 3 naming the newest good one (as for any failed final checkpoint)
if [ "$(id -u)" = 0 ]; then
    mnt="$WORK/small"
    mkdir -p "$mnt"
    # one checkpoint of 2 ranks at stage 1 (the weights and each rank's two moments, about 1.4 MiB) fits, two do not
    mount -t tmpfs -o size=2m dtrain-test "$mnt" || fail "cannot mount a tmpfs"
    trap 'umount "$mnt" 2>/dev/null; rm -rf "$WORK"' EXIT
    job "$WORK/full" 2 --set batch_size=3 --set zero_stage=1 --set checkpoint_dir="$mnt/ck" --set checkpoint_interval=4 \
        --set checkpoint_keep=0
    rc=$?
    [ $rc = 3 ] || { cat "$WORK/full"; fail "a full disk for the final ZeRO checkpoint: exit $rc, expected 3"; }
    expect_grep "$WORK/full" "rank [01]'s shard of the checkpoint at step 8 not written: .*No space left on device"
    expect_grep "$WORK/full" "checkpoint at step 8 failed: rank [01].* could not write its shard"
    expect_grep "$WORK/full" "the newest good checkpoint is $mnt/ck/step-00000004 \(step 4\)"
    expect_grep "$WORK/full" "step 8/8"
    [ "$(ls -A "$mnt/ck")" = "step-00000004" ] || { ls -A "$mnt/ck"; fail "the full disk left more than step-4 behind"; }
    umount "$mnt"
    echo "disk full for a shard: named, the step dropped whole, step-4 kept, exit 3"
else
    echo "the disk-full case skipped: it needs root to mount a small tmpfs"
fi

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
    for f in model zero-shard-00000-of-00002 zero-shard-00001-of-00002; do
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
job "$WORK/bad" 2 --set zero_stage=3 --set tp=2 && fail "zero_stage 3 with tp accepted"
expect_grep "$WORK/bad" "key 'zero_stage' is 3: zero_stage 3 with tp/pp is not built: use 1 or 2"
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
