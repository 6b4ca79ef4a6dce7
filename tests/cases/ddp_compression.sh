#!/usr/bin/env bash
# The gradient compressors through the trainer (issue 51; the compressor
# itself: tests/test_compress.c):
#  - resume bitwise: a 2-rank run with powersgd (and one with topk) killed
#    (rank 1, -9) once its checkpoint of step 12 is complete, resumed from
#    it, gives the uninterrupted run's losses bit for bit; each rank's state
#    file is in the checkpoint directory; without them the resume differs
#    (the state matters);
#  - a resume on 4 ranks of the 2-rank checkpoint trains (the error starts
#    at zero, Q and the steps kept);
#  - accumulation: topk with fraction 1 and grad_accumulation 2 on 2 ranks
#    follows one process with the global batch (1e-5): the mean over
#    micro-batches is what is compressed;
#  - a short convergence run: mlp 150 steps on 2 ranks, f32, powersgd rank 4
#    and topk 0.1: the loss falls, and the compressed runs' last 20 steps'
#    mean loss is within 10% of f32's;
#  - refusals name the key and the value: zero_stage, servers, tp, pp, a
#    fraction or rank out of range.
. "$(dirname "$0")/lib.sh"
T="$BIN/dtrain"
STEPS=120
MLP=(--config configs/mlp.json --set mlp_sizes=[784,64,32,10] --set log_interval=1 --set eval_batches=1
     --set eval_interval=0 --set threads=1 --set bucket_mb=0.05)

run_ranks() { # N out.jsonl args...
    local n=$1 out=$2; shift 2
    "$BIN/dtrun" -n "$n" "$T" train "$@" --set metrics_file="$out" >"$out.log" 2>&1 || { cat "$out.log"; fail "$n-rank run"; }
}
identical() { # A B FROM: every loss B logged from FROM on equals A's, bit for bit
    python3 - "$1" "$2" "$3" <<'PY' || fail "$2 differs from $1"
import json, sys
r = lambda p: {x["step"]: x["loss"] for x in map(json.loads, open(p)) if "loss" in x}
a, b, first = r(sys.argv[1]), r(sys.argv[2]), int(sys.argv[3])
steps = [s for s in sorted(b) if s >= first]
assert steps and all(s in a for s in steps), (sorted(a), sorted(b))
bad = [(s, a[s], b[s]) for s in steps if a[s] != b[s]]
print(f"{sys.argv[2]}: {len(steps)} steps, {len(bad)} differ {bad[:2]}")
sys.exit(1 if bad else 0)
PY
}

resume() { # powersgd|topk
    local c=$1 ck="$WORK/ck-$1" job victim
    local run=("${MLP[@]}" --set steps=$STEPS --set batch_size=8 --set grad_compression=$c --set compress_start_step=3)
    run_ranks 2 "$WORK/full-$c.jsonl" "${run[@]}"
    # rank 1 killed (-9) once the checkpoint of step 12 is complete
    "$BIN/dtrun" -n 2 "$T" train "${run[@]}" --set checkpoint_dir="$ck" --set checkpoint_interval=12 \
        --set checkpoint_keep=0 --set metrics_file="$WORK/killed-$c.jsonl" >"$WORK/killed-$c.log" 2>&1 &
    job=$!
    for _ in $(seq 600); do [ -e "$ck/step-00000012/manifest.json" ] && break; sleep 0.05; done
    victim=$(rank_pid $job 1)
    [ -n "$victim" ] && kill -9 "$victim"
    wait $job && fail "the $c run was not killed (it ended first)"
    expect_grep "$WORK/killed-$c.log" "rank 1 \(pid $victim\) was killed by signal 9"
    ls "$ck/compression/step-00000012-rank-00000-of-00002.bin" "$ck/compression/step-00000012-rank-00001-of-00002.bin" ||
        fail "the compressor state files of step 12 are missing"
    run_ranks 2 "$WORK/re-$c.jsonl" --resume "$ck/step-00000012" --set checkpoint_dir=
    identical "$WORK/full-$c.jsonl" "$WORK/re-$c.jsonl" 13
    # without the state files the resume is another run (the state matters)
    mkdir "$ck-bare" && cp -r "$ck/step-00000012" "$ck-bare/"
    run_ranks 2 "$WORK/bare-$c.jsonl" --resume "$ck-bare/step-00000012" --set checkpoint_dir=
    (identical "$WORK/full-$c.jsonl" "$WORK/bare-$c.jsonl" 13) >/dev/null 2>&1 &&
        fail "a resume without the state files matched"
    # on 4 ranks (twice the ranks, half the batch): trains
    run_ranks 4 "$WORK/re4-$c.jsonl" --resume "$ck/step-00000012" --set checkpoint_dir= --set batch_size=4
    echo "resume $c: killed at step $(grep -c '"loss"' "$WORK/killed-$c.jsonl" || true) of $STEPS, ok"
}

accumulation() {
    "$T" train "${MLP[@]}" --set steps=40 --set batch_size=32 --set metrics_file="$WORK/acc1.jsonl" >/dev/null ||
        fail "accumulation reference"
    run_ranks 2 "$WORK/acc2.jsonl" "${MLP[@]}" --set steps=40 --set batch_size=8 --set grad_accumulation=2 \
        --set grad_compression=topk --set topk_fraction=1 --set compress_start_step=0
    compare_losses "$WORK/acc1.jsonl" "$WORK/acc2.jsonl" "topk 1.0 with accumulation" 1 loss
}

convergence() {
    for c in none powersgd topk; do
        run_ranks 2 "$WORK/conv-$c.jsonl" "${MLP[@]}" --set steps=150 --set batch_size=8 --set grad_compression=$c \
            $([ $c = topk ] && echo --set topk_fraction=0.1)
    done
    python3 - "$WORK"/conv-{none,powersgd,topk}.jsonl <<'PY' || fail "a compressor did not converge like f32"
import json, sys
def losses(p):
    return [r["loss"] for r in map(json.loads, open(p)) if "loss" in r]
ref = losses(sys.argv[1])
ok = True
for p in sys.argv[1:]:
    l = losses(p)
    first, last = sum(l[:20]) / 20, sum(l[-20:]) / 20
    rel = (last - sum(ref[-20:]) / 20) / (sum(ref[-20:]) / 20)
    print(f"{p.split('/')[-1]}: mean loss of the first 20 steps {first:.4f}, of the last 20 {last:.4f} ({rel:+.1%} of f32)")
    ok = ok and last < 0.7 * first and rel < 0.10
sys.exit(0 if ok else 1)
PY
}

refusals() {
    local log="$WORK/refused"
    refused() { # expected-text sets...
        local want=$1; shift
        local args=()
        for kv in "$@"; do args+=(--set "$kv"); done
        "$T" train --config configs/mlp.json --set steps=1 "${args[@]}" >"$log" 2>&1 && fail "accepted: $*"
        expect_grep "$log" "$want"
    }
    refused "grad_compression powersgd with zero_stage 1" grad_compression=powersgd zero_stage=1
    refused "grad_compression topk with servers 1" grad_compression=topk servers=1
    refused "key 'grad_compression' = topk is built for plain data parallelism \(tp 1, pp 1\): grad_compression topk with tp 2" \
        grad_compression=topk tp=2
    refused "grad_compression powersgd with pp 2" grad_compression=powersgd pp=2
    refused "key 'topk_fraction' = 0 must be in \(0, 1\]" grad_compression=topk topk_fraction=0
    refused "key 'topk_fraction' = 1.5 is outside \[0, 1\]" grad_compression=topk topk_fraction=1.5
    refused "key 'powersgd_rank' = 0 is outside \[1, 1024\]" grad_compression=powersgd powersgd_rank=0
    refused "key 'powersgd_rank' = 2000 is outside \[1, 1024\]" grad_compression=powersgd powersgd_rank=2000
    echo "refusals: ok"
}

jobs_=("resume powersgd" "resume topk" accumulation convergence refusals)
for j in "${!jobs_[@]}"; do
    # shellcheck disable=SC2086
    par "$WORK/job.$j" ${jobs_[$j]}
done
par_wait
for j in "${!jobs_[@]}"; do
    cat "$WORK/job.$j"
    par_ok "$WORK/job.$j" || fail "${jobs_[$j]} failed (above)"
done
echo "ddp compression: ok"
