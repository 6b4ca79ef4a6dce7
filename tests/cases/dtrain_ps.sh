#!/usr/bin/env bash
# The trainer with a parameter server (the servers key, dtrun --servers):
#   - BSP with 2 workers and 1 server (dtrun --servers 1), and with 2
#     servers (the servers key), against allreduce data parallelism on 2
#     ranks: the same losses (GPT, dropout 0.1, AdamW with decay groups, 2
#     micro-batches, clipping);
#   - a BSP checkpoint taken from the servers resumed by the parameter
#     server (1 server, then 2) and by allreduce data parallelism, and an
#     allreduce checkpoint resumed by the parameter server: each continues
#     the uninterrupted run's losses;
#   - SSP with a straggler: the servers' clock log never shows a worker more
#     than `staleness` steps ahead of the slowest, and the bound is reached;
#     ASP trains;
#   - refusals: no worker left, grad_clip under asp, servers with zero_stage;
#   - a worker killed during BSP: the job stops and names it; a worker killed
#     during SSP under dtrun --max-restarts 1: the job restarts, resumes from
#     the servers' newest checkpoint and finishes.
. "$(dirname "$0")/lib.sh"
model=(--config configs/gpt-mini.json --set layers=2 --set dim=64 --set context=32 --set threads=1)
base=("${model[@]}" --set log_interval=1 --set eval_interval=8 --set eval_batches=2 --set warmup_steps=2
      --set batch_size=4 --set micro_batches=2 --set dropout=0.1 --set weight_decay=0.1)
b8=(--set steps=8 --set grad_clip=1)
job() { # out ranks dtrun-options... -- settings...
    local out=$1 n=$2 opts=()
    shift 2
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1"); shift; done
    shift
    "$BIN/dtrun" -n "$n" "${opts[@]}" "$BIN/dtrain" train "${base[@]}" "$@" --set metrics_file="$out.jsonl" >"$out" 2>&1
}
par "$WORK/ddp" job "$WORK/ddp" 2 -- "${b8[@]}" --set checkpoint_dir="$WORK/ck-ddp" --set checkpoint_interval=4 --set checkpoint_keep=0
par "$WORK/ps1" job "$WORK/ps1" 3 --servers 1 -- "${b8[@]}" --set checkpoint_dir="$WORK/ck-ps" --set checkpoint_interval=4 \
    --set checkpoint_keep=0
par_wait
par "$WORK/ps2" job "$WORK/ps2" 4 -- "${b8[@]}" --set servers=2
par_wait
for r in ddp ps1 ps2; do par_ok "$WORK/$r" || { cat "$WORK/$r"; fail "$r failed"; }; done
expect_grep "$WORK/ps1" "parameter server: 1 server, sync bsp"
expect_grep "$WORK/ps1" "parameter server 0 of 1: parameters \[0, [0-9]+\) of [0-9]+, adamw, sync bsp, for 2 workers"
expect_grep "$WORK/ps2" "parameter server 1 of 2: parameters"
expect_grep "$WORK/ps1" "parameter server: rank 0 sent [0-9.]+ MB and received [0-9.]+ MB per step"
compare_losses "$WORK/ddp.jsonl" "$WORK/ps1.jsonl" "BSP (1 server) against allreduce on 2 ranks"
compare_losses "$WORK/ddp.jsonl" "$WORK/ps2.jsonl" "BSP (2 servers) against allreduce on 2 ranks"

# -- checkpoints: the servers' state through worker 0, resumed either way
resume() { # out ranks checkpoint dtrun-options... -- settings...
    local out=$1 n=$2 ck=$3 opts=()
    shift 3
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1"); shift; done
    shift
    "$BIN/dtrun" -n "$n" "${opts[@]}" "$BIN/dtrain" train "${base[@]}" "$@" --set metrics_file="$out.jsonl" \
        --resume "$ck" >"$out" 2>&1
}
par "$WORK/r-ps-ps" resume "$WORK/r-ps-ps" 3 "$WORK/ck-ps/step-00000004" --servers 1 -- "${b8[@]}"
par "$WORK/r-ps-ps2" resume "$WORK/r-ps-ps2" 4 "$WORK/ck-ps/step-00000004" --servers 2 -- "${b8[@]}"
par_wait
par "$WORK/r-ps-ddp" resume "$WORK/r-ps-ddp" 2 "$WORK/ck-ps/step-00000004" -- "${b8[@]}"
par "$WORK/r-ddp-ps" resume "$WORK/r-ddp-ps" 3 "$WORK/ck-ddp/step-00000004" --servers 1 -- "${b8[@]}"
par_wait
for r in r-ps-ps r-ps-ps2 r-ps-ddp r-ddp-ps; do
    par_ok "$WORK/$r" || { cat "$WORK/$r"; fail "resume $r failed"; }
    expect_grep "$WORK/$r" "resumed from .*step-00000004 at step 4"
done
compare_losses "$WORK/ps1.jsonl" "$WORK/r-ps-ps.jsonl" "the servers' checkpoint resumed by 1 server" 5
compare_losses "$WORK/ps1.jsonl" "$WORK/r-ps-ps2.jsonl" "the servers' checkpoint resumed by 2 servers" 5
compare_losses "$WORK/ddp.jsonl" "$WORK/r-ps-ddp.jsonl" "the servers' checkpoint resumed by allreduce" 5
compare_losses "$WORK/ddp.jsonl" "$WORK/r-ddp-ps.jsonl" "an allreduce checkpoint resumed by the servers" 5

# -- SSP with a straggler (rank 2 sleeps up to 40 ms a step), and ASP
ssp=(--set steps=16 --set grad_clip=0 --set sync=ssp --set staleness=1 --set straggler_rank=2 --set straggler_ms=40
     --set ps_clock_log="$WORK/clock.log")
job "$WORK/ssp" 4 --servers 1 -- "${ssp[@]}" || { cat "$WORK/ssp"; fail "ssp failed"; }
expect_grep "$WORK/ssp" "sync ssp \(staleness 1\)"
python3 - "$WORK/clock.log" <<'PY' || fail "SSP let a worker run more than 1 step ahead of the slowest"
import re, sys
rows = [tuple(map(float, re.findall(r"[-0-9.]+", l))) for l in open(sys.argv[1])]
over = [r for r in rows if r[1] - r[2] > 1]
at = [r for r in rows if r[0] != 2 and r[1] - r[2] == 1]
print(f"ssp staleness 1: {len(rows)} pulls, {len(over)} more than 1 step ahead, {len(at)} at the bound")
sys.exit(0 if rows and not over and at else 1)
PY
job "$WORK/asp" 3 --servers 1 -- --set steps=8 --set grad_clip=0 --set sync=asp || { cat "$WORK/asp"; fail "asp failed"; }
expect_grep "$WORK/asp" "step 8/8"

# -- refusals
job "$WORK/bad" 2 -- "${b8[@]}" --set servers=2 && fail "2 servers of 2 ranks accepted"
expect_grep "$WORK/bad" "2 servers among 2 ranks leaves 0 workers"
job "$WORK/bad" 2 --servers 2 -- "${b8[@]}" && fail "dtrun --servers 2 of 2 ranks accepted"
expect_grep "$WORK/bad" "dtrun: --servers 2 leaves no worker among the job's 2 ranks"
job "$WORK/bad" 3 --servers 1 -- "${b8[@]}" --set sync=asp && fail "grad_clip with asp accepted"
expect_grep "$WORK/bad" "key 'grad_clip' needs sync bsp"
job "$WORK/bad" 3 -- "${b8[@]}" --set servers=1 --set zero_stage=1 && fail "servers with zero_stage accepted"
expect_grep "$WORK/bad" "key 'servers' > 0 \(a parameter server\) replaces data parallelism by allreduce"
job "$WORK/bad" 3 --servers 1 -- "${b8[@]}" --set sync=bulk && fail "sync=bulk accepted"
expect_grep "$WORK/bad" "sync"

# -- a worker killed during BSP: the job stops, naming it
kill_rank_in_training 1 "$WORK/kill" "$BIN/dtrun" -n 3 --servers 1 "$BIN/dtrain" train "${model[@]}" --set steps=100000 \
    --set batch_size=4 --set log_interval=5

# -- SSP waits for the restart: a worker killed under --max-restarts, the job resumes and finishes
"$BIN/dtrun" -n 3 --servers 1 --max-restarts 1 "$BIN/dtrain" train "${model[@]}" --set steps=300 --set batch_size=4 \
    --set log_interval=5 --set grad_clip=0 --set sync=ssp --set staleness=2 --set checkpoint_dir="$WORK/ck-restart" \
    --set checkpoint_interval=5 >"$WORK/restart" 2>&1 &
job=$!
for _ in $(seq 300); do grep -q "step 10/" "$WORK/restart" && break; sleep 0.1; done
victim=$(rank_pid $job 1)
[ -n "$victim" ] || { kill $job; cat "$WORK/restart"; fail "did not find worker 1 among dtrun's children"; }
kill -9 "$victim"
wait $job || { cat "$WORK/restart"; fail "the job did not finish after the restart"; }
expect_grep "$WORK/restart" "dtrun: restart 1 of 1: failure: rank 1 \(pid $victim\) was killed by signal 9"
expect_grep "$WORK/restart" "resumed from .*ck-restart/step-[0-9]+ at step [0-9]+"
expect_grep "$WORK/restart" "step 300/300"
grep "resumed from" "$WORK/restart" | head -1
echo ok
