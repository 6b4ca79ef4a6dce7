#!/usr/bin/env bash
# The NCCL backend (DT_BACKEND=nccl, docs/gpu.md "NCCL backend") as far as a
# machine can check it:
#   - a build without the backend refuses DT_BACKEND=nccl naming what to
#     install, then the case skips (exit 77) with that reason;
#   - a build with it on a machine without a GPU: DT_BACKEND=nccl under
#     dtrun -n 1 and -n 2 fails within seconds, each rank naming that no CUDA
#     device is visible (an exit with a status, not a crash or a hang);
#   - with a GPU: tests/gpu/nccl_world1 (every collective at world size 1 on
#     device buffers; scripts/gpu-check.sh runs it too).
. "$(dirname "$0")/lib.sh"
cache="$BIN/../CMakeCache.txt"
if ! grep -q "^DT_NCCL_BUILT:INTERNAL=ON" "$cache" 2>/dev/null; then
    DT_BACKEND=nccl timeout 60 "$BIN/dtrun" -n 1 "$BIN/coll_check" --quick >"$WORK/off" 2>&1 &&
        fail "a build without the NCCL backend accepted DT_BACKEND=nccl"
    expect_grep "$WORK/off" "DT_BACKEND='nccl': this build has no NCCL backend: build with the CUDA toolkit and NCCL"
    echo "this build has no NCCL backend (checked: DT_BACKEND=nccl is refused naming what to install); configure with -DDT_CUDA=ON where the CUDA toolkit and NCCL are installed"
    exit 77
fi
if nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    [ -x "$BIN/nccl_world1" ] || fail "a build with the NCCL backend has no nccl_world1"
    timeout 120 "$BIN/dtrun" -n 1 "$BIN/nccl_world1" >"$WORK/gpu" 2>&1 || { cat "$WORK/gpu"; fail "nccl_world1 on a GPU"; }
    cat "$WORK/gpu"
    expect_grep "$WORK/gpu" "nccl_world1: [0-9]+ checks, 0 failed"
    exit 0
fi
for n in 1 2; do
    t0=$(now)
    DT_BACKEND=nccl timeout 60 "$BIN/dtrun" -n $n "$BIN/coll_check" --quick >"$WORK/n$n" 2>&1
    rc=$?
    took=$(elapsed "$t0")
    cat "$WORK/n$n"
    [ $rc -eq 0 ] && fail "DT_BACKEND=nccl on $n rank(s) without a GPU succeeded"
    [ $rc -eq 124 ] && fail "DT_BACKEND=nccl on $n rank(s) without a GPU hung (timeout 60 s)"
    less_than "$took" 20 || fail "DT_BACKEND=nccl on $n rank(s) took $took s to fail (expected seconds)"
    expect_grep "$WORK/n$n" "DT_BACKEND=nccl: no CUDA device is visible"
    expect_no_grep "$WORK/n$n" "signal|core dumped|Segmentation|Aborted"
    [ "$(grep -c 'no CUDA device is visible' "$WORK/n$n")" -ge 1 ] || fail "no rank named the missing device"
    echo "DT_BACKEND=nccl on $n rank(s) without a GPU: failed cleanly in $took s"
done
