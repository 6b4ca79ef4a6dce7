#!/usr/bin/env bash
# Issue 29 F and --overwrite: the manifest is checked on load. An edit without
# a matching manifest_crc32 is refused as edited or corrupt; an edit with a
# fresh checksum is refused by the range checks, naming the field and value
# (step, optimizer steps, sampler epoch and position, rng, tensor shapes
# against the config). With a bad newest checkpoint, --resume auto and a
# restart (DT_RESTART=1, and dtrun --max-restarts) fall back to the previous one and end with the
# uninterrupted run's weights to the bit. A new run into a checkpoint_dir that
# holds another run's checkpoints is refused, unless --overwrite, which
# removes them first.
. "$(dirname "$0")/lib.sh"
T="$BIN/dtrain"
EDIT="python3 tests/cases/manifest_edit.py"
common=(--config configs/mlp.json --set 'mlp_sizes=[784,32,10]' --set optimizer=adamw --set lr=0.001
        --set batch_size=32 --set log_interval=10 --set eval_interval=0 --set eval_batches=2 --set threads=1)
check_err() { # pattern args...
    local want=$1; shift
    "$T" "$@" >"$WORK/out" 2>"$WORK/err" && { cat "$WORK/out"; fail "dtrain $* succeeded"; }
    expect_grep "$WORK/err" "$want"
}

# the uninterrupted reference, and a run that stops at step 30 with checkpoints at 10, 20, 30
"$T" train "${common[@]}" --set steps=40 --set checkpoint_dir="$WORK/ref" >/dev/null 2>&1 || fail "reference run"
"$T" train "${common[@]}" --set steps=30 --set checkpoint_interval=10 --set checkpoint_keep=0 \
    --set checkpoint_dir="$WORK/k" >"$WORK/k.out" 2>&1 || { cat "$WORK/k.out"; fail "training"; }
$EDIT "$WORK/k/step-00000030/manifest.json" check || fail "the test's canonical manifest text differs from dtrain's"

tamper() { # field value [--no-reseal]: a copy of step-30 with one field changed, in $WORK/bad
    rm -rf "$WORK/bad" && cp -r "$WORK/k/step-00000030" "$WORK/bad"
    $EDIT "$WORK/bad/manifest.json" set "$@" || fail "cannot edit the manifest"
}
resume_bad() { check_err "$1" train "${common[@]}" --set steps=40 --resume "$WORK/bad"; }
# edited without the checksum
tamper sampler/position 1000000 --no-reseal
resume_bad "bad/manifest.json has checksum [0-9a-f]{8}, its field manifest_crc32 says [0-9a-f]{8} \(edited or corrupt\)"
tamper manifest_crc32 null --no-reseal
resume_bad "field manifest_crc32 is missing"
# a safetensors header that is JSON but not an object (a crash before), its
# size and CRC in the manifest made to match, as a careful editor would
rm -rf "$WORK/bad" && cp -r "$WORK/k/step-00000030" "$WORK/bad"
python3 - "$WORK/bad/model.safetensors" <<'PY' || fail "cannot rewrite the header"
import struct, sys
p = sys.argv[1]; b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = b"[1,2,3]"
open(p, "wb").write(struct.pack("<Q", len(h)) + h + b[8 + n:])
PY
bytes=$(stat -c %s "$WORK/bad/model.safetensors")
crc=$(python3 -c 'import sys, zlib; print(zlib.crc32(open(sys.argv[1], "rb").read()))' "$WORK/bad/model.safetensors")
$EDIT "$WORK/bad/manifest.json" set files/model.safetensors/bytes "$bytes" >/dev/null || fail "cannot edit the manifest"
$EDIT "$WORK/bad/manifest.json" set files/model.safetensors/crc32 "$crc" >/dev/null || fail "cannot edit the manifest"
resume_bad "model.safetensors (has no readable safetensors header|: the header is not valid JSON)"
check_err "model.safetensors (has no readable safetensors header|: the header is not valid JSON)" eval "$WORK/bad"
# checksums that match a state gone bad: a NaN weight is refused on resume
# and by eval, naming the tensor; an optimizer file the manifest does not
# list is not read
reseal() { # DIR: every file's size and CRC, then the manifest's own, made to match
    python3 - "$1" <<'PY' || fail "cannot reseal $1"
import json, sys, zlib
sys.path.insert(0, "tests/cases")
from manifest_edit import canonical_crc
d = sys.argv[1]; m = json.load(open(d + "/manifest.json"))
for f, e in m["files"].items():
    b = open(d + "/" + f, "rb").read(); e["bytes"] = len(b); e["crc32"] = zlib.crc32(b)
m["manifest_crc32"] = canonical_crc(m)
json.dump(m, open(d + "/manifest.json", "w"))
PY
}
rm -rf "$WORK/bad" && cp -r "$WORK/k/step-00000030" "$WORK/bad"
python3 - "$WORK/bad/model.safetensors" <<'PY' || fail "cannot write a NaN"
import struct, sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", b[:8])[0]
b[8 + n + 4:8 + n + 8] = struct.pack("<f", float("nan")); open(p, "wb").write(b)
PY
reseal "$WORK/bad"
resume_bad "bad: parameter .* holds nan \(element 1\): refused"
check_err "bad: parameter .* holds nan \(element 1\): refused" eval "$WORK/bad"
rm -rf "$WORK/bad" && cp -r "$WORK/k/step-00000030" "$WORK/bad"
python3 -c 'import json, sys; p = sys.argv[1]; m = json.load(open(p)); del m["files"]["optim_m.safetensors"]; json.dump(m, open(p, "w"))' \
    "$WORK/bad/manifest.json"
reseal "$WORK/bad"
resume_bad "the manifest does not list optim_m.safetensors"
# two tensors sharing bytes (a bias pointed at the start of the data): refused,
# not one's weights loaded into the other
rm -rf "$WORK/bad" && cp -r "$WORK/k/step-00000030" "$WORK/bad"
python3 - "$WORK/bad/model.safetensors" <<'PY' || fail "cannot alias a tensor"
import json, struct, sys
p = sys.argv[1]; b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
name = next(k for k, v in h.items() if k != "__metadata__" and len(v["shape"]) == 1)
a, e = h[name]["data_offsets"]; h[name]["data_offsets"] = [0, e - a]
t = json.dumps(h).encode(); t += b" " * (-len(t) % 8)
open(p, "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
PY
reseal "$WORK/bad"
check_err "model.safetensors: tensor .* starts at byte 0 of the data, where the tensor before it still runs: they overlap" \
    eval "$WORK/bad"
# a second moment of -1 (finite, resealed): the update makes the weights NaN;
# the evaluation says so and no checkpoint of them is written
rm -rf "$WORK/bad" && cp -r "$WORK/k/step-00000030" "$WORK/bad"
python3 - "$WORK/bad/optim_v.safetensors" <<'PY' || fail "cannot write the moments"
import struct, sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", b[:8])[0]
b[8 + n:] = struct.pack("<f", -1.0) * ((len(b) - 8 - n) // 4); open(p, "wb").write(b)
PY
reseal "$WORK/bad"
"$T" train "${common[@]}" --set steps=31 --set checkpoint_dir="$WORK/nan" --resume "$WORK/bad" >"$WORK/out" 2>"$WORK/err" &&
    fail "a resume whose update made the weights NaN succeeded"
expect_grep "$WORK/err" "the evaluation at step 31 is not finite: the weights are not .*no checkpoint of them is written"
[ -z "$(ls -A "$WORK/nan" 2>/dev/null)" ] || { ls "$WORK/nan"; fail "a checkpoint of NaN weights was written"; }
# another optimizer than the checkpoint's: its state would load into the wrong slots
check_err "holds the state of optimizer adamw, and this run's optimizer is sgd" \
    train "${common[@]/optimizer=adamw/optimizer=sgd}" --set steps=40 --set momentum=0.9 --resume "$WORK/k/step-00000030"
# edited with a fresh checksum: every value is range-checked
tamper sampler/position 1000000
resume_bad "field sampler.position = 1000000 is not a whole number in \[0, 60000\]"
tamper sampler/position -5
resume_bad "field sampler.position = -5 is not a whole number"
tamper sampler/epoch 5000
resume_bad "field sampler.epoch = 5000 is not a whole number in \[0, "
tamper step 99999
resume_bad "field step = 99999 is not a whole number in \[0, 30\]"
tamper step 12.5
resume_bad "field step = 12.5 is not a whole number"
tamper optimizer/steps 31
resume_bad "field optimizer.steps = 31 is not a whole number in \[0, 30\]"
tamper rng/0 '"12ab"'
resume_bad "field rng\[0\] = 12ab is not a 64-bit unsigned decimal"
tamper rng '["0","0","0","0"]'
resume_bad "field rng is all zero"
tamper config/mlp_sizes '[784,64,10]'
resume_bad "model.safetensors: tensor fc1.weight has shape \[32,784\], the manifest's config \(model mlp\) needs \[64, 784\]"
tamper config/lr -1
resume_bad "key 'lr' = -1 is outside"
tamper files/model.safetensors/bytes 5
resume_bad "model.safetensors has [0-9]+ bytes, the manifest says 5"
echo "edited manifests refused, each naming the field"

# a bad newest checkpoint: --resume auto falls back to step 20 and ends bit-equal to the reference
$EDIT "$WORK/k/step-00000030/manifest.json" set sampler/position 1000000
cp -r "$WORK/k" "$WORK/k2"
"$T" train "${common[@]}" --set steps=40 --set checkpoint_dir="$WORK/k" --resume auto >"$WORK/r.out" 2>"$WORK/r.err" ||
    { cat "$WORK/r.out" "$WORK/r.err"; fail "resume auto"; }
expect_grep "$WORK/r.err" "field sampler.position = 1000000 is not a whole number"
expect_grep "$WORK/r.err" "skipping checkpoint .*step-00000030 .*falling back to the previous one"
expect_grep "$WORK/r.out" "resumed from .*step-00000020 at step 20"
cmp "$WORK/ref/step-00000040/model.safetensors" "$WORK/k/step-00000040/model.safetensors" ||
    fail "resumed past the bad checkpoint, the final weights differ from the uninterrupted run's"
# the same under a restart: DT_RESTART=1 resumes by itself
DT_RESTART=1 "$T" train "${common[@]}" --set steps=40 --set checkpoint_dir="$WORK/k2" >"$WORK/r2.out" 2>"$WORK/r2.err" ||
    { cat "$WORK/r2.out" "$WORK/r2.err"; fail "restart"; }
expect_grep "$WORK/r2.err" "skipping checkpoint .*step-00000030"
expect_grep "$WORK/r2.out" "resumed from .*step-00000020 at step 20"
cmp "$WORK/ref/step-00000040/model.safetensors" "$WORK/k2/step-00000040/model.safetensors" ||
    fail "restarted past the bad checkpoint, the final weights differ from the uninterrupted run's"
echo "bad step-30 skipped (resume auto and restart), resumed from step-20, final weights equal the reference's"

# the same under dtrun --max-restarts: generation 0 checkpoints steps 10, 20, 30, its step-30 manifest is
# edited and the rank fails; generation 1 skips step 30, resumes from 20, and ends equal to the reference
cat >"$WORK/gen.sh" <<SH
#!/bin/sh
if [ "\$DT_RESTART" = 0 ]; then
    "$T" train ${common[*]} --set steps=30 --set checkpoint_interval=10 --set checkpoint_keep=0 --set checkpoint_dir="$WORK/k3" || exit 9
    python3 tests/cases/manifest_edit.py "$WORK/k3/step-00000030/manifest.json" set sampler/position 1000000
    exit 1
fi
exec "$T" train ${common[*]} --set steps=40 --set checkpoint_keep=0 --set checkpoint_dir="$WORK/k3"
SH
chmod +x "$WORK/gen.sh"
"$BIN/dtrun" --max-restarts 1 -n 1 "$WORK/gen.sh" >"$WORK/r3.out" 2>&1 || { cat "$WORK/r3.out"; fail "the restarted job failed"; }
expect_grep "$WORK/r3.out" "restart 1 of 1"
expect_grep "$WORK/r3.out" "field sampler.position = 1000000 is not a whole number"
expect_grep "$WORK/r3.out" "resumed from .*step-00000020 at step 20"
cmp "$WORK/ref/step-00000040/model.safetensors" "$WORK/k3/step-00000040/model.safetensors" ||
    fail "dtrun restarted past the bad checkpoint, the final weights differ from the uninterrupted run's"
echo "dtrun --max-restarts: the restarted generation skipped the edited step-30 and ended equal to the reference"

# another run's checkpoints: refused without --overwrite, removed with it
mkdir -p "$WORK/k/.step-00000050.tmp"
check_err "checkpoint_dir .*/k already holds 4 checkpoint directories of another run; continue it with --resume" \
    train "${common[@]}" --set steps=5 --set checkpoint_dir="$WORK/k"
[ -f "$WORK/k/step-00000040/manifest.json" ] || fail "the refused run touched the old checkpoints"
touch "$WORK/k/notes.txt"
"$T" train "${common[@]}" --set steps=5 --set checkpoint_dir="$WORK/k" --overwrite >"$WORK/o.out" 2>&1 ||
    { cat "$WORK/o.out"; fail "--overwrite"; }
expect_grep "$WORK/o.out" "--overwrite: removed 4 checkpoint directories of an earlier run"
[ "$(ls -A "$WORK/k" | sort | tr '\n' ' ')" = "notes.txt step-00000005 " ] || { ls -A "$WORK/k"; fail "--overwrite left old steps or removed other files"; }
echo "another run's checkpoint_dir: refused, then --overwrite removed its 4 step directories (3 complete, 1 temporary) (and only them)"
echo ok
