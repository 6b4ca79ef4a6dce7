#!/usr/bin/env bash
# Ranks started without dtrun, as mpirun or srun would: rank and size come
# from OMPI_COMM_WORLD_* / SLURM_* and rank 0 serves the store.
. "$(dirname "$0")/lib.sh"
launch() { # style n
    local style=$1 n=$2 port pids=() r
    port=$(free_port)
    for ((r = 0; r < n; r++)); do
        if [ "$style" = slurm ]; then
            env -u DT_RANK -u DT_WORLD_SIZE SLURM_PROCID=$r SLURM_NTASKS=$n SLURM_LOCALID=$r \
                DT_MASTER_ADDR=127.0.0.1 DT_MASTER_PORT=$port DT_JOB_TOKEN=tok-$port \
                "$BIN/coll_check" --quick --big 4096 >"$WORK/$style.$r" 2>&1 &
        else
            env -u DT_RANK -u DT_WORLD_SIZE OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=$n \
                OMPI_COMM_WORLD_LOCAL_RANK=$r OMPI_COMM_WORLD_LOCAL_SIZE=$n MASTER_ADDR=127.0.0.1 \
                MASTER_PORT=$port DT_JOB_TOKEN=tok-$port \
                "$BIN/coll_check" --quick --big 4096 >"$WORK/$style.$r" 2>&1 &
        fi
        pids+=($!)
    done
    for r in "${!pids[@]}"; do wait ${pids[$r]} || { cat "$WORK/$style.$r"; fail "$style rank $r failed"; }; done
    expect_grep "$WORK/$style.0" "coll_check: world $n: [0-9]+ checks, 0 mismatches"
}
launch slurm 3
# srun with nothing but Slurm's variables: the store on the step's first node
# (127.0.0.1 here) at the port from the job id, the token from dtrain.token
# in the submit directory.
job=$((RANDOM % 2000))
port=$((10000 + job * 10 + 3))
echo "submit-dir-token-$$" >"$WORK/dtrain.token"
chmod 600 "$WORK/dtrain.token"
pids=()
for r in 0 1; do
    env -u DT_RANK -u DT_WORLD_SIZE -u DT_JOB_TOKEN -u DT_MASTER_ADDR -u DT_MASTER_PORT -u MASTER_ADDR -u MASTER_PORT \
        SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r SLURM_STEP_NODELIST='127.0.0.[1-2]' SLURM_JOB_ID=$job \
        SLURM_STEP_ID=3 SLURM_SUBMIT_DIR="$WORK" DT_DEBUG=info \
        "$BIN/coll_check" --quick --big 4096 >"$WORK/srun.$r" 2>&1 &
    pids+=($!)
done
for r in 0 1; do wait ${pids[$r]} || { cat "$WORK/srun.$r"; fail "srun-style rank $r failed"; }; done
expect_grep "$WORK/srun.1" "rank 1 of 2 joined \(launcher slurm, store 127.0.0.1:$port\)"
expect_grep "$WORK/srun.0" "coll_check: world 2: [0-9]+ checks, 0 mismatches"
# a host list that cannot be read is named
env -u DT_RANK -u DT_WORLD_SIZE -u DT_MASTER_ADDR -u MASTER_ADDR SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_JOB_ID=5 \
    SLURM_STEP_NODELIST='n[1-' DT_JOB_TOKEN=t "$BIN/coll_check" --quick >"$WORK/badlist" 2>&1 && fail "accepted a bad host list"
expect_grep "$WORK/badlist" "SLURM_STEP_NODELIST='n\[1-'"
launch openmpi 2
# no token with a multi-rank job: a clear error, not a hang
env -u DT_JOB_TOKEN -u DT_RANK -u DT_WORLD_SIZE SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_JOB_NODELIST=localhost SLURM_JOB_ID=1 "$BIN/coll_check" --quick >"$WORK/notok" 2>&1 && fail "ran without a token"
expect_grep "$WORK/notok" "DT_JOB_TOKEN is not set"
# a malformed rank variable is named
env -u DT_RANK -u DT_WORLD_SIZE SLURM_PROCID=x SLURM_NTASKS=2 DT_JOB_TOKEN=t "$BIN/coll_check" >"$WORK/bad" 2>&1 && fail "accepted SLURM_PROCID=x"
expect_grep "$WORK/bad" "SLURM_PROCID"
echo ok
