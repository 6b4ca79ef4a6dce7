#!/usr/bin/env bash
# Communicators progress side by side from several threads (issue 30's
# runtime test): on a dp x tp split of 4 ranks, small allreduces on each tp
# pair and ping-pongs on a third communicator finish while a large
# nonblocking allreduce on the dp groups is in flight; every result exact.
# Over TCP and over shared memory.  The per-rank timings are in the log.
# The backend table: DT_BACKEND=native is the default, any other name is
# refused at join, naming it.
. "$(dirname "$0")/lib.sh"
# The first tp pair holds its large allreduce open until its own small
# operations have run (see tests/comm_concurrency.c), so the check does not
# depend on how long the large one takes: its size only has to be real.
quick=${DT_TEST_QUICK:-0}
for tr in tcp shm; do
    mib=32
    [ "$quick" = 1 ] && mib=16
    DT_TRANSPORT=$tr timeout 120 "$BIN/dtrun" -n 4 "$BIN/comm_concurrency" --mib $mib >"$WORK/out.$tr" 2>&1 ||
        { cat "$WORK/out.$tr"; fail "DT_TRANSPORT=$tr: comm_concurrency failed"; }
    echo "--- DT_TRANSPORT=$tr"
    cat "$WORK/out.$tr"
    expect_grep "$WORK/out.$tr" "comm_concurrency: 4 ranks: ok"
done
DT_BACKEND=native timeout 60 "$BIN/dtrun" -n 4 "$BIN/comm_concurrency" --mib 1 >"$WORK/native" 2>&1 ||
    { cat "$WORK/native"; fail "DT_BACKEND=native failed"; }
# Under dtrun (no mpirun), DT_BACKEND=mpi is refused: a build without MPI
# says what to install; a build with it sees each rank as a world of one
# (MPI's singleton) and names the disagreement (tests/cases/mpi_backend.sh
# runs it under mpirun).
DT_BACKEND=mpi timeout 60 "$BIN/dtrun" -n 4 "$BIN/comm_concurrency" --mib 1 >"$WORK/mpi" 2>&1 &&
    fail "DT_BACKEND=mpi accepted under dtrun"
expect_grep "$WORK/mpi" "DT_BACKEND='mpi': this build has no MPI backend: install libopenmpi-dev and rebuild|DT_BACKEND=mpi: the environment \\(launcher dtrun\\) says rank [0-9] of 4, MPI_COMM_WORLD says rank 0 of 1"
DT_BACKEND=nccl timeout 60 "$BIN/dtrun" -n 2 "$BIN/comm_concurrency" --mib 1 >"$WORK/nccl" 2>&1 &&
    fail "DT_BACKEND=nccl accepted"
# (a build with the NCCL backend refuses at join too: no GPU here, or fewer GPUs than ranks)
expect_grep "$WORK/nccl" "DT_BACKEND='nccl'|DT_BACKEND=nccl: (no CUDA device is visible|2 ranks on this host but 1 visible GPU)"
DT_BACKEND=gloo timeout 60 "$BIN/dtrun" -n 2 "$BIN/comm_concurrency" --mib 1 >"$WORK/gloo" 2>&1 &&
    fail "DT_BACKEND=gloo accepted"
expect_grep "$WORK/gloo" "DT_BACKEND='gloo': (expected native|this build has the native backend only)"
echo ok
