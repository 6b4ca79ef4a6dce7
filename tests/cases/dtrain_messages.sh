#!/usr/bin/env bash
# Issue 29, messages and threads: a key given twice (config file: both lines;
# --set: both arguments), vocab too small for byte text, an mlp width out of
# range, DT_DEBUG and DT_THREADS with bad values are errors naming the value;
# dtrun --node-rank names the real values; --config=FILE works (getopt_long)
# and --help lists every option; threads come from the threads key, else
# DT_THREADS, else the cores divided by the local ranks, with one warning when
# the ranks oversubscribe the cores; log and progress lines carry a UTC
# timestamp; evaluations say what they covered.
. "$(dirname "$0")/lib.sh"
T="$BIN/dtrain"
TS='^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z '
check_err() { # code pattern args...
    local code=$1 want=$2; shift 2
    "$T" "$@" >"$WORK/out" 2>"$WORK/err"
    local rc=$?
    [ $rc = "$code" ] || { cat "$WORK/out" "$WORK/err"; fail "dtrain $* exited $rc, expected $code"; }
    expect_grep "$WORK/err" "$want"
}
MLP=(--config configs/mlp.json --set 'mlp_sizes=[784,16,10]' --set steps=2 --set log_interval=1 --set eval_batches=2)

# a key given twice
printf '{"model": "mlp",\n "steps": 5,\n "lr": 0.1,\n "steps": 6}\n' >"$WORK/dup.json"
check_err 2 "dup.json: key 'steps' is given twice, on lines 2 and 4" train --config "$WORK/dup.json"
check_err 2 "key 'lr' is given twice \(--set 1: 'lr=0.1' and --set 3: 'lr=0.2'\)" train --config configs/mlp.json \
    --set lr=0.1 --set steps=3 --set lr=0.2
# vocab too small for byte text: named at start, with the minimum
check_err 2 "key 'vocab' = 10 is too small for .*: its bytes are the tokens and go up to [0-9]+, so vocab must be at least [0-9]+" \
    train --config configs/gpt-mini.json --set vocab=10 --set steps=1 --set layers=1 --set dim=32 --set heads=2
# an mlp width out of range: the value and the limit
check_err 2 "key 'mlp_sizes' entry 2 = 4000000000 is out of range \[1, 1048576\]" train --config configs/mlp.json \
    --set 'mlp_sizes=[784,4000000000,10]'
# bad environment values: named, with what is accepted
DT_DEBUG=bogus check_err 2 "DT_DEBUG=bogus: 'bogus' is not a known word \(accepted: warn, info, trace, all, coll" train "${MLP[@]}"
DT_DEBUG=info,bogus check_err 2 "DT_DEBUG=info,bogus: 'bogus'" eval /nonexistent
DT_THREADS=abc check_err 2 "DT_THREADS: 'abc' is not an integer" train "${MLP[@]}"
DT_THREADS=-1 check_err 2 "DT_THREADS: -1 is out of range \[0, 256\]" train "${MLP[@]}"
DT_RESTART=x check_err 2 "DT_RESTART: 'x' is not an integer" train "${MLP[@]}"
# dtrun --node-rank: the values given
"$BIN/dtrun" --nnodes 4 --node-rank 9 --master 127.0.0.1:1 -n 1 true 2>"$WORK/err" && fail "dtrun accepted --node-rank 9 of 4"
expect_grep "$WORK/err" "--node-rank must be below --nnodes \(got --node-rank 9, --nnodes 4\)"

# getopt_long: --opt=VALUE, the command after the options, --help lists every option
"$T" train --config=configs/mlp.json --set='mlp_sizes=[784,16,10]' --set=steps=2 --set=eval_batches=1 >"$WORK/eq.out" ||
    fail "dtrain train --config=FILE"
expect_grep "$WORK/eq.out" "step 2/2"
"$T" --config configs/mlp.json --set 'mlp_sizes=[784,16,10]' --set steps=1 --set eval_batches=1 train >"$WORK/eq2.out" ||
    fail "options before the command"
"$T" --help >"$WORK/help" || fail "--help"
for o in --config --set --resume --overwrite --prompt --tokens --temperature --seed --help --version; do
    expect_grep "$WORK/help" "^ .*$o"
done
check_err 2 "unexpected option '--bogus'" train --bogus
check_err 2 "--prompt is an option of generate" train "${MLP[@]}" --prompt x
check_err 2 "--resume needs a value" train --resume

# threads: the key, else DT_THREADS, else the cores / the local ranks
DT_THREADS=1 "$T" train "${MLP[@]}" >"$WORK/t1.out" 2>&1 || { cat "$WORK/t1.out"; fail "DT_THREADS=1"; }
expect_grep "$WORK/t1.out" "1 thread per rank \(from DT_THREADS\)"
# the kernels OpenBLAS runs, read back from it (bench/train/run.sh parses this line)
expect_grep "$WORK/t1.out" "blas: core [A-Za-z0-9_]+, OpenBLAS threads 1, OPENBLAS_CORETYPE [^,]+, config "
DT_THREADS=1 "$T" train "${MLP[@]}" --set threads=2 >"$WORK/t2.out" 2>&1 || fail "threads=2"
expect_grep "$WORK/t2.out" "2 threads per rank \(from the threads key\)"
cores=$(nproc)
per=$((cores / 4)); [ $per -ge 1 ] || per=1
"$BIN/dtrun" -n 4 "$T" train "${MLP[@]}" --set batch_size=16 >"$WORK/t4.out" 2>&1 || { cat "$WORK/t4.out"; fail "4 ranks"; }
expect_grep "$WORK/t4.out" "^\[0\] .* $per threads? per rank \(from the cores / local ranks\)"
warnings=$(grep -c "oversubscribed" "$WORK/t4.out")
if [ $((per * 4)) -gt "$cores" ]; then
    [ "$warnings" = 1 ] || { cat "$WORK/t4.out"; fail "expected one oversubscription warning, got $warnings"; }
    expect_grep "$WORK/t4.out" "4 local ranks x $per compute threads? = $((per * 4)) threads on $cores cores \(oversubscribed"
else
    [ "$warnings" = 0 ] || { cat "$WORK/t4.out"; fail "an oversubscription warning with $per threads x 4 ranks on $cores cores"; }
fi
echo "dtrun -n 4 on $cores cores: $per thread(s) per rank, $warnings warning(s)"
# the same 4 ranks started as srun starts them (no DT_* variables): Slurm's
# count of tasks on this node divides the cores, and one rank warns
port=$(free_port) pids=()
for r in 0 1 2 3; do
    env -u DT_RANK -u DT_WORLD_SIZE -u DT_LOCAL_RANK -u DT_LOCAL_WORLD_SIZE -u DT_THREADS SLURM_PROCID=$r SLURM_NTASKS=4 \
        SLURM_LOCALID=$r SLURM_NODEID=0 SLURM_STEP_TASKS_PER_NODE=4 SLURM_STEP_NODELIST=localhost SLURM_JOB_ID=1 \
        DT_MASTER_PORT=$port DT_JOB_TOKEN=tok-$port "$T" train "${MLP[@]}" --set batch_size=16 >"$WORK/s4.$r" 2>&1 &
    pids+=($!)
done
for r in 0 1 2 3; do wait ${pids[$r]} || { cat "$WORK/s4.$r"; fail "srun-style rank $r"; }; done
cat "$WORK"/s4.* >"$WORK/s4.out"
expect_grep "$WORK/s4.0" " $per threads? per rank \(from the cores / local ranks\)"
[ "$(grep -c "oversubscribed" "$WORK/s4.out")" = "$warnings" ] || { cat "$WORK/s4.out"; fail "srun-style: expected $warnings oversubscription warning(s)"; }

# timestamps: progress lines and library log lines
"$T" train "${MLP[@]}" >"$WORK/ts.out" 2>&1 || fail "train"
expect_grep "$WORK/ts.out" "${TS}step 2/2 \| loss"
expect_grep "$WORK/ts.out" "${TS}training mlp"
DT_DEBUG=info "$T" train "${MLP[@]}" >"$WORK/info.out" 2>&1 || fail "DT_DEBUG=info train"
expect_grep "$WORK/info.out" "${TS}dtrain [^ ]+:[0-9]+:-?[0-9]+ INFO DT_THREADS="

# evaluations say what they covered: training's eval_batches, eval's whole split
"$T" train "${MLP[@]}" --set checkpoint_dir="$WORK/ck" >"$WORK/ev.out" 2>&1 || fail "train"
expect_grep "$WORK/ev.out" "eval at step 2 \| loss [0-9.]+ \| accuracy [0-9.]+% \| 2 batches of 128: 256 of the 10000 images of the t10k split \(eval_batches 2\)"
"$T" eval "$WORK/ck" >"$WORK/ev2.out" 2>&1 || fail "eval"
expect_grep "$WORK/ev2.out" "eval: 10000 images, loss [0-9.]+, accuracy [0-9.]+% \| the whole split, 79 batches of 128: 10000 of the 10000 images"
echo ok
