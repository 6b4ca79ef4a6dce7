#!/usr/bin/env bash
# The cuda compute backend, entry by entry, against the cpu one
# (tests/gpu/gpu_kernels.c: every table entry on edge and training shapes,
# f32 within 1e-5, bf16 within its rounding, dropout masks bitwise).
# Skips (exit 77, the reason on the last line) when this build has no CUDA
# backend (CMake builds tests/gpu/ only with CUDA) or this machine no GPU;
# fails when a GPU is visible and gpu_kernels still cannot use it.
# DT_TEST_QUICK=1 (the sanitizer builds): the small shapes only.
. "$(dirname "$0")/lib.sh"
bin="$BIN/gpu_kernels"
[ -x "$bin" ] || { echo "built without CUDA (no $bin: CMake builds tests/gpu/ when it finds the CUDA toolkit)"; exit 77; }
# The GPUs the driver lists ("GPU 0: NVIDIA H100 ..."); none without a driver.
gpus=$(nvidia-smi -L 2>/dev/null | grep '^GPU ' || true)
# The CUDA runtime's own allocations are not dtrain's (no leak report under
# ASan), and CUDA needs ASan's shadow gap unprotected.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0:protect_shadow_gap=0
args=()
[ "${QUICK:-${DT_TEST_QUICK:-0}}" = 1 ] && args+=(--quick)
timeout -k 5 280 "$bin" "${args[@]}" >"$WORK/out" 2>&1
rc=$?
cat "$WORK/out"
if [ -z "$gpus" ]; then
    # 77: dt__cuda_init found no device; 127: the CUDA driver library is absent.
    reason=$(grep -m1 -E '^SKIP: |error while loading shared libraries' "$WORK/out" | sed 's/^SKIP: //')
    if [ $rc = 77 ] || [ $rc = 127 ]; then
        echo "no GPU on this machine (gpu_kernels: ${reason:-exit $rc})"
        exit 77
    fi
fi
[ $rc = 77 ] && fail "a GPU is visible (${gpus%%$'\n'*}) but gpu_kernels skipped: $(tail -n 1 "$WORK/out")"
[ $rc = 124 ] && fail "gpu_kernels timed out after 280 s"
[ $rc = 0 ] || fail "gpu_kernels exited $rc: $(grep -c '^FAIL' "$WORK/out") checks failed"
expect_grep "$WORK/out" '^gpu_kernels: [0-9]+ checks, [0-9]+ ok, 0 failed$'
echo ok
