#!/usr/bin/env bash
# OpenMPI's mpirun starts a dtrain training job across two hosts
# (docs/launching.md, "mpirun across hosts").  The hosts are network
# namespaces dt0 and dt1 (scripts/netns-cluster.sh, 10.77.0.1 and .2); as in
# bench/comm/run.sh's ns_mpi, mpirun runs in dt0 under its own UTS namespace
# with host name h0, and its remote-shell agent starts OpenMPI's daemon for
# host hK in namespace dtK with host name hK, so OpenMPI sees two hosts and
# its daemons and ranks talk over eth0.
#   1. native backend: the ranks read OMPI_COMM_WORLD_*, rank 0 serves the
#      store on 10.77.0.1 and both authenticate with DT_JOB_TOKEN (-x);
#   2. DT_BACKEND=mpi (when this build has the MPI backend): every
#      collective through OpenMPI's TCP transport;
#   then the two runs' per-step losses agree within a relative 1e-5 (the
#      bound of backend/mpi-ddp), each rank said which host it ran on (h0, h1);
#   3. rank 1 is killed mid-training: mpirun exits non-zero within 15 s,
#      naming the rank, the host and the signal;
#   4. host h1's rank has a wrong token: the store on h0 refuses it, rank 1
#      exits saying so and mpirun ends the job non-zero within 30 s.
# Skips (exit 77) without mpirun, without root or without network namespaces.
. "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || { echo "mpirun not found: install openmpi-bin (scripts/setup.sh)"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "needs root for network namespaces"; exit 77; }
ip netns add dtmprobe$$ 2>/dev/null || { echo "cannot create network namespaces here"; exit 77; }
ip netns del dtmprobe$$
. "$(dirname "$0")/netns_common.sh"
mpi_backend=0
grep -q "^DT_MPI_BUILT:INTERNAL=ON" "$BIN/../CMakeCache.txt" 2>/dev/null && mpi_backend=1

scripts/netns-cluster.sh up 2 || fail "cannot build the namespace cluster"

# OpenMPI's remote-shell agent: "agent hK orted ARGS..." runs the daemon on
# host hK, i.e. in namespace dtK under a UTS namespace named hK.
cat >"$WORK/agent" <<'EOF'
#!/bin/sh
h=$1; shift
exec ip netns exec "dt${h#h}" unshare --uts sh -c 'hostname "$0"; exec sh -c "$*"' "$h" "$@"
EOF
chmod +x "$WORK/agent"
printf 'h0 slots=1\nh1 slots=1\n' >"$WORK/hosts"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# OpenMPI's allocations are not dtrain's: no leak report under ASan.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
export DT_JOB_TOKEN="mpirun-hosts-token-$$-$RANDOM"
# mpirun_hosts SECONDS MPIRUN-ARGS... : mpirun on host h0 (namespace dt0) with
# one rank per host, its daemons and ranks on eth0.
mpirun_hosts() {
    local limit=$1; shift
    timeout -k 3 "$limit" ip netns exec dt0 unshare --uts sh -c 'hostname h0; exec "$@"' sh \
        mpirun -n 2 --hostfile "$WORK/hosts" --mca plm_rsh_agent "$WORK/agent" \
        --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 "$@"
}
dtrain=$(cd "$BIN" && pwd)/dtrain
steps=30
args=(train --config configs/mlp.json --set "mlp_sizes=[784,64,32,10]" --set batch_size=8
      --set eval_batches=1 --set eval_interval=0 --set threads=1 --set bucket_mb=0.05)
# ran_on LOG BACKEND-TEXT: each rank logged that it joined a world of 2 on its
# own host (DT_DEBUG=info lines carry host:pid:rank).
ran_on() {
    local r
    for r in 0 1; do
        expect_grep "$1" "dtrain h$r:[0-9]+:$r INFO rank $r of 2 joined \(launcher openmpi, $2"
    done
    expect_grep "$1" "batch 8 x 2 ranks"
    expect_grep "$1" "step $steps/$steps \| loss"
}

# 1. native backend: dtrain's own store, token and TCP transport
mpirun_hosts 60 -x DT_JOB_TOKEN -x DT_MASTER_ADDR=10.77.0.1 -x DT_MASTER_PORT=29500 -x DT_DEBUG=info \
    "$dtrain" "${args[@]}" --set steps=$steps --set log_interval=1 --set metrics_file="$WORK/native.jsonl" >"$WORK/native.log" 2>&1 ||
    { cat "$WORK/native.log"; fail "mpirun of the native backend across 2 hosts"; }
ran_on "$WORK/native.log" "store 10\.77\.0\.1:29500"
# two hosts: no shared memory between the ranks
expect_no_grep "$WORK/native.log" "INFO shared memory to"
grep -E "INFO rank [01] of 2 joined|step $steps/" "$WORK/native.log"

# 2. the MPI backend, and its losses against the native backend's
if [ $mpi_backend = 1 ]; then
    mpirun_hosts 60 -x DT_BACKEND=mpi -x DT_DEBUG=info \
        "$dtrain" "${args[@]}" --set steps=$steps --set log_interval=1 --set metrics_file="$WORK/mpi.jsonl" >"$WORK/mpi.log" 2>&1 ||
        { cat "$WORK/mpi.log"; fail "mpirun of the MPI backend across 2 hosts"; }
    ran_on "$WORK/mpi.log" "backend mpi"
    grep -E "INFO rank [01] of 2 joined|step $steps/" "$WORK/mpi.log"
    compare_losses "$WORK/native.jsonl" "$WORK/mpi.jsonl" "native vs mpi backend across 2 hosts"
else
    echo "this build has no MPI backend: the DT_BACKEND=mpi run is left out"
fi

# 3. rank 1 (on h1) killed mid-training: mpirun stops the job and says why.
# The ranks re-execute themselves for OpenBLAS (DT_BLAS_REEXEC_FORCE, as
# they do on a CPU OpenBLAS 0.3.21 misjudges) and are still found by name.
mpirun_hosts 60 -x DT_JOB_TOKEN -x DT_MASTER_ADDR=10.77.0.1 -x DT_MASTER_PORT=29501 -x DT_BLAS_REEXEC_FORCE=1 \
    "$dtrain" "${args[@]}" --set steps=10000000 --set log_interval=500 >"$WORK/kill.log" 2>&1 &
job=$!
for _ in $(seq 300); do
    grep -q "step 1000/" "$WORK/kill.log" && break
    kill -0 $job 2>/dev/null || { cat "$WORK/kill.log"; fail "the job to be killed ended by itself"; }
    sleep 0.1
done
victim=""
for p in $(ip netns pids dt1); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" &&
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = dtrain ] && victim=$p
done
[ -n "$victim" ] || { kill $job; cat "$WORK/kill.log"; fail "did not find rank 1's dtrain in namespace dt1"; }
tr '\0' '\n' <"/proc/$victim/environ" | grep -q "^OPENBLAS_CORETYPE=" ||
    { kill $job; fail "rank 1 did not re-execute itself (DT_BLAS_REEXEC_FORCE=1)"; }
killed=$(now)
kill -9 "$victim"
wait $job && { cat "$WORK/kill.log"; fail "mpirun exited 0 after rank 1 was killed"; }
took=$(elapsed "$killed")
less_than "$took" 15 || fail "mpirun took $took s to stop after rank 1 was killed"
expect_grep "$WORK/kill.log" "process rank 1 with PID [0-9]+ on node h1 exited on signal 9"
echo "rank 1 killed on h1: mpirun exited non-zero $took s later: $(grep -o 'process rank 1 .*' "$WORK/kill.log")"

# 4. a wrong token on host h1: the store refuses rank 1, and the job ends
# with dtrain's reason instead of waiting for the rank that never joins.
t0=$(now)
mpirun_hosts 60 -x DT_JOB_TOKEN -x DT_MASTER_ADDR=10.77.0.1 -x DT_MASTER_PORT=29502 -x DT_TIMEOUT=20 \
    sh -c '[ "$(hostname)" = h1 ] && DT_JOB_TOKEN=not-the-token; exec "$@"' sh \
    "$dtrain" "${args[@]}" --set steps=$steps >"$WORK/token.log" 2>&1 && { cat "$WORK/token.log"; fail "a rank with a wrong token joined"; }
took=$(elapsed "$t0")
cat "$WORK/token.log"
less_than "$took" 30 || fail "the job with a wrong token took $took s to end"
expect_grep "$WORK/token.log" "h0:[0-9]+:0 WARN rendezvous store: refused a connection: client 10\.77\.0\.2:[0-9]+ failed the job-token check"
expect_grep "$WORK/token.log" "dtrain: cannot join the job: rendezvous store 10\.77\.0\.1:29502 refused this process's job token"
echo "a wrong token on h1: mpirun exited non-zero $took s after it started"
echo ok
