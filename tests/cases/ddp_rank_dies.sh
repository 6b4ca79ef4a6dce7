#!/usr/bin/env bash
# A rank killed (kill -9) in the middle of data-parallel training: the job
# stops within 10 s with an error naming the dead rank, and every checkpoint
# left behind is complete (a manifest, and it loads); none is half-written.
. "$(dirname "$0")/lib.sh"
"$BIN/dtrun" -n 3 "$BIN/dtrain" train --config configs/mlp.json --set steps=100000 --set log_interval=20 \
    --set threads=1 --set checkpoint_dir="$WORK/ck" --set checkpoint_interval=25 >"$WORK/out" 2>"$WORK/err" &
job=$!
for _ in $(seq 300); do # wait for the first checkpoint, so that training is under way
    ls "$WORK/ck"/step-*/manifest.json >/dev/null 2>&1 && break
    sleep 0.1
done
victim=$(rank_pid $job 1)
[ -n "$victim" ] || { kill $job; fail "did not find rank 1 among dtrun's children"; }
killed=$(now)
kill -9 "$victim"
wait $job
rc=$?
took=$(elapsed "$killed")
[ $rc != 0 ] || fail "the job exited 0 after a rank died"
less_than "$took" 10 || fail "the job took $took s to stop"
expect_grep "$WORK/err" "dtrun: rank 1 \(pid $victim\) was killed by signal 9"
echo "job stopped $took s after the kill"
complete=0
for d in "$WORK/ck"/step-*; do
    if [ -f "$d/manifest.json" ]; then
        "$BIN/dtrain" eval "$d" >"$WORK/eval" 2>&1 || { cat "$WORK/eval"; fail "checkpoint $d does not load"; }
        complete=$((complete + 1))
    else # cut short by the stop: it must not count as a checkpoint
        "$BIN/dtrain" eval "$d" >"$WORK/eval" 2>&1 && fail "the incomplete $d loaded"
        echo "incomplete $d (no manifest) is refused"
    fi
done
[ $complete -ge 1 ] || fail "no complete checkpoint"
"$BIN/dtrain" eval "$WORK/ck" >"$WORK/eval" 2>&1 || { cat "$WORK/eval"; fail "the newest complete checkpoint does not load"; }
echo "$complete complete checkpoints, all load"
