#!/usr/bin/env bash
# A real Slurm cluster (Debian's slurmctld, a slurmd per namespace host,
# munge) runs examples/slurm/train.sbatch, as a user's sbatch would:
#   1. 4 nodes x 1 rank train data-parallel and the job completes; each rank
#      found the store on the first node at the port from the job id, with
#      the token from dtrain.token in the submit directory;
#   2. a node killed mid-job fails the job, and its output names the dead
#      rank and node;
#   3. the same with --requeue: Slurm runs the job again on the nodes that
#      are up and it resumes from its newest checkpoint to the end;
#   4. a rank killed on a node that stays up, under --requeue: the sbatch
#      script requeues the job itself (scontrol requeue) and it resumes.
# Installs slurm-wlm and munge when they are missing (root); skips (exit 77)
# without root, network namespaces or the packages.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces, Slurm daemons)"; exit 77; }
# Four minutes of this case are Slurm's own (daemons, requeue delays); the
# launch code it drives runs under the sanitizers in launch/slurm-and-openmpi-env.
if ldd "$BIN/dtrain" | grep -qE 'lib(a|t)san'; then
    echo "the plain build runs the Slurm cluster (its time is Slurm's; launch/slurm-and-openmpi-env covers the code under the sanitizers)"
    exit 77
fi
if ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    scripts/setup.sh --slurm >"$WORK/setup" 2>&1 || true
    command -v slurmd >/dev/null && command -v munged >/dev/null ||
        { tail -n 3 "$WORK/setup"; echo "Slurm is not installed and scripts/setup.sh --slurm could not install it"; exit 77; }
fi
S=scripts/slurm-cluster.sh
trap '$S down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
$S up 5 --dir "$WORK/cluster" || fail "the Slurm cluster did not come up"

# The submit directory: the job's output and checkpoints land here.
sub=$WORK/submit
mkdir -p "$sub"
repo=$PWD
export DTRAIN=$repo/$BIN/dtrain
# The ranks re-execute themselves for OpenBLAS as on a CPU OpenBLAS 0.3.21
# misjudges (sbatch and srun pass the environment on): step 4 still finds
# the rank by its name.
export DT_BLAS_REEXEC_FORCE=1
config=$repo/configs/mlp.json
common=(--set mlp_sizes=[784,64,10] --set batch_size=32 --set threads=1 --set log_interval=100
        --set eval_interval=0 --set eval_batches=4)
submit() { # sbatch options..., then -- train options: prints the job id
    local opts=()
    while [ "$1" != -- ]; do opts+=("$1"); shift; done
    shift
    (cd "$sub" && "$repo/$S" run sbatch --parsable "${opts[@]}" "$repo/examples/slurm/train.sbatch" "$config" \
        "${common[@]}" "$@") | tail -n 1
}
field() { $S run scontrol show job "$1" -o | tr ' ' '\n' | sed -n "s/^$2=//p"; }
wait_done() { # JOB SECONDS: until the job is neither pending nor running (nor requeued)
    local i
    for ((i = 0; i < $2 * 2; i++)); do
        case $(field "$1" JobState) in
            PENDING|RUNNING|CONFIGURING|COMPLETING|REQUEUED|REQUEUE_FED|RESIZING) sleep 0.5 ;;
            *) return 0 ;;
        esac
    done
    cat "$sub/dtrain-$1.out"; fail "job $1 still $(field "$1" JobState) after $2 s"
}
wait_log() { # JOB REGEX SECONDS
    local i
    for ((i = 0; i < $3 * 5; i++)); do
        grep -qE -- "$2" "$sub/dtrain-$1.out" 2>/dev/null && return 0
        sleep 0.2
    done
    cat "$sub/dtrain-$1.out" 2>/dev/null; fail "job $1 did not log /$2/ within $3 s"
}
wait_idle() { # N: until N nodes are idle
    local i
    for ((i = 0; i < 120; i++)); do
        [ "$($S run sinfo -h -t idle -o %D)" = "$1" ] && return 0
        sleep 0.5
    done
    $S status; fail "$1 nodes did not become idle"
}

# ---- 1. a job that trains across 4 nodes ----
od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$sub/dtrain.token"
chmod 600 "$sub/dtrain.token"
job=$(unset DT_JOB_TOKEN DT_TOKEN_FILE; export DT_DEBUG=info; submit -- --set steps=300)
[[ "$job" =~ ^[0-9]+$ ]] || fail "sbatch printed '$job', not a job id"
wait_done "$job" 120
out=$sub/dtrain-$job.out
[ "$(field "$job" JobState)" = COMPLETED ] || { cat "$out"; fail "job $job ended $(field "$job" JobState)"; }
expect_grep "$out" "train.sbatch: job $job run 1 on n\[0-3\] \(4 ranks\)"
expect_grep "$out" "batch 32 x 4 ranks"
expect_grep "$out" "step 300/300"
expect_grep "$out" "train.sbatch: job $job finished"
# Every rank joined from its own node, found the store on n0 at the job's port.
port=$((10000 + job % 2000 * 10))
for r in 0 1 2 3; do
    expect_grep "$out" " n$r:[0-9]+:$r INFO rank $r of 4 joined \(launcher slurm, store n0:$port\)"
done
# The token came from the submit directory's file, not from the script.
expect_grep "$out" " n0:[0-9]+:0 INFO DT_JOB_TOKEN=\(unset\)"
echo "job $job: 4 ranks on n0..n3 trained 300 steps, store n0:$port"

# ---- 2. a node killed mid-job: the job fails and says why ----
job=$(submit -- --set steps=200000 --set checkpoint_interval=200)
out=$sub/dtrain-$job.out
wait_log "$job" "checkpoint .*step-00000200" 120
$S kill-node 2
wait_done "$job" 120
state=$(field "$job" JobState)
[ "$state" = NODE_FAIL ] || [ "$state" = FAILED ] || { cat "$out"; fail "job $job ended $state after n2 died"; }
dead_named() { # OUT RANK IP: the survivors' errors name the dead rank and its address
    expect_grep "$1" "rank $2 \($3:[0-9]+\) closed the connection|lost the connection to rank $2 \($3:[0-9]+\)"
}
dead_named "$out" 2 '10\.78\.0\.3'
expect_grep "$out" "Node failure on n2|n2: task 2"
echo "job $job: $state after n2 was killed"
$S start-node 2
wait_idle 5

# ---- 3. the same with --requeue: resumes from the checkpoint elsewhere ----
# (about 900 steps a second here: the kill lands well before the end)
job=$(submit --requeue -- --set steps=8000 --set checkpoint_interval=1000)
out=$sub/dtrain-$job.out
wait_log "$job" "checkpoint .*step-00001000" 120
grep -q "step 8000/8000" "$out" && fail "job $job finished before its node could be killed: give it more steps"
$S kill-node 1
wait_done "$job" 300
[ "$(field "$job" JobState)" = COMPLETED ] || { cat "$out"; fail "requeued job $job ended $(field "$job" JobState)"; }
[ "$(field "$job" Restarts)" = 1 ] || { cat "$out"; fail "job $job restarted $(field "$job" Restarts) times, expected 1"; }
dead_named "$out" 1 '10\.78\.0\.2'
expect_grep "$out" "train.sbatch: job $job run 2 on n\[0,2-4\]"
expect_grep "$out" "resumed from .*/ckpt-$job/step-0000[1-7]000 at step [1-7]000"
expect_grep "$out" "step 8000/8000"
expect_grep "$out" "train.sbatch: job $job finished"
echo "job $job: requeued after n1 died, $(grep -o 'resumed from .* at step [0-9]*' "$out"), finished"

# ---- 4. a rank that crashes while its node stays up, under --requeue: Slurm
# sees only a failed step, so train.sbatch requeues the job itself ----
job=$(submit --requeue -- --set steps=8000 --set checkpoint_interval=1000)
out=$sub/dtrain-$job.out
wait_log "$job" "checkpoint .*step-00001000" 120
# n1 is down: the job runs on n[0,2-4], rank 3 on n4.
victim=""
for p in $(ip netns pids dts4); do [ "$(cat "/proc/$p/comm" 2>/dev/null)" = dtrain ] && victim=$p; done
[ -n "$victim" ] || { cat "$out"; fail "no dtrain process on n4"; }
tr '\0' '\n' <"/proc/$victim/environ" | grep -q "^OPENBLAS_CORETYPE=" ||
    fail "the rank on n4 did not re-execute itself (DT_BLAS_REEXEC_FORCE=1)"
kill -9 "$victim"
wait_done "$job" 300
[ "$(field "$job" JobState)" = COMPLETED ] || { cat "$out"; fail "job $job ended $(field "$job" JobState) after its rank crashed"; }
[ "$(field "$job" Restarts)" = 1 ] || { cat "$out"; fail "job $job restarted $(field "$job" Restarts) times, expected 1"; }
expect_grep "$out" "n4: task 3: Killed"
expect_grep "$out" "train.sbatch: requeueing job $job \(restart 1 of 3\)"
expect_grep "$out" "train.sbatch: job $job run 2 on n\[0,2-4\]"
expect_grep "$out" "resumed from .*/ckpt-$job/step-0000[1-7]000 at step [1-7]000"
expect_grep "$out" "train.sbatch: job $job finished"
echo "job $job: rank 3 killed on n4, the script requeued it, $(grep -o 'resumed from .* at step [0-9]*' "$out"), finished"
echo ok
