#!/usr/bin/env bash
# The CUDA backend is a module (libdtrain_cuda.so) that a job loads only when
# it asks for a CUDA device: a CPU run loads none of the CUDA libraries (the
# dynamic loader's own log, LD_DEBUG=libs, says what it loaded); a device=cuda
# run loads the module and reaches the CUDA runtime (on a machine without a
# GPU its answer is "no GPU visible"); a module that is missing or is not
# dtrain's is refused naming it; a build without CUDA says how to get it.
. "$(dirname "$0")/lib.sh"
BUILD=$(dirname "$BIN")
GPT=(train --config configs/gpt-mini.json --set layers=1 --set dim=32 --set heads=2 --set context=16 --set batch_size=2
     --set eval_interval=0 --set eval_batches=1 --set log_interval=1)
if ! grep -q "^DT_CUDA_BUILT:INTERNAL=ON" "$BUILD/CMakeCache.txt" 2>/dev/null; then
    "$BIN/dtrain" "${GPT[@]}" --set steps=1 --set device=cuda >"$WORK/nocuda" 2>&1 && fail "device=cuda ran in a build without CUDA"
    expect_grep "$WORK/nocuda" "built without CUDA \(configure with -DDT_CUDA=ON"
    echo "a build without CUDA: device=cuda refused, saying how to build it"
    exit 0
fi
[ -f "$BIN/libdtrain_cuda.so" ] || fail "no $BIN/libdtrain_cuda.so in a build with CUDA"
LD_DEBUG=libs "$BIN/dtrain" "${GPT[@]}" --set steps=2 >"$WORK/cpu" 2>&1 || { cat "$WORK/cpu"; fail "the CPU run failed"; }
expect_grep "$WORK/cpu" "step 2/2"
expect_no_grep "$WORK/cpu" "libcudart|libcublas|libnccl|libdtrain_cuda"
echo "a CPU run: none of the CUDA libraries loaded"
LD_DEBUG=libs "$BIN/dtrain" "${GPT[@]}" --set steps=1 --set device=cuda >"$WORK/cuda" 2>&1
expect_grep "$WORK/cuda" "calling init: .*libdtrain_cuda.so"
expect_grep "$WORK/cuda" "calling init: .*libcudart"
expect_no_grep "$WORK/cuda" "the CUDA backend: "
grep -q "no GPU visible" "$WORK/cuda" && echo "device=cuda: the module loaded, the CUDA runtime says no GPU is visible" ||
    echo "device=cuda: the module loaded"
DT_CUDA_MODULE=$WORK/absent.so "$BIN/dtrain" "${GPT[@]}" --set steps=1 --set device=cuda >"$WORK/absent" 2>&1 &&
    fail "device=cuda ran without its module"
expect_grep "$WORK/absent" "device cuda: the CUDA backend: $WORK/absent.so: cannot open shared object file"
zlib=$(ldconfig -p | awk '/libz\.so\.1 .*x86-64|libz\.so\.1 / { print $NF; exit }')
if [ -n "$zlib" ]; then
    DT_CUDA_MODULE=$zlib "$BIN/dtrain" "${GPT[@]}" --set steps=1 --set device=cuda >"$WORK/other" 2>&1 &&
        fail "device=cuda ran with $zlib for its module"
    expect_grep "$WORK/other" "the CUDA backend: $zlib: not a dtrain CUDA module"
fi
echo "a missing module and another library refused, naming them"
# dtrain --help takes no CUDA library either
LD_DEBUG=libs "$BIN/dtrain" --help >"$WORK/help" 2>&1
expect_no_grep "$WORK/help" "libcudart|libcublas"
echo ok
