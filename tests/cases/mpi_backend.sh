#!/usr/bin/env bash
# The MPI backend (DT_BACKEND=mpi, docs/launching.md "MPI backend"), ranks
# started by OpenMPI's mpirun on this host:
#   mpi_backend.sh conformance N   coll_check on N ranks (every collective,
#       dtype, op, in place, split, nonblocking, p2p), then comm_concurrency
#       on 4 ranks (communicators progressing from several threads: the
#       backend needs MPI_THREAD_MULTIPLE);
#   mpi_backend.sh ddp             dtrain trains the mlp data-parallel on 2
#       ranks under mpirun and follows the native backend's 2-rank run.
# Tolerances: coll_check's inputs are small integers, whose sums are exact in
# any order, so its results compare bitwise under MPI as well.  Training's
# float gradients are summed in MPI's order (2 ranks: one addition, the same
# bits): the losses must agree within a relative 1e-5 per step, the bound
# ddp_equivalence uses, which also holds for MPI's order on more ranks.
# Skips (exit 77) when mpirun or this build's MPI backend is absent.
. "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || { echo "mpirun not found: install openmpi-bin libopenmpi-dev (scripts/setup.sh, which make test runs), then rebuild"; exit 77; }
cache="$BIN/../CMakeCache.txt"
grep -q "^DT_MPI_BUILT:INTERNAL=ON" "$cache" 2>/dev/null || {
    echo "this build has no MPI backend: install libopenmpi-dev and rebuild"; exit 77; }
# mpirun refuses root unless told; extra ranks share the 2 cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# OpenMPI's own allocations are not dtrain's: no leak report under ASan.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
mode=${1:-conformance}
case $mode in
conformance)
    n=${2:-2}
    big=65536; [ "${QUICK:-${DT_TEST_QUICK:-0}}" = 1 ] && big=8192
    timeout 300 mpirun -n "$n" -x DT_BACKEND=mpi "$BIN/coll_check" --quick --big $big >"$WORK/cc" 2>&1 ||
        { cat "$WORK/cc"; fail "coll_check on $n ranks under mpirun"; }
    cat "$WORK/cc"
    expect_grep "$WORK/cc" "coll_check: world $n: [0-9]+ checks, 0 mismatches"
    timeout 120 mpirun -n 4 -x DT_BACKEND=mpi "$BIN/comm_concurrency" --mib 4 >"$WORK/conc" 2>&1 ||
        { cat "$WORK/conc"; fail "comm_concurrency on 4 ranks under mpirun"; }
    cat "$WORK/conc"
    expect_grep "$WORK/conc" "comm_concurrency: 4 ranks: ok"
    # Ranks that disagree with MPI about who they are: refused, naming both.
    DT_RANK=1 DT_WORLD_SIZE=2 timeout 60 mpirun -n 2 -x DT_BACKEND=mpi -x DT_RANK -x DT_WORLD_SIZE \
        "$BIN/coll_check" --quick >"$WORK/bad" 2>&1 && fail "a rank table that disagrees with MPI_COMM_WORLD was accepted"
    expect_grep "$WORK/bad" "MPI_COMM_WORLD says rank 0 of 2"
    ;;
ddp)
    steps=30
    args=(train --config configs/mlp.json --set mlp_sizes=[784,64,32,10] --set steps=$steps --set batch_size=8
          --set log_interval=1 --set eval_batches=1 --set eval_interval=0 --set threads=1 --set bucket_mb=0.05)
    timeout 200 "$BIN/dtrun" -n 2 "$BIN/dtrain" "${args[@]}" --set metrics_file="$WORK/native.jsonl" >"$WORK/native.log" 2>&1 ||
        { cat "$WORK/native.log"; fail "native 2-rank run"; }
    timeout 200 mpirun -n 2 -x DT_BACKEND=mpi "$BIN/dtrain" "${args[@]}" --set metrics_file="$WORK/mpi.jsonl" >"$WORK/mpi.log" 2>&1 ||
        { cat "$WORK/mpi.log"; fail "mpi 2-rank run"; }
    python3 - "$WORK/native.jsonl" "$WORK/mpi.jsonl" $steps <<'PY' || fail "the MPI backend's losses differ from the native backend's"
import json, sys
def read(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r}
a, b, steps = read(sys.argv[1]), read(sys.argv[2]), int(sys.argv[3])
common = sorted(set(a) & set(b))
assert len(common) >= steps - 1, (sorted(a), sorted(b))
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in common)
print(f"native vs mpi: {len(common)} steps, first loss {a[common[0]]:.6f}, last {a[common[-1]]:.6f} / {b[common[-1]]:.6f}, "
      f"worst relative difference {worst:.2e} (bound 1e-5)")
sys.exit(0 if worst <= 1e-5 else 1)
PY
    ;;
*) fail "usage: mpi_backend.sh conformance N | ddp" ;;
esac
echo ok
