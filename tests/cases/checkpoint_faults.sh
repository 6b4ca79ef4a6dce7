#!/usr/bin/env bash
# Checkpoints under faults: only the newest checkpoint_keep are kept; a corrupt
# or truncated newest checkpoint is skipped for the previous one (and the run
# says so); a
# full disk or a read-only file system fails the checkpoint, not the training,
# and leaves what was on disk intact; when the final checkpoint is the one
# missing, dtrain exits 3 naming the newest good checkpoint (path and step).
. "$(dirname "$0")/lib.sh"
T="$BIN/dtrain"
common=(--config configs/mlp.json --set 'mlp_sizes=[784,64,10]' --set optimizer=adamw --set lr=0.001
        --set batch_size=32 --set log_interval=10 --set eval_interval=0 --set eval_batches=2 --set threads=1)

# keep the newest 2 of 5
"$T" train "${common[@]}" --set steps=50 --set checkpoint_interval=10 --set checkpoint_keep=2 \
    --set checkpoint_dir="$WORK/k" >"$WORK/k.out" 2>&1 || { cat "$WORK/k.out"; fail "training"; }
[ "$(ls "$WORK/k")" = "$(printf 'step-00000040\nstep-00000050')" ] || { ls -a "$WORK/k"; fail "expected step-40 and step-50 only"; }
expect_grep "$WORK/k.out" "checkpoint .*/step-00000050 \(.* s in the background\)"
echo "checkpoint_keep=2: $(ls "$WORK/k" | tr '\n' ' ')"

# a corrupt newest checkpoint: resume auto falls back to the previous one
printf 'X' | dd of="$WORK/k/step-00000050/optim_m.safetensors" bs=1 seek=5000 conv=notrunc 2>/dev/null
"$T" train "${common[@]}" --set steps=60 --set checkpoint_dir="$WORK/k" --set checkpoint_keep=0 \
    --resume auto >"$WORK/r.out" 2>"$WORK/r.err" || { cat "$WORK/r.out" "$WORK/r.err"; fail "resume auto"; }
expect_grep "$WORK/r.err" "optim_m.safetensors has checksum .* \(corrupt\)"
expect_grep "$WORK/r.err" "skipping checkpoint .*step-00000050 .*falling back to the previous one"
expect_grep "$WORK/r.out" "resumed from .*step-00000040 at step 40"
echo "corrupt step-50 skipped, resumed from step-40"

# a truncated newest checkpoint (step-60, written by the run above) is skipped too
truncate -s 1000 "$WORK/k/step-00000060/model.safetensors"
"$T" train "${common[@]}" --set steps=70 --set checkpoint_dir="$WORK/k" --set checkpoint_keep=0 \
    --resume auto >"$WORK/t.out" 2>"$WORK/t.err" || { cat "$WORK/t.out" "$WORK/t.err"; fail "resume auto"; }
expect_grep "$WORK/t.err" "model.safetensors .*truncated"
expect_grep "$WORK/t.err" "skipping checkpoint .*step-00000060 .*falling back to the previous one"
expect_grep "$WORK/t.out" "resumed from .*step-00000040 at step 40"
echo "truncated step-60 and corrupt step-50 skipped, resumed from step-40"

# --resume auto with nothing there starts from the start
"$T" train "${common[@]}" --set steps=5 --set checkpoint_dir="$WORK/empty" --resume auto >"$WORK/e.out" 2>&1 ||
    { cat "$WORK/e.out"; fail "resume auto on an empty directory"; }
expect_no_grep "$WORK/e.out" "resumed from"

# the final checkpoint fails without root (its temporary directory is blocked): training finishes,
# exit 3 naming the newest good one (issue 29, G; the tmpfs cases below need root)
"$T" train "${common[@]}" --set steps=10 --set checkpoint_dir="$WORK/fin" >/dev/null 2>&1 || fail "training"
mkdir -p "$WORK/fin/.step-00000030.tmp/blocked"
"$T" train "${common[@]}" --set steps=30 --set checkpoint_interval=10 --set checkpoint_dir="$WORK/fin" --resume auto \
    >"$WORK/fin.out" 2>"$WORK/fin.err"
rc=$?
[ $rc = 3 ] || { cat "$WORK/fin.out" "$WORK/fin.err"; fail "the final checkpoint could not be written: exit $rc, expected 3"; }
expect_grep "$WORK/fin.err" "the final checkpoint \(step 30\) could not be written \(above\); the newest good checkpoint is $WORK/fin/step-00000020 \(step 20\)"
expect_grep "$WORK/fin.out" "step 30/30"
echo "final checkpoint blocked: training finished, exit 3 naming step-20"

if [ "$(id -u)" != 0 ]; then
    echo "disk-full and read-only cases skipped: they need root to mount a small tmpfs"
    exit 0
fi
mnt="$WORK/small"
mkdir -p "$mnt"
# one checkpoint (weights + two AdamW moments, about 610 KB) fits in 1 MiB, two do not
mount -t tmpfs -o size=1m dtrain-test "$mnt" || fail "cannot mount a tmpfs"
trap 'umount "$mnt" 2>/dev/null; rm -rf "$WORK"' EXIT
# training goes on, but the final checkpoint (step 30) is missing: exit 3, naming the newest good one
"$T" train "${common[@]}" --set steps=30 --set checkpoint_interval=10 --set checkpoint_keep=1 \
    --set checkpoint_dir="$mnt/ck" >"$WORK/f.out" 2>"$WORK/f.err"
rc=$?
[ $rc = 3 ] || { cat "$WORK/f.out" "$WORK/f.err"; fail "a full disk for the final checkpoint: exit $rc, expected 3"; }
expect_grep "$WORK/f.err" "No space left on device"
expect_grep "$WORK/f.err" "checkpoint at step 20 failed .*training continues, the checkpoint of step 10 is kept \($mnt/ck/step-00000010\)"
expect_grep "$WORK/f.err" "the final checkpoint \(step 30\) could not be written \(above\); the newest good checkpoint is $mnt/ck/step-00000010 \(step 10\)"
expect_grep "$WORK/f.out" "step 30/30"
[ "$(ls -A "$mnt/ck")" = "step-00000010" ] || { ls -A "$mnt/ck"; fail "the full disk left more than step-10 behind"; }
"$T" eval "$mnt/ck" >"$WORK/f.eval" 2>&1 || { cat "$WORK/f.eval"; fail "step-10 does not load after the disk filled"; }
echo "disk full: training finished, exit 3 naming step-10, step-10 kept and verified, nothing partial left"
# an intermediate checkpoint that fails (its temporary directory is blocked) while the final one is
# written: training ends with exit 0
"$T" train "${common[@]}" --set steps=10 --set checkpoint_dir="$WORK/mid" >/dev/null 2>&1 || fail "training"
mkdir -p "$WORK/mid/.step-00000020.tmp/blocked"
"$T" train "${common[@]}" --set steps=30 --set checkpoint_interval=10 --set checkpoint_dir="$WORK/mid" --resume auto \
    >"$WORK/m.out" 2>"$WORK/m.err" || { cat "$WORK/m.out" "$WORK/m.err"; fail "only an intermediate checkpoint failed: must exit 0"; }
expect_grep "$WORK/m.err" "checkpoint at step 20 failed .*training continues"
expect_grep "$WORK/m.out" "checkpoint .*/step-00000030 "
echo "intermediate checkpoint failed, the final one written: exit 0"

# read-only: resume from the kept checkpoint, every new one fails, the old one stays
mount -o remount,ro "$mnt" || fail "cannot remount read-only"
"$T" train "${common[@]}" --set steps=20 --set checkpoint_interval=5 --set checkpoint_dir="$mnt/ck" --resume auto \
    >"$WORK/ro.out" 2>"$WORK/ro.err"
rc=$?
[ $rc = 3 ] || { cat "$WORK/ro.out" "$WORK/ro.err"; fail "a read-only checkpoint_dir: exit $rc, expected 3"; }
expect_grep "$WORK/ro.out" "resumed from .*step-00000010 at step 10"
expect_grep "$WORK/ro.err" "Read-only file system"
expect_grep "$WORK/ro.err" "checkpoint at step 15 failed .*the checkpoint of step 10 is kept"
expect_grep "$WORK/ro.err" "the final checkpoint \(step 20\) could not be written \(above\); the newest good checkpoint is $mnt/ck/step-00000010 \(step 10\)"
expect_grep "$WORK/ro.out" "step 20/20"
# no checkpoint at all: the message says so
"$T" train "${common[@]}" --set steps=5 --set checkpoint_dir="$mnt/new" >"$WORK/ro2.out" 2>"$WORK/ro2.err"
rc=$?
[ $rc = 3 ] || { cat "$WORK/ro2.out" "$WORK/ro2.err"; fail "no checkpoint could be written: exit $rc, expected 3"; }
expect_grep "$WORK/ro2.err" "the final checkpoint \(step 5\) could not be written \(above\), and no earlier one exists in $mnt/new"
"$T" eval "$mnt/ck" >"$WORK/ro.eval" 2>&1 || { cat "$WORK/ro.eval"; fail "step-10 does not load"; }
umount "$mnt"
echo "read-only: training finished, exit 3 naming step-10, step-10 intact"
