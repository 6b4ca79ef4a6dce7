#!/usr/bin/env bash
# Data parallel equivalence (local ranks): N ranks with per-rank batch b follow
# one process with batch N x b step for step (relative 1e-5 in f32), with
# bucket-by-bucket updates (mlp, SGD) and with clipping (gpt, AdamW); gradient
# accumulation k on N ranks equals one process with batch k x N x b; a
# checkpoint written by 4 ranks resumes on 4 and on 2 ranks and continues the
# uninterrupted run; f16/bf16 gradient compression trains; a model that
# differs between ranks is refused naming the parameter.
. "$(dirname "$0")/lib.sh"
T="$BIN/dtrain"
STEPS=${DDP_STEPS:-50}
[ "${QUICK:-0}" = 1 ] && STEPS=20
MLP=(--config configs/mlp.json --set mlp_sizes=[784,64,32,10] --set log_interval=1 --set eval_batches=1
     --set eval_interval=0 --set threads=1 --set bucket_mb=0.05)
GPT=(--config configs/gpt-mini.json --set layers=2 --set dim=64 --set heads=2 --set context=32 --set log_interval=1
     --set eval_batches=1 --set eval_interval=0 --set threads=1 --set bucket_mb=0.05 --set warmup_steps=5)

losses() { python3 -c "
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if 'loss' in r: print(r['step'], repr(r['loss']))" "$1"; }

# same_losses A B [FROM_STEP]: every step both logged, relative 1e-5
same_losses() {
    python3 - "$1" "$2" "${3:-1}" <<'PY' || fail "loss trajectories $1 and $2 differ"
import json, sys
def read(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r}
a, b, first = read(sys.argv[1]), read(sys.argv[2]), int(sys.argv[3])
steps = sorted(s for s in a if s >= first)
assert steps and all(s in b for s in steps), (sorted(a), sorted(b))
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in steps)
print(f"{sys.argv[2]}: {len(steps)} steps, worst relative loss difference {worst:.2e}")
sys.exit(0 if worst <= 1e-5 else 1)
PY
}

run_ranks() { # N out.jsonl args...
    local n=$1 out=$2; shift 2
    "$BIN/dtrun" -n "$n" "$T" train "$@" --set metrics_file="$out" >"$out.log" 2>&1 || { cat "$out.log"; fail "$n-rank run"; }
}

# The runs below are independent jobs (a reference and its ranks, the resume
# chain, ...), run 3 at a time (lib.sh's par; 2 under the sanitizers), each
# job's output in its own file, printed in order once all ended.  Nothing
# here depends on time.
b=8
# -- N ranks x b == 1 x N*b
mlp_pair() { # N
    local n=$1
    "$T" train "${MLP[@]}" --set steps=$STEPS --set batch_size=$((n * b)) --set metrics_file="$WORK/mlp1-$n.jsonl" >/dev/null || fail "mlp reference"
    run_ranks $n "$WORK/mlp$n.jsonl" "${MLP[@]}" --set steps=$STEPS --set batch_size=$b
    same_losses "$WORK/mlp1-$n.jsonl" "$WORK/mlp$n.jsonl"
}
gpt_pair() { # N
    local n=$1
    "$T" train "${GPT[@]}" --set steps=$STEPS --set batch_size=$((n * 2)) --set metrics_file="$WORK/gpt1-$n.jsonl" >/dev/null || fail "gpt reference"
    run_ranks $n "$WORK/gpt$n.jsonl" "${GPT[@]}" --set steps=$STEPS --set batch_size=2
    same_losses "$WORK/gpt1-$n.jsonl" "$WORK/gpt$n.jsonl"
}
# -- accumulation: k=3 micro-batches on 2 ranks == 1 x 3*2*b
mlp_accumulation() {
    "$T" train "${MLP[@]}" --set steps=$STEPS --set batch_size=$((3 * 2 * b)) --set metrics_file="$WORK/acc1.jsonl" >/dev/null || fail "accumulation reference"
    run_ranks 2 "$WORK/acc2.jsonl" "${MLP[@]}" --set steps=$STEPS --set batch_size=$b --set grad_accumulation=3
    same_losses "$WORK/acc1.jsonl" "$WORK/acc2.jsonl"
}
gpt_accumulation() {
    "$T" train "${GPT[@]}" --set steps=$STEPS --set batch_size=8 --set metrics_file="$WORK/gacc1.jsonl" >/dev/null || fail "gpt accumulation reference"
    run_ranks 2 "$WORK/gacc2.jsonl" "${GPT[@]}" --set steps=$STEPS --set batch_size=2 --set grad_accumulation=2
    same_losses "$WORK/gacc1.jsonl" "$WORK/gacc2.jsonl"
}
# -- resume: 4 ranks stop at step 10; resume on 4 ranks, and on 2 ranks with twice the batch
resume() {
    local half=$((STEPS / 2))
    run_ranks 4 "$WORK/full.jsonl" "${MLP[@]}" --set steps=$STEPS --set batch_size=$b
    run_ranks 4 "$WORK/first.jsonl" "${MLP[@]}" --set steps=$STEPS --set batch_size=$b \
        --set checkpoint_dir="$WORK/ck" --set checkpoint_interval=$half
    rm -rf "$WORK/ck/step-$(printf %08d $STEPS)" # as if the run had died after the checkpoint at half
    run_ranks 4 "$WORK/re4.jsonl" --resume "$WORK/ck"
    same_losses "$WORK/full.jsonl" "$WORK/re4.jsonl" $((half + 1))
    rm -rf "$WORK/ck/step-$(printf %08d $STEPS)" # the 4-rank resume checkpointed its end too
    run_ranks 2 "$WORK/re2.jsonl" --resume "$WORK/ck" --set batch_size=$((2 * b))
    same_losses "$WORK/full.jsonl" "$WORK/re2.jsonl" $((half + 1))
}
# -- compression: f16 and bf16 gradients train (compared with mlp2 once all ended)
compressed() { # f16|bf16
    run_ranks 2 "$WORK/c-$1.jsonl" "${MLP[@]}" --set steps=$STEPS --set batch_size=$b --set grad_compression=$1
    expect_grep "$WORK/c-$1.jsonl.log" "gradients as $1"
}
# -- a model that differs between ranks is refused, naming the parameter
mismatch() {
    "$BIN/dtrun" -n 2 sh -c 'if [ "$DT_RANK" = 1 ]; then s=[784,32,10]; else s=[784,64,10]; fi;
        exec '"$T"' train --config configs/mlp.json --set steps=2 --set mlp_sizes=$s' >"$WORK/mismatch" 2>&1 &&
        fail "mismatched models trained"
    expect_grep "$WORK/mismatch" "ranks 0 and 1 differ at parameter #0 \(this rank, [01], has 'fc1.weight' \[(32|64), 784\]\)"
}
jobs_=(resume "gpt_pair 4" "mlp_pair 4" "gpt_pair 2" gpt_accumulation "mlp_pair 3" "mlp_pair 2" mlp_accumulation
       "compressed f16" "compressed bf16" mismatch)
for j in "${!jobs_[@]}"; do
    # shellcheck disable=SC2086
    par "$WORK/job.$j" ${jobs_[$j]}
done
par_wait
for j in "${!jobs_[@]}"; do
    cat "$WORK/job.$j"
    par_ok "$WORK/job.$j" || fail "${jobs_[$j]} failed (above)"
done
expect_grep "$WORK/mlp4.jsonl.log" "batch 8 x 4 ranks x 1 accumulation step = 32"
expect_grep "$WORK/mlp4.jsonl" '"comm_s": [0-9.]+, "exposed_comm_s": [0-9.]+'
[ "$(grep -cE '^\[[1-3]\] .*step [0-9]+/' "$WORK/mlp4.jsonl.log")" = 0 ] || fail "ranks other than 0 printed progress"
for w in f16 bf16; do
    python3 - "$WORK/mlp2.jsonl" "$WORK/c-$w.jsonl" <<'PY' || fail "$w compression diverged"
import json, sys
last = lambda p: [r["loss"] for r in map(json.loads, open(p)) if "loss" in r][-5:]
a, b = sum(last(sys.argv[1])) / 5, sum(last(sys.argv[2])) / 5
print(f"mean loss of the last 5 steps: f32 {a:.4f}, compressed {b:.4f}")
sys.exit(0 if abs(a - b) / a < 0.05 else 1)
PY
done
echo "ddp equivalence: ok"
