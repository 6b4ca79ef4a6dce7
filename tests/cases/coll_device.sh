#!/usr/bin/env bash
# Device buffers in the native backend (docs/gpu.md "Device buffers"):
# coll_check --device emu puts every buffer of every call (collectives,
# in place or not, nonblocking ones, point to point, sub-communicators) in
# emu memory, which the host cannot dereference, so a path that forgets to
# stage crashes; on 2, 3 and 4 ranks its checks pass and its hashes of
# inexact f32 reductions equal the host run's bit for bit.  Then
# device_refused: the native backend stages the same calls, and the MPI
# backend (when built, under mpirun) refuses them naming the buffer.
# The emu runs repeat with small forced chunks (DT_STAGE_CHUNK) so that the
# chunked staging (broadcast, allgather, point to point) runs there: 92
# bytes (23 f32, 11 f64: many chunks, a partial last one), 100 (25 f32:
# counts 1000 in whole chunks, the empty last frame of a message) and 1996
# (499 f32: 3 to 9 chunks; u8 1000: one chunk, staged whole).  92 and 1996
# are no multiple of the inputs' periods (5, 17), so a chunk put in the
# wrong place shows; the emu device copies at the wait, so a chunk used
# before its copy is done shows too.
# The IPC path (src/comm/ipc.h): the same coll_check with DT_DEVICE_IPC=1,
# where the ranks read each other's emu buffers through memfd mappings,
# equals the host run byte for byte too and says it took the path;
# device_ipc: the same buffers again and again (each peer buffer opened
# once), with DT_DEVICE_IPC=0 nothing by IPC, mismatched counts named on
# every rank, and a rank killed before an IPC allreduce reported by the
# others as DT_ERR_PEER naming it.
. "$(dirname "$0")/lib.sh"
big=4096; [ "${QUICK:-${DT_TEST_QUICK:-0}}" = 1 ] && big=1024
for n in 2 3 4; do
    par "$WORK/host$n" "$BIN/dtrun" -n $n "$BIN/coll_check" --quick --big $big --hashes
    par "$WORK/emu$n" "$BIN/dtrun" -n $n "$BIN/coll_check" --quick --big $big --hashes --device emu
    for ch in 92 100 1996; do
        par "$WORK/emuc$ch-$n" env DT_DEVICE_IPC=0 DT_STAGE_CHUNK=$ch "$BIN/dtrun" -n $n "$BIN/coll_check" --quick --big $big --hashes --device emu
    done
    par "$WORK/ipc$n" env DT_DEVICE_IPC=1 "$BIN/dtrun" -n $n "$BIN/coll_check" --quick --big $big --hashes --device emu
    par "$WORK/reuse$n" env DT_DEVICE_IPC=1 "$BIN/dtrun" -n $n "$BIN/device_ipc" reuse
done
par "$WORK/reuse-off" env DT_DEVICE_IPC=0 "$BIN/dtrun" -n 3 "$BIN/device_ipc" reuse
par "$WORK/mismatch" env DT_DEVICE_IPC=1 DT_TIMEOUT=30 "$BIN/dtrun" -n 3 "$BIN/device_ipc" mismatch
mkdir -p "$WORK/dead"
par "$WORK/dead.out" env DT_DEVICE_IPC=1 DT_TIMEOUT=30 "$BIN/dtrun" -n 3 "$BIN/device_ipc" dead "$WORK/dead"
par "$WORK/staged" "$BIN/dtrun" -n 3 "$BIN/device_refused" staged
par_wait
for n in 2 3 4; do
    for k in host emu emuc92- emuc100- emuc1996- ipc; do
        par_ok "$WORK/$k$n" || { cat "$WORK/$k$n"; fail "coll_check on $n ranks ($k buffers)"; }
        expect_grep "$WORK/$k$n" "coll_check: world $n: [0-9]+ checks, 0 mismatches"
    done
    expect_grep "$WORK/emu$n" "hash count $big"
    expect_grep "$WORK/ipc$n" " [1-9][0-9]* collectives by device IPC"
    for k in emu ipc; do
        diff "$WORK/host$n" <(grep -v "by device IPC" "$WORK/$k$n") ||
            fail "coll_check on $n ranks: device buffers ($k) gave other bits than host ones"
    done
    for ch in 92 100 1996; do
        diff "$WORK/host$n" <(grep -v "by device IPC" "$WORK/emuc$ch-$n") ||
            fail "coll_check on $n ranks: device buffers in chunks of DT_STAGE_CHUNK=$ch bytes gave other bits than host ones"
    done
    par_ok "$WORK/reuse$n" || { cat "$WORK/reuse$n"; fail "device_ipc reuse on $n ranks"; }
    expect_grep "$WORK/reuse$n" "device_ipc reuse: $n ranks, IPC, [1-9][0-9]* collectives by IPC on rank 0, 0 failures"
done
par_ok "$WORK/reuse-off" || { cat "$WORK/reuse-off"; fail "device_ipc reuse under DT_DEVICE_IPC=0"; }
expect_grep "$WORK/reuse-off" "device_ipc reuse: 3 ranks, staged, 0 collectives by IPC on rank 0, 0 failures"
[ "$(grep -c "device_ipc mismatch: rank [0-9]: ok: .*collective mismatch: rank . calls allreduce(100[34] x f32, sum) but rank" "$WORK/mismatch")" = 3 ] ||
    { cat "$WORK/mismatch"; fail "device_ipc mismatch: not every rank named the mismatch"; }
expect_grep "$WORK/dead.out" "rank 2 \(pid [0-9]+\) was killed by signal 9"
for r in 0 1; do
    f="$WORK/dead/result.$r"
    [ -f "$f" ] || { cat "$WORK/dead.out"; fail "device_ipc dead: rank $r wrote no result"; }
    expect_grep "$f" "^status=DT_ERR_PEER$"
    expect_grep "$f" "^ipc_calls=1$" # the allreduce before the kill went by IPC
    expect_grep "$f" "rank 2 \(127\.0\.0\.1:[0-9]+\)"
    less_than "$(sed -n 's/^seconds=//p' "$f")" 10 || fail "device_ipc dead: rank $r took too long"
done
par_ok "$WORK/staged" || { cat "$WORK/staged"; fail "device_refused staged (native backend)"; }
cache="$BIN/../CMakeCache.txt"
if command -v mpirun >/dev/null && grep -q "^DT_MPI_BUILT:INTERNAL=ON" "$cache" 2>/dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
    timeout 120 mpirun -n 2 -x DT_BACKEND=mpi "$BIN/device_refused" refused >"$WORK/mpi" 2>&1 ||
        { cat "$WORK/mpi"; fail "device buffers under DT_BACKEND=mpi were not refused by name"; }
    expect_grep "$WORK/mpi" "device_refused: 2 ranks, refused: ok"
else
    echo "DT_BACKEND=mpi part skipped: no mpirun or no MPI backend in this build"
fi
echo "ok: device buffers (emu) on 2, 3, 4 ranks, staged (whole and in chunks of 92, 100 and 1996 bytes) and by IPC, equal host buffers bitwise; IPC cached, off, dead peer; MPI refuses them by name"
