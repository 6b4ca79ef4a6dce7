#!/usr/bin/env bash
# Build dtrain with the CUDA backend on this machine (which has the CUDA
# toolkit, maybe no GPU) into a self-contained bundle that
# scripts/gpu-check.sh runs on a GPU machine that may lack the build's
# libraries (OpenBLAS, cJSON, OpenSSL): the programs, and the shared
# libraries they need that are not part of the CUDA toolkit or glibc.
#
# Usage: scripts/gpu-bundle.sh [DIR]     (default: .gpu, ignored by git)
# DIR/bin: the programs; DIR/lib.tgz: their libraries, compressed.
# Portable code (DT_NATIVE=OFF: no -march=native), no oneDNN (conv2d is not
# on the GPU path), CUDA code for sm_90 (H100, H200).
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
cd "$(dirname "$0")/.."
out=${1:-.gpu}
build=build-gpu-bundle
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDT_NATIVE=OFF -DDT_DNNL=OFF -DDT_MPI=OFF -DDT_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build "$build" -j "$(nproc)" -- --no-print-directory >/dev/null
grep -q 'DT_CUDA_BUILT:INTERNAL=ON' "$build/CMakeCache.txt" || { echo "gpu-bundle: the CUDA backend was not built" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
progs="dtrain dtrun coll_check gpu_kernels nccl_world1 nccl_attach"
for p in $build/bin/gpu_*; do progs="$progs $(basename "$p")"; done
for p in $(echo $progs | tr ' ' '\n' | sort -u); do
    [ -x "$build/bin/$p" ] && cp "$build/bin/$p" "$out/bin/"
done
cp "$build/bin/libdtrain_cuda.so" "$out/bin/" # the CUDA module, found next to the programs
# the libraries beside glibc, libstdc++/libgcc and the CUDA toolkit's own
for p in "$out"/bin/*; do ldd "$p"; done | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
        libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libstdc++*|libgcc_s*|libmvec*|libz.so*) ;;
        libcuda*|libcublas*|libcudart*|libnccl*|libOpenCL*) ;;
        *) cp -L "$lib" "$out/lib/" ;;
    esac
done
strip --strip-debug "$out"/bin/* 2>/dev/null || true
# The libraries travel compressed (OpenBLAS alone is 36 MB; what the device
# tool carries is at most 64 MiB with the tree): gpu-check.sh unpacks them.
tar czf "$out/lib.tgz" -C "$out" lib && rm -rf "$out/lib"
git rev-parse HEAD > "$out/GIT_COMMIT" 2>/dev/null || true
git status --porcelain | grep -q . && echo "dirty" >> "$out/GIT_COMMIT" || true
du -sh "$out"
