#!/usr/bin/env bash
# The trainer: configuration errors name the key; an mlp learns Fashion-MNIST;
# a run resumed from a checkpoint follows the uninterrupted run's losses bit for
# bit; corrupt or truncated checkpoints are refused; stop_at_accuracy stops
# every rank early; a gpt trains on the
# fortunes text and generates from its checkpoint.
. "$(dirname "$0")/lib.sh"
T="$BIN/dtrain"
TS='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z' # the timestamp that starts progress lines
"$T" --help >"$WORK/help" || fail "--help"
expect_grep "$WORK/help" "grad_clip"
check_err() { # pattern args...
    local want=$1; shift
    "$T" "$@" >"$WORK/out" 2>"$WORK/err" && fail "dtrain $* succeeded"
    expect_grep "$WORK/err" "$want"
}
check_err "key 'bogus' is unknown" train --config configs/mlp.json --set bogus=1
check_err "key 'lr' = -1 is outside" train --config configs/mlp.json --set lr=-1
check_err "key 'optimizer' = \"lamb\" is not one of" train --config configs/mlp.json --set optimizer=lamb
check_err "key 'heads' must divide dim" train --config configs/gpt-mini.json --set heads=3
check_err "cannot read config /nonexistent.json" train --config /nonexistent.json
echo '{"steps": 10,}' >"$WORK/bad.json"
check_err "is not valid JSON" train --config "$WORK/bad.json"
check_err "/nonexistent/dir" train --config configs/mlp.json --set data_path=/nonexistent/dir
check_err "unknown command 'fly'" fly
# a value or a file is read whole: no number from the start of "10,000", no
# object from before junk after the closing brace, no second key in one --set
check_err "key 'steps' must be a number, not \"10,000\"" train --config configs/mlp.json --set steps=10,000
check_err "key 'lr' must be a number, not \"0.05O\"" train --config configs/mlp.json --set lr=0.05O
check_err "one --set per key" train --config configs/mlp.json --set "steps=1 micro_batches=2"
check_err "key 'steps' = 0 is outside \[1, " train --config configs/mlp.json --set steps=0
check_err "mesh dp=\? x tp=2: .*; start a multiple of tp x pp = 2 ranks \(e.g. dtrun -n 2 .*--set tp=1 --set pp=1 fits any" \
    train --config configs/gpt-mini.json --set tp=2
# a checkpoint_dir the run cannot write: its first error, not its last (parents are made)
check_err "checkpoint_dir /proc/nope: cannot create /proc/nope" train --config configs/mlp.json --set checkpoint_dir=/proc/nope
check_err "checkpoint_dir /dev/null is not a directory" train --config configs/mlp.json --set checkpoint_dir=/dev/null
# a metrics file that cannot be written (a full disk): said at once, status 3 at the end
"$T" train --config configs/mlp.json --set steps=10 --set log_interval=5 --set eval_interval=0 \
    --set metrics_file=/dev/full >"$WORK/full.out" 2>"$WORK/full.err"
rc=$?
[ $rc = 3 ] || { cat "$WORK/full.err"; fail "a metrics file on a full disk: exit $rc, expected 3"; }
expect_grep "$WORK/full.err" "cannot write metrics file /dev/full at step 5: No space left on device"
expect_grep "$WORK/full.err" "the metrics file /dev/full lacks the records from step 5 on"
check_err "key 'min_lr' = 1 is above lr = 0.001: the cosine would climb" train --config configs/gpt-mini.json --set min_lr=1
# dtrun's environment set by halves: refused, not a single process in silence
DT_RANK=3 check_err "DT_RANK is set but DT_WORLD_SIZE is not" train --config configs/mlp.json --set steps=1
# a FIFO or a device where a file is read: refused at once (an open of a FIFO blocked for a writer)
mkfifo "$WORK/fifo"
check_err "cannot read config .*fifo: .*fifo is a FIFO, not a regular file" train --config "$WORK/fifo"
check_err "fifo is a FIFO, not a regular file" train --config configs/gpt-mini.json --set data_path="$WORK/fifo"
{ cat configs/mlp.json; echo 'garbage here'; } >"$WORK/junk.json"
check_err "junk.json is not valid JSON" train --config "$WORK/junk.json"

# mlp: learns, logs, checkpoints
"$T" train --config configs/mlp.json --set steps=200 --set log_interval=50 --set eval_interval=0 \
    --set checkpoint_dir="$WORK/mlp" --set metrics_file="$WORK/mlp.jsonl" >"$WORK/mlp.out" || fail "mlp training"
expect_grep "$WORK/mlp.out" "^$TS step 200/200 \| loss [0-9.]+ \| lr 5.00e-02 \| grad norm [0-9.]+ \| [0-9]+ samples/s \| ETA"
acc=$(sed -n 's/^[0-9T:.Z-]* eval at step 200 | loss [0-9.]* | accuracy \([0-9.]*\)% | .*/\1/p' "$WORK/mlp.out")
python3 -c "import sys; sys.exit(0 if float('$acc') > 75 else 1)" || fail "mlp accuracy $acc% after 200 steps"
[ "$(grep -c '"loss"' "$WORK/mlp.jsonl")" = 4 ] || fail "expected 4 metrics lines"
[ -f "$WORK/mlp/step-00000200/manifest.json" ] || fail "no checkpoint manifest"
"$T" eval "$WORK/mlp" >"$WORK/eval.out" 2>&1 || fail "eval"
expect_grep "$WORK/eval.out" "eval: 10000 images, loss [0-9.]+, accuracy .* the whole split"

# stop_at_accuracy ends the run at the first evaluation that reaches it, on one rank and on two
"$T" train --config configs/mlp.json --set steps=400 --set eval_interval=25 --set eval_batches=8 \
    --set stop_at_accuracy=0.6 --set metrics_file="$WORK/stop.jsonl" >"$WORK/stop.out" || fail "stop_at_accuracy run"
expect_grep "$WORK/stop.out" "^$TS reached accuracy 60.00% at step [0-9]+: stopping"
[ "$(grep -c '"eval_accuracy"' "$WORK/stop.jsonl")" -lt 16 ] || fail "stop_at_accuracy did not stop early"
grep -q '"train_s"' "$WORK/stop.jsonl" || fail "evaluation metrics lack train_s"
"$BIN/dtrun" -n 2 "$T" train --config configs/mlp.json --set steps=400 --set eval_interval=25 --set eval_batches=8 \
    --set batch_size=64 --set stop_at_accuracy=0.6 >"$WORK/stop2.out" 2>&1 || { cat "$WORK/stop2.out"; fail "2-rank stop"; }
expect_grep "$WORK/stop2.out" "reached accuracy 60.00% at step [0-9]+: stopping"

# the cnn trains too
"$T" train --config configs/cnn.json --set steps=20 --set log_interval=10 --set eval_batches=4 >"$WORK/cnn.out" || fail "cnn training"
expect_grep "$WORK/cnn.out" "^$TS eval at step 20 \| loss [0-9.]+ \| accuracy"

# resume equivalence: 40 steps straight vs 20 + resume to 40 (dropout on, so the rng state matters too)
common=(--config configs/gpt-mini.json --set layers=1 --set dim=64 --set heads=2 --set context=32 --set batch_size=4
        --set dropout=0.1 --set log_interval=1 --set eval_interval=0 --set warmup_steps=5)
"$T" train "${common[@]}" --set steps=40 --set metrics_file="$WORK/a.jsonl" >/dev/null || fail "run A"
"$T" train "${common[@]}" --set steps=40 --set checkpoint_interval=20 --set checkpoint_dir="$WORK/b" \
    --set metrics_file="$WORK/b.jsonl" >/dev/null || fail "run B"
rm -rf "$WORK/b/step-00000040"
head -n 20 "$WORK/b.jsonl" | grep '"loss"' >"$WORK/b1.jsonl"
"$T" train "${common[@]}" --set steps=40 --set checkpoint_dir="$WORK/b" --set metrics_file="$WORK/c.jsonl" \
    --resume "$WORK/b" >"$WORK/c.out" || fail "resumed run"
expect_grep "$WORK/c.out" "resumed from .*step-00000020 at step 20"
losses() { grep '"loss"' "$1" | sed 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*/\1 \2/'; }
[ "$(losses "$WORK/a.jsonl" | wc -l)" = 40 ] && [ "$(losses "$WORK/c.jsonl" | wc -l)" = 20 ] || fail "missing metrics lines"
diff <(losses "$WORK/a.jsonl" | sed -n '21,40p') <(losses "$WORK/c.jsonl") >"$WORK/diff" ||
    { cat "$WORK/diff"; fail "the resumed run's losses differ from the uninterrupted run"; }
echo "resume: steps 21-40 match the uninterrupted run bit for bit"

# corrupt and truncated checkpoints are refused, naming the file
cp -r "$WORK/b/step-00000020" "$WORK/bad1"
printf 'X' | dd of="$WORK/bad1/model.safetensors" bs=1 seek=3000 conv=notrunc 2>/dev/null
check_err "model.safetensors has checksum [0-9a-f]+, the manifest says [0-9a-f]+ \(corrupt\)" train "${common[@]}" --resume "$WORK/bad1"
cp -r "$WORK/b/step-00000020" "$WORK/bad2"
truncate -s 100 "$WORK/bad2/optim_v.safetensors"
check_err "optim_v.safetensors has 100 bytes, the manifest says" eval "$WORK/bad2"
cp -r "$WORK/b/step-00000020" "$WORK/bad3"
rm "$WORK/bad3/manifest.json"
check_err "no manifest.json|no complete checkpoint" eval "$WORK/bad3"

# generate from the gpt checkpoint: the prompt, then the requested bytes
"$T" generate "$WORK/b" --prompt "Hello" --tokens 20 --temperature 0 >"$WORK/gen" 2>/dev/null || fail "generate"
[ "$(head -c 5 "$WORK/gen")" = "Hello" ] || fail "generate did not start with the prompt"
[ "$(wc -c <"$WORK/gen")" -ge 25 ] || fail "generate produced too little"
check_err "generate needs a gpt checkpoint" generate "$WORK/mlp"
echo ok
