#!/usr/bin/env bash
# shellcheck disable=SC2317 # the step functions run through `timeout bash -c`
# The one script a GPU machine runs (an H100 or H200, 16 cores, no network):
# build dtrain with its CUDA backend, check it against the CPU engine, and
# measure PyTorch on the same models.  Every step runs under its own
# timeout; a failed step is recorded and the script goes on.
#
# Usage: scripts/gpu-check.sh OUTDIR
#   OUTDIR/gpu-check.log    everything printed (tee)
#   OUTDIR/gpu-check.json   commit, date, GPU (nvidia-smi), nvcc, each step's
#                           status (pass/fail/skip) and seconds, gpu_kernels'
#                           counts and the benchmark figures of each row
#   OUTDIR/steps/NAME.log   each step's own output; OUTDIR/*.json the rows'
# Exit status 1 when any step failed, 0 otherwise (skips do not fail).
#
# Time: the whole run stays under 8 minutes.  Steps, in order, with the
# seconds expected on an H100 and each one's limit:
#   env                      nvidia-smi, nvcc, torch, nproc            5 /  30
#   build                    cmake configure + build -j 16 (build-gpu) 60 / 240
#   gpu_kernels              every table entry, cuda against cpu       10 / 120
#   coll-device              coll_check --device cuda on 2, 3, 4 ranks
#                            sharing the GPU, staged through pinned host
#                            memory (DT_DEVICE_IPC=0; 2 ranks again in
#                            small chunks) and by CUDA IPC
#                            (DT_DEVICE_IPC=1, the path counted), each
#                            bitwise the host run's hashes             35 / 120
#   nccl_world1              DT_BACKEND=nccl at world size 1: every
#                            collective on device buffers, refusals;
#                            nccl_attach: NCCL as a native communicator's
#                            companion for device buffers               8 /  60
#   trajectory               tests/gpu/trajectory.sh: gpt-mini 50 steps
#                            GPU vs CPU (f32, bf16) and checkpoints
#                            GPU -> CPU -> GPU                         40 / 150
#   strategies               2 ranks sharing the GPU (native backend):
#                            DDP, tp=2, pp=2 1f1b, ZeRO-2, ZeRO-3 each
#                            against one rank (1e-5 relative), staged;
#                            DDP and ZeRO-3 again by CUDA IPC; a rank
#                            killed by SIGKILL mid-step reported       65 / 150
#   attention-playground     dev/cuda/attention_bench.cu: checks, times 30 / 120
#   torch-gpt2-124m-bf16     PyTorch, eager, foreach + fused AdamW     15 /  90
#   torch-gpt2-124m-f32      eager, TF32 off                           25 / 120
#   torch-gpt2-124m-bf16-compile  torch.compile (~1 min compiling)     90 / 240
#   torch-gpt-small-f32, torch-gpt-small-bf16   eager                  10 /  60 each
#   dtrain-bench             dtrain's rows: GPT-2 124M bf16 (and again
#                            with DT_GEMM_TUNE=8) and f32, gpt-small
#                            f32 and bf16 (device=cuda)                110 / 240
#   kernel-profile           DT_KERNEL_PROFILE=1: dtrain's GPT-2 124M
#                            bf16 step, entry by entry (the costliest
#                            kinds with their TFLOP/s), and its
#                            products with DT_GEMM_TUNE=8              35 /  90
#   kernel-ncu               Nsight Compute (when ncu is there): every
#                            kernel of one GPT-2 bf16 step with its
#                            time (scripts/ncu-step-table.py); skipped
#                            with the reason where ncu cannot read the
#                            GPU                                       35 /  90
#   comm-bench               issue 46's figures: dtbench allreduce over
#                            device buffers, 2 ranks sharing the GPU, by
#                            CUDA IPC and staged; PyTorch gloo on CUDA
#                            tensors and the GPU's copy bandwidth
#                            (bench/gpu/torch_allreduce.py); gpt-small
#                            f32 data parallel on 2 ranks against 1      60 / 150
#   memcheck                 compute-sanitizer memcheck, gpu_kernels
#                            --quick                                   60 / 150
# About 7 minutes expected.  GPU_CHECK_BUDGET (default 450 s) bounds the
# steps together: a step gets at most the time left, and one with under
# 15 s left is skipped, so the script ends by 8 minutes whatever hangs.
# torch.compile is run for the bf16 GPT-2 row only: each compiled variant
# costs about a minute.  GPT-2 124M: 12 layers, dim 768, 12 heads, context
# 1024, vocab 50304, batch 8; gpt-small as configs/gpt-small.json.  Every
# dtrain and torch row has an MFU (bench/gpu/mfu.py: PaLM's 6 N + 12 L T D
# FLOPs per token x tokens/s over the GPU's peak by its nvidia-smi name for
# the row's precision; "n/a" for a GPU not in its table).
#
# Environment: GPU_CHECK_BUDGET=seconds, GPU_CHECK_ONLY=regex (the steps to
# run, e.g. 'env|build|gpu_kernels'), GPU_CHECK_CMAKE_ARGS (added to the
# configure line), GPU_CHECK_BUILD (the build directory, build-gpu).  When
# configure fails for want of packages (OpenBLAS, cJSON, OpenSSL, zlib:
# named in the log), the steps use the prebuilt bundle .gpu/
# (scripts/gpu-bundle.sh) when it is there.
set -u
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] || [ $# -ne 1 ]; then
    sed -n '3,/^set -u$/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    [ $# -eq 1 ] && exit 0
    exit 2
fi
mkdir -p "$1/steps" || exit 2
OUT=$(cd "$1" && pwd)
cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd)
BUILD=${GPU_CHECK_BUILD:-build-gpu}
BUDGET=${GPU_CHECK_BUDGET:-450}
ONLY=${GPU_CHECK_ONLY:-.}
JOBS=$(nproc 2>/dev/null || echo 4)
[ -d /usr/local/cuda/bin ] && PATH="/usr/local/cuda/bin:$PATH"
BIN=""
# The CPU references (trajectory) use OpenBLAS, whose 0.3.21 takes CPUs it
# does not know for a Prescott (SSE3): name an AVX2 kernel set when the CPU has AVX2.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
    export OPENBLAS_CORETYPE=Haswell
fi
export OUT ROOT BUILD JOBS PATH BIN

# ---- the steps (each runs in its own bash under timeout; exit 77 = skip,
# its last line the reason) ----

s_env() {
    local bad=0
    date -u
    if nvidia-smi; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader | tee "$OUT/gpu.csv"
    else
        echo "nvidia-smi failed: no driver or no GPU"; bad=1
    fi
    if nvcc --version >"$OUT/nvcc.txt" 2>&1; then cat "$OUT/nvcc.txt"; else echo "nvcc not found (PATH=$PATH)"; bad=1; fi
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())' ||
        echo "python3 with a CUDA PyTorch: not usable (the torch rows will fail)"
    echo "nproc $(nproc)"
    cmake --version | head -1 || { echo "cmake not found"; bad=1; }
    cc --version | head -1
    command -v compute-sanitizer || ls /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null ||
        echo "compute-sanitizer: not found"
    free -g | head -2
    return "$bad"
}

s_build() {
    local bundle="$ROOT/.gpu/bin"
    # A bundle built beside (scripts/gpu-bundle.sh) saves the minutes of a
    # build on the GPU machine; GPU_CHECK_BUILD_HERE=1 builds here anyway.
    # the bundle's libraries travel compressed (scripts/gpu-bundle.sh)
    if [ -f "$ROOT/.gpu/lib.tgz" ] && [ ! -d "$ROOT/.gpu/lib" ]; then
        tar xzf "$ROOT/.gpu/lib.tgz" -C "$ROOT/.gpu" || echo "could not unpack .gpu/lib.tgz"
    fi
    if [ -x "$bundle/gpu_kernels" ] && [ "${GPU_CHECK_BUILD_HERE:-0}" != 1 ]; then
        echo "$bundle" >"$OUT/bin-dir"
        echo "prebuilt bundle .gpu/ (scripts/gpu-bundle.sh) of commit $(head -n 1 "$ROOT/.gpu/GIT_COMMIT" 2>/dev/null)"
        grep -q dirty "$ROOT/.gpu/GIT_COMMIT" 2>/dev/null && echo "  (built with uncommitted changes)"
        ls -la "$bundle"
        return 0
    fi
    # shellcheck disable=SC2086 # GPU_CHECK_CMAKE_ARGS: words on purpose
    if ! cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DDT_NATIVE=ON ${GPU_CHECK_CMAKE_ARGS:-} \
        >"$OUT/cmake-configure.log" 2>&1; then
        tail -n 40 "$OUT/cmake-configure.log"
        echo "---- configure failed; what CMake could not find:"
        grep -E "Could NOT find|No package '|Package '.*' not found|not found|CMake Error" "$OUT/cmake-configure.log" |
            sort -u
        echo "(Debian/Ubuntu packages: libopenblas-dev libcjson-dev libssl-dev zlib1g-dev pkg-config)"
        if [ -x "$bundle/gpu_kernels" ]; then
            echo "$bundle" >"$OUT/bin-dir"
            echo "SKIP: configure failed (packages missing, above); the steps use the prebuilt bundle .gpu/"
            exit 77
        fi
        echo "configure failed and there is no prebuilt bundle (.gpu/, scripts/gpu-bundle.sh)"
        exit 1
    fi
    grep -E "dtrain: CUDA backend|conv2d:|MPI backend|NCCL backend" "$OUT/cmake-configure.log"
    if ! cmake --build "$BUILD" -j "$JOBS" 2>&1; then
        echo "the build failed"
        [ -x "$bundle/gpu_kernels" ] && echo "$bundle" >"$OUT/bin-dir" && echo "the steps use the bundle .gpu/"
        exit 1
    fi
    if ! grep -q 'DT_CUDA_BUILT:INTERNAL=ON' "$BUILD/CMakeCache.txt"; then
        echo "the CUDA backend was not built: $(grep -m1 'CUDA backend off' "$OUT/cmake-configure.log")"
        exit 1
    fi
    echo "$ROOT/$BUILD/bin" >"$OUT/bin-dir"
}

need_bin() {
    if [ -z "$BIN" ] || [ ! -x "$BIN/$1" ]; then
        echo "SKIP: no $1 (the build failed)"
        exit 77
    fi
}

s_gpu_kernels() {
    need_bin gpu_kernels
    "$BIN/gpu_kernels"
    local rc=$?
    [ "$rc" = 77 ] && { echo "gpu_kernels skipped on a GPU machine: it could not use the GPU"; exit 1; }
    # the products again with the algorithms chosen by timing (gemm_tune.cu): the same bounds
    echo "gpu_kernels --quick with DT_GEMM_TUNE=8:"
    DT_GEMM_TUNE=8 "$BIN/gpu_kernels" --quick || rc=1
    return "$rc"
}

# Every buffer of every collective and point-to-point call in device memory
# (coll_check --device cuda), ranks sharing the one GPU through dtrain's own
# transports; each world's output (checks and hashes of inexact f32
# reductions) must equal the host-buffer run's, twice: staged through
# pinned host memory (DT_DEVICE_IPC=0), and with allreduce, reduce_scatter,
# allgather and broadcast reading the peers' buffers by CUDA IPC
# (DT_DEVICE_IPC=1: a rank that cannot warns why; coll_check counts the
# collectives that took the path, which must be some).  The warning for a
# small buffer inside another's driver mapping (src/cuda/ipc.cu: staged by
# design) is the one the diff leaves out.
s_coll_device() {
    need_bin coll_check
    need_bin dtrun
    local n rc=0 d k
    d=$(mktemp -d)
    for n in 2 3 4; do
        "$BIN/dtrun" -n "$n" "$BIN/coll_check" --quick --big 65536 --hashes >"$d/host$n" 2>&1 || {
            cat "$d/host$n"; echo "FAIL: coll_check on $n ranks, host buffers"; rc=1; continue; }
        for k in 0 1; do
            DT_DEVICE_IPC=$k "$BIN/dtrun" -n "$n" "$BIN/coll_check" --quick --big 65536 --hashes --device cuda \
                >"$d/cuda$n-$k" 2>&1 || {
                tail -n 20 "$d/cuda$n-$k"; echo "FAIL: coll_check on $n ranks, cuda buffers, DT_DEVICE_IPC=$k"
                rc=1; continue; }
            local how="staged" taken
            taken=$(grep -o '[0-9]* collectives by device IPC' "$d/cuda$n-$k" | grep -o '^[0-9]*')
            [ "$k" = 1 ] && how="by CUDA IPC (${taken:-?} collectives on rank 0)"
            if [ "$k" = 1 ] && [ "${taken:-0}" = 0 ]; then
                grep -i "staged through host" "$d/cuda$n-$k" | head -n 3
                echo "FAIL: coll_check on $n ranks: DT_DEVICE_IPC=1 took no collective by IPC"; rc=1
            elif diff "$d/host$n" <(grep -v -e "by device IPC" -e "shares the driver's mapping" "$d/cuda$n-$k"); then
                echo "world $n: $(grep -o 'coll_check: world.*' "$d/cuda$n-$k"), $how, the host run's bits"
            else
                echo "FAIL: coll_check on $n ranks: cuda buffers ($how) gave other bits than host ones"; rc=1
            fi
        done
    done
    # The chunked staging (docs/gpu.md: the copy stream's asynchronous
    # copies) on buffers of this size: chunks of 499 floats, 2 ranks.
    if [ -f "$d/host2" ]; then
        DT_DEVICE_IPC=0 DT_STAGE_CHUNK=1996 "$BIN/dtrun" -n 2 "$BIN/coll_check" --quick --big 65536 --hashes --device cuda \
            >"$d/chunk2" 2>&1 || { tail -n 20 "$d/chunk2"; echo "FAIL: coll_check, cuda buffers in chunks"; rc=1; }
        if [ -s "$d/chunk2" ] && diff "$d/host2" <(grep -v "by device IPC" "$d/chunk2") >/dev/null; then
            echo "world 2, DT_STAGE_CHUNK=1996: the host run's bits"
        else
            echo "FAIL: coll_check on 2 ranks: cuda buffers in chunks of 1996 bytes gave other bits than host ones"; rc=1
        fi
    fi
    return "$rc"
}

s_nccl_world1() {
    need_bin nccl_world1
    local out rc
    out=$("$BIN/nccl_world1" 2>&1)
    rc=$?
    printf '%s\n' "$out"
    if [ "$rc" = 77 ]; then # a build without NCCL: a skip with its reason; no usable GPU: a failure
        grep -q "no NCCL backend" <<<"$out" && exit 77
        echo "nccl_world1 skipped on a GPU machine: it could not use the GPU"
        exit 1
    fi
    [ "$rc" = 0 ] || return "$rc"
    # NCCL as the companion of a native communicator for device buffers
    # (dt_comm_attach_device: what dtrain attaches when every rank has a GPU)
    need_bin nccl_attach
    "$BIN/nccl_attach"
}

s_trajectory() {
    [ -f tests/gpu/trajectory.sh ] || { echo "SKIP: tests/gpu/trajectory.sh not written yet"; exit 77; }
    need_bin dtrain
    bash tests/gpu/trajectory.sh "$BIN" "$OUT/trajectory"
}

# The strategies on the GPU (issue 46, item 3): two ranks sharing the one
# GPU, through dtrain's native backend (device buffers by CUDA IPC, the
# default on one host, or staged through pinned host memory; NCCL refuses
# two ranks on one GPU), each run against one
# rank on the same global batch: the losses of every step within 1e-5
# relative (f32; the order of the sums differs).  DDP: 2 x batch 4 against
# batch 8; tp=2 and pp=2 (1f1b, 4 micro-batches) keep the batch whole: 2
# ranks at batch 4 against one at 4; ZeRO-2 and ZeRO-3 as DDP (ZeRO-3's
# shard, gathers and update on the GPU).  Then a rank killed with
# SIGKILL mid-step (two ranks started by hand): rank 0 must fail by itself
# within 45 s (DT_TIMEOUT 20), naming rank 1.  GPU_CHECK_STRATEGY_DEVICE=emu runs the same logic on the
# emu device (no GPU; a dry run of this step).
s_strategies() {
    need_bin dtrain
    need_bin dtrun
    local dev=${GPU_CHECK_STRATEGY_DEVICE:-cuda} d rc=0 t0 took
    d=$(mktemp -d)
    local gpt=(--config configs/gpt-mini.json --set layers=2 --set dim=128 --set heads=4 --set context=64
        --set dropout=0 --set data_path=README.md --set warmup_steps=2 --set log_interval=1
        --set eval_interval=0 --set eval_batches=1 --set threads=2 --set device="$dev")
    one() { # NAME SETS...: one rank
        local name=$1
        shift
        "$BIN/dtrain" train "${gpt[@]}" --set steps=8 "$@" --set metrics_file="$d/$name.jsonl" >"$d/$name.out" 2>&1 ||
            { tail -n 5 "$d/$name.out"; echo "FAIL: $name (one rank) failed"; return 1; }
    }
    two() { # NAME SETS...: two ranks on the GPU, the native backend
        local name=$1
        shift
        DT_BACKEND=native DT_DEVICE_IPC=${IPC:-0} "$BIN/dtrun" -n 2 "$BIN/dtrain" train "${gpt[@]}" --set steps=8 "$@" \
            --set metrics_file="$d/$name.jsonl" >"$d/$name.out" 2>&1 ||
            { tail -n 8 "$d/$name.out"; echo "FAIL: $name (2 ranks) failed"; return 1; }
    }
    close() { # A B: every step's loss within 1e-5 relative
        python3 - "$d/$1.jsonl" "$d/$2.jsonl" "$1" "$2" <<'PY'
import json, sys
def losses(f):
    return {d["step"]: d["loss"] for d in map(json.loads, open(f)) if "loss" in d and "eval_loss" not in d}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
steps = sorted(set(a) & set(b))
worst = max((abs(a[s] - b[s]) / max(abs(b[s]), 1e-30) for s in steps), default=1.0)
ok = len(steps) >= 8 and worst <= 1e-5
print(f"{sys.argv[3]} vs {sys.argv[4]}: {len(steps)} steps, worst relative loss difference {worst:.2e}"
      + ("" if ok else "  FAIL: above 1e-5 (or too few steps)"))
sys.exit(0 if ok else 1)
PY
    }
    one ref8 --set batch_size=8 || rc=1
    one ref4 --set batch_size=4 || rc=1
    { two ddp --set batch_size=4 && close ddp ref8; } || rc=1
    { two tp --set batch_size=4 --set tp=2 && close tp ref4; } || rc=1
    { two pp --set batch_size=4 --set pp=2 --set pipeline_schedule=1f1b --set micro_batches=4 && close pp ref4; } || rc=1
    { two zero2 --set batch_size=4 --set zero_stage=2 && close zero2 ref8; } || rc=1
    { two zero3 --set batch_size=4 --set zero_stage=3 && close zero3 ref8; } || rc=1
    # the above staged through host memory (DT_DEVICE_IPC=0: the path that
    # ran here first); data parallel and ZeRO-3 again by CUDA IPC
    { IPC=1 two ddp-ipc --set batch_size=4 && close ddp-ipc ref8; } || rc=1
    { IPC=1 two zero3-ipc --set batch_size=4 --set zero_stage=3 && close zero3-ipc ref8; } || rc=1
    grep -h "communication:" "$d/ddp.out" | head -n 1
    # a rank killed mid-step: the other reports it itself within the timeout.
    # The two ranks are started by hand (the environment contract), not by
    # dtrun, which would stop rank 0 as soon as rank 1 dies.
    local port pids=() r
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    for r in 0 1; do
        DT_RANK=$r DT_WORLD_SIZE=2 DT_LOCAL_RANK=$r DT_LOCAL_WORLD_SIZE=2 DT_MASTER_ADDR=127.0.0.1 \
            DT_MASTER_PORT=$port DT_JOB_TOKEN=gpu-check-$port DT_TIMEOUT=20 DT_BACKEND=native \
            "$BIN/dtrain" train "${gpt[@]}" --set batch_size=4 --set steps=100000 >"$d/kill.$r" 2>&1 &
        pids+=($!)
    done
    for _ in $(seq 600); do # (at most a minute: CUDA's start-up)
        grep -q "step 3/" "$d/kill.0" && break
        kill -0 "${pids[0]}" 2>/dev/null || break
        sleep 0.1
    done
    if ! grep -q "step 3/" "$d/kill.0"; then
        kill "${pids[@]}" 2>/dev/null
        wait "${pids[@]}"
        tail -n 5 "$d/kill.0" "$d/kill.1"; echo "FAIL: the 2-rank job for the kill did not reach step 3"; rc=1
    else
        t0=$SECONDS
        kill -9 "${pids[1]}"
        wait "${pids[1]}" 2>/dev/null
        for _ in $(seq 450); do kill -0 "${pids[0]}" 2>/dev/null || break; sleep 0.1; done # 45 s at most
        took=$((SECONDS - t0))
        if kill -0 "${pids[0]}" 2>/dev/null; then
            kill -9 "${pids[0]}"
            echo "FAIL: rank 0 still ran $took s after rank 1 was killed (DT_TIMEOUT 20)"; rc=1
        elif wait "${pids[0]}"; then
            echo "FAIL: rank 0 exited 0 after rank 1 was killed"; rc=1
        elif ! grep -qE "rank 1\b" "$d/kill.0"; then
            tail -n 5 "$d/kill.0"; echo "FAIL: rank 0's error does not name rank 1"; rc=1
        else
            grep -E "rank 1\b" "$d/kill.0" | tail -n 2
            echo "rank 1 killed (SIGKILL) mid-step: rank 0 failed in $took s, naming it"
        fi
    fi
    rm -rf "$d"
    return "$rc"
}

s_attention() {
    local src=dev/cuda/attention_bench.cu exe
    [ -f "$src" ] || { echo "SKIP: $src not written yet"; exit 77; }
    exe=$(mktemp -d)/attention_bench
    # the command of the file's top comment
    nvcc -O3 -arch=sm_90 -std=c++17 -I src -I include -o "$exe" "$src" || exit 1 # it includes src/cuda/attention.cu
    "$exe"
}

# torch_row NAME ARGS...: bench/gpu/torch_gpt.py, its figures in OUT/NAME.json
torch_row() {
    local name=$1
    shift
    python3 bench/gpu/torch_gpt.py "$@" --json "$OUT/$name.json"
}
gpt_small() { # configs/gpt-small.json's shape as torch_gpt.py arguments
    python3 -c 'import json; c = json.load(open("configs/gpt-small.json"))
print(" ".join(f"--{k} {c[v]}" for k, v in (("layers", "layers"), ("dim", "dim"), ("heads", "heads"),
    ("context", "context"), ("vocab", "vocab"), ("batch", "batch_size"))))'
}
GPT2="--layers 12 --dim 768 --heads 12 --context 1024 --vocab 50304 --batch 8 --warmup 10 --steps 20"
export GPT2

# dtrain's own rows: the same models, batch and optimizer as the torch rows
# (AdamW, weight decay 0.1 on the matrices, clipping at 1.0), on text made of
# the repository's docs.  Each row's figure is the median tokens/s of the
# logging windows after the first (warm-up); OUT/dtrain-NAME.json.
dtrain_row() { # NAME CONFIG-SETS... (DTRAIN_RANKS=N: N ranks under dtrun)
    local name=$1 text="$OUT/bench-text.txt"
    shift
    need_bin dtrain
    [ -s "$text" ] || cat README.md docs/*.md >"$text"
    local launch=()
    [ "${DTRAIN_RANKS:-1}" -gt 1 ] && launch=("$BIN/dtrun" -n "$DTRAIN_RANKS" --no-prefix)
    "${launch[@]}" "$BIN/dtrain" train --set model=gpt --set data=text --set data_path="$text" --set optimizer=adamw \
        --set lr=0.0006 --set weight_decay=0.1 --set grad_clip=1.0 --set warmup_steps=5 --set eval_interval=0 \
        --set eval_batches=1 --set log_interval=5 --set device=cuda --set metrics_file="$OUT/dtrain-$name.jsonl" "$@" \
        >"$OUT/steps/dtrain-$name.out" 2>&1
    local rc=$?
    grep -E "device:|memory on rank|device memory|activation memory|step +[0-9]+/" "$OUT/steps/dtrain-$name.out" |
        tail -n 7
    [ $rc -eq 0 ] || { tail -n 5 "$OUT/steps/dtrain-$name.out"; return $rc; }
    python3 - "$OUT/dtrain-$name.jsonl" "$OUT/dtrain-$name.json" "$name" "$OUT/steps/dtrain-$name.out" "$OUT/gpu.csv" \
        "$@" <<'PY'
import json, os, re, statistics, sys
sys.path.insert(0, "bench/gpu")
import mfu  # the torch rows' formula and peaks
src, dst, name, log, gpu_csv = sys.argv[1:6]
args = sys.argv[6:]
rows = [json.loads(l) for l in open(src) if '"tokens_per_s"' in l]
rates = [r["tokens_per_s"] for r in rows[1:]] or [r["tokens_per_s"] for r in rows]
tps = statistics.median(rates)
# the run's shape: its --config file, then the --set keys in order (the trainer's own precedence)
cfg = {}
for flag, val in zip(args, args[1:]):
    if flag == "--config":
        cfg.update(json.load(open(val)))
    elif flag == "--set" and "=" in val:
        k, v = val.split("=", 1)
        cfg[k] = v
params = re.search(r"training gpt \((\d+) parameters\)", open(log).read())
gpus = [l.split(",")[0].strip() for l in open(gpu_csv) if l.strip()] if os.path.exists(gpu_csv) else []  # s_env's
precision = cfg.get("precision", "f32")
shape = all(k in cfg for k in ("layers", "context", "dim"))
m = mfu.mfu(int(params.group(1)), int(cfg["layers"]), int(cfg["context"]), int(cfg["dim"]), tps, precision,
            str(cfg.get("tf32", "false")).lower() == "true", gpus[0] if gpus else mfu.gpu_name()) \
    if params and shape else {}
out = {"name": name, "args": " ".join(args), "tokens_per_s": tps, "windows": rates, "steps": rows[-1]["step"],
       "final_loss": rows[-1]["loss"], "mfu": m.get("mfu"), "achieved_tflops": m.get("achieved_tflops"),
       "settings": {"params": int(params.group(1)) if params else None, "layers": cfg.get("layers"),
                    "dim": cfg.get("dim"), "context": cfg.get("context"), "dtype": precision,
                    "flops_per_token": m.get("flops_per_token"), "peak_tflops": m.get("peak_tflops"),
                    "device_name": m.get("device_name")}}
json.dump(out, open(dst, "w"), indent=1)
share = f"{100 * m['mfu']:.1f}%" if m.get("mfu") is not None else "n/a"
print(f"dtrain {name}: {tps:.0f} tokens/s (median of {len(rates)} windows), MFU {share} "
      f"({m.get('achieved_tflops', 0):.1f} TFLOP/s, peak {m.get('peak_tflops') or 'unknown'}), final loss {rows[-1]['loss']:.4f}")
PY
}
GPT2_DT="--config configs/gpt-small.json --set layers=12 --set dim=768 --set heads=12 --set context=1024 --set vocab=50304 --set batch_size=8 --set steps=25"
export GPT2_DT
s_dtrain_bench() {
    local small="--config configs/gpt-small.json --set steps=40"
    local rc=0
    # shellcheck disable=SC2086 # argument lists on purpose
    {
        dtrain_row gpt2-124m-bf16 $GPT2_DT --set precision=bf16 || rc=1
        DT_GEMM_TUNE=8 dtrain_row gpt2-124m-bf16-tuned $GPT2_DT --set precision=bf16 || rc=1
        dtrain_row gpt2-124m-f32 $GPT2_DT --set precision=f32 || rc=1
        dtrain_row gpt-small-f32 $small --set precision=f32 || rc=1
        dtrain_row gpt-small-bf16 $small --set precision=bf16 || rc=1
    }
    return $rc
}

# Communication over device buffers between 2 ranks sharing the GPU
# (issue 46): allreduce bus bandwidth by CUDA IPC and staged through host
# memory, PyTorch's gloo on CUDA tensors beside it (NCCL refuses two ranks on
# one GPU) with the GPU's copy bandwidth as the ceiling, and gpt-small data
# parallel on 2 ranks against 1 (the same batch per rank).
s_comm_bench() {
    need_bin dtrun
    need_bin dtbench
    need_bin dtrain
    # GPU_CHECK_STRATEGY_DEVICE=emu: the same without a GPU (a dry run of the step, no figures)
    local ipc rc=0 dev=${GPU_CHECK_STRATEGY_DEVICE:-cuda}
    for ipc in 1 0; do
        echo "dtbench allreduce, 2 ranks sharing the GPU, device buffers, DT_DEVICE_IPC=$ipc:"
        DT_DEVICE_IPC=$ipc "$BIN/dtrun" -n 2 --no-prefix "$BIN/dtbench" allreduce -b 1M -e 256M -f 4 -n 10 -w 3 \
            --device "$dev" || rc=1
    done
    python3 "$ROOT/bench/gpu/torch_allreduce.py" --ranks 2 --min 1M --max 256M --factor 4 \
        --device "$([ "$dev" = cuda ] && echo cuda || echo cpu)" || rc=1
    local small=(--config configs/gpt-small.json --set steps=40 --set precision=f32 --set device="$dev")
    dtrain_row gpt-small-f32-1rank "${small[@]}" || rc=1
    DTRAIN_RANKS=2 dtrain_row gpt-small-f32-2ranks "${small[@]}" || rc=1
    python3 - "$OUT/dtrain-gpt-small-f32-1rank.json" "$OUT/dtrain-gpt-small-f32-2ranks.json" <<'PY' || rc=1
import json, sys
one, two = (json.load(open(p))["tokens_per_s"] for p in sys.argv[1:3])
print(f"gpt-small f32 data parallel on one GPU: 1 rank {one:.0f} tokens/s, 2 ranks {two:.0f} "
      f"({two / one:.2f}x; the same batch per rank)")
PY
    return $rc
}

# Every kernel of one GPT-2 bf16 step, timed by Nsight Compute (kernels
# serialised; one metric, so no replays): the reference for where the step
# goes (the kernel profile above once put 8 ms of host time on the QKV
# product's entry, whose kernels took 0.1 ms).
s_kernel_ncu() {
    need_bin dtrain
    local ncu text="$OUT/bench-text.txt" args=${GPT2_DT/--set steps=25/--set steps=3}
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
    [ -n "$ncu" ] || { echo "SKIP: no ncu (Nsight Compute) here"; return 77; }
    [ -s "$text" ] || cat README.md docs/*.md >"$text"
    # shellcheck disable=SC2086 # args: an argument list on purpose
    "$ncu" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
        --log-file "$OUT/steps/kernel-ncu.csv" "$BIN/dtrain" train --set model=gpt --set data=text \
        --set data_path="$text" --set optimizer=adamw --set eval_interval=0 --set log_interval=1 --set device=cuda \
        $args --set precision=bf16 >"$OUT/steps/kernel-ncu.out" 2>&1 ||
        { tail -n 20 "$OUT/steps/kernel-ncu.out"; return 1; }
    if ! grep -q gpu__time_duration "$OUT/steps/kernel-ncu.csv"; then
        echo "SKIP: ncu read no kernel times here: $(grep -m 1 -i 'error' "$OUT/steps/kernel-ncu.csv" "$OUT/steps/kernel-ncu.out")"
        return 77
    fi
    python3 "$ROOT/scripts/ncu-step-table.py" "$OUT/steps/kernel-ncu.csv"
}

# Where dtrain's GPT-2 step goes: every entry of the cuda table timed
# between device waits (src/tensor/profile.c), 6 steps.
s_kernel_profile() {
    need_bin dtrain
    local text="$OUT/bench-text.txt" args=${GPT2_DT/--set steps=25/--set steps=6}
    [ -s "$text" ] || cat README.md docs/*.md >"$text"
    # shellcheck disable=SC2086 # args: an argument list on purpose
    DT_KERNEL_PROFILE=1 "$BIN/dtrain" train --set model=gpt --set data=text --set data_path="$text" \
        --set optimizer=adamw --set eval_interval=0 --set eval_batches=1 --set log_interval=1 --set device=cuda \
        $args --set precision=bf16 >"$OUT/steps/kernel-profile.out" 2>&1 ||
        { tail -n 20 "$OUT/steps/kernel-profile.out"; return 1; }
    sed -n '/^kernel profile/,$p' "$OUT/steps/kernel-profile.out"
    # the products' rates with cuBLASLt's algorithms chosen by timing
    # shellcheck disable=SC2086
    DT_GEMM_TUNE=8 DT_KERNEL_PROFILE=1 "$BIN/dtrain" train --set model=gpt --set data=text --set data_path="$text" \
        --set optimizer=adamw --set eval_interval=0 --set eval_batches=1 --set log_interval=1 --set device=cuda \
        $args --set precision=bf16 >"$OUT/steps/kernel-profile-tuned.out" 2>&1 ||
        { tail -n 20 "$OUT/steps/kernel-profile-tuned.out"; return 1; }
    echo "with DT_GEMM_TUNE=8:"
    sed -n '/^kernel profile/,$p' "$OUT/steps/kernel-profile-tuned.out" | grep -E 'gemm|^kernel profile'
}

s_memcheck() {
    need_bin gpu_kernels
    local cs
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null)
    [ -n "$cs" ] || { echo "SKIP: compute-sanitizer not found"; exit 77; }
    # API errors off: gpu_kernels asks for 1 PiB on purpose and checks the
    # error itself (every other CUDA call's error fails its check too).
    "$cs" --tool memcheck --report-api-errors no --error-exitcode 99 "$BIN/gpu_kernels" --quick
    local rc=$?
    [ "$rc" = 99 ] && echo "memcheck reported errors (above)"
    return "$rc"
}

export -f s_env s_build need_bin s_gpu_kernels s_coll_device s_nccl_world1 s_trajectory s_strategies s_attention torch_row gpt_small dtrain_row s_dtrain_bench s_kernel_profile s_kernel_ncu s_comm_bench s_memcheck

# ---- the runner ----

START=$SECONDS
: >"$OUT/steps.tsv"
failed=0

record() { # name status seconds note
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$OUT/steps.tsv"
    printf -- '---- %s: %s (%s s)%s\n' "$1" "$2" "$3" "${4:+: $4}"
    [ "$2" = fail ] && failed=1
    return 0
}

# step NAME LIMIT COMMAND...: COMMAND (a function above, with its arguments)
# under `timeout`, at most the time left of the budget.
step() {
    local name=$1 limit=$2 left rc t0 note=""
    shift 2
    [[ "$name" =~ $ONLY ]] || return 0
    left=$((BUDGET - (SECONDS - START)))
    if [ $left -lt 15 ]; then
        record "$name" skip 0 "out of time: the budget of $BUDGET s is spent"
        return 0
    fi
    [ "$limit" -gt $left ] && limit=$left
    printf '\n==== [%s, %d s in] %s (limit %d s)\n' "$(date +%H:%M:%S)" $((SECONDS - START)) "$name" "$limit"
    t0=$SECONDS
    timeout -k 10 "$limit" bash -c '"$@"' _ "$@" </dev/null 2>&1 | tee "$OUT/steps/$name.log"
    rc=${PIPESTATUS[0]}
    case $rc in
    0) record "$name" pass $((SECONDS - t0)) "" ;;
    77) record "$name" skip $((SECONDS - t0)) "$(tail -n 1 "$OUT/steps/$name.log" | sed 's/^SKIP: //')" ;;
    124 | 137) record "$name" fail $((SECONDS - t0)) "timed out after $limit s" ;;
    *)
        note=$(grep -m1 -E '^FAIL' "$OUT/steps/$name.log" || grep -v '^ *$' "$OUT/steps/$name.log" | tail -n 1)
        note=$(printf '%s' "$note" | cut -c1-200)
        record "$name" fail $((SECONDS - t0)) "exit $rc${note:+: $note}"
        ;;
    esac
}

main() {
    echo "gpu-check: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $ROOT, budget $BUDGET s, output $OUT"
    step env 30 s_env
    step build 240 s_build
    if [ -s "$OUT/bin-dir" ]; then
        BIN=$(cat "$OUT/bin-dir")
        case $BIN in */.gpu/bin) export LD_LIBRARY_PATH="$ROOT/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;; esac
        export BIN
        echo "programs: $BIN"
    fi
    step gpu_kernels 120 s_gpu_kernels
    step coll-device 120 s_coll_device
    step nccl_world1 60 s_nccl_world1
    step trajectory 150 s_trajectory
    step strategies 150 s_strategies
    step dtrain-bench 240 s_dtrain_bench
    step kernel-profile 90 s_kernel_profile
    step kernel-ncu 90 s_kernel_ncu
    step comm-bench 150 s_comm_bench
    local small
    small=$(gpt_small)
    # shellcheck disable=SC2086 # GPT2 and small: argument lists on purpose
    {
        step torch-gpt2-124m-bf16 90 torch_row torch-gpt2-124m-bf16 $GPT2 --dtype bf16
        step torch-gpt2-124m-f32 120 torch_row torch-gpt2-124m-f32 $GPT2 --dtype f32 --tf32 off
        step torch-gpt-small-f32 60 torch_row torch-gpt-small-f32 $small --warmup 10 --steps 30 --dtype f32
        step torch-gpt-small-bf16 60 torch_row torch-gpt-small-bf16 $small --warmup 10 --steps 30 --dtype bf16
    }
    step memcheck 150 s_memcheck
    # shellcheck disable=SC2086
    step torch-gpt2-124m-bf16-compile 240 torch_row torch-gpt2-124m-bf16-compile $GPT2 --dtype bf16 --compile
    step attention-playground 120 s_attention
    summary
    echo
    column -t -s $'\t' "$OUT/steps.tsv" 2>/dev/null || cat "$OUT/steps.tsv"
    echo "gpu-check: $((SECONDS - START)) s; $(grep -c $'\tpass\t' "$OUT/steps.tsv") passed," \
        "$(grep -c $'\tfail\t' "$OUT/steps.tsv") failed, $(grep -c $'\tskip\t' "$OUT/steps.tsv") skipped;" \
        "summary in $OUT/gpu-check.json"
    return $failed
}

# OUT/gpu-check.json from what the steps left.
summary() {
    local commit="unknown"
    # the programs' commit: the bundle's when the steps ran it (the checkout
    # a device machine receives may carry an older .git than its files)
    if grep -q '/.gpu/bin$' "$OUT/bin-dir" 2>/dev/null && [ -s .gpu/GIT_COMMIT ]; then
        commit="$(tr '\n' ' ' <.gpu/GIT_COMMIT | sed 's/ *$//') (prebuilt bundle)"
    elif [ -d .git ] && git rev-parse HEAD >/dev/null 2>&1; then
        commit=$(git rev-parse HEAD)
        git status --porcelain 2>/dev/null | grep -q . && commit="$commit dirty"
    elif [ -s GIT_COMMIT ]; then
        commit=$(tr '\n' ' ' <GIT_COMMIT | sed 's/ *$//')
    elif [ -s .gpu/GIT_COMMIT ]; then
        commit=$(tr '\n' ' ' <.gpu/GIT_COMMIT | sed 's/ *$//')
    fi
    python3 - "$OUT" "$commit" "$BUDGET" $((SECONDS - START)) <<'PY' || echo "gpu-check: the JSON summary failed (python3)"
import glob, json, os, re, sys, time
out, commit, budget, elapsed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def read(name):
    try:
        with open(os.path.join(out, name)) as f:
            return f.read()
    except OSError:
        return ""
steps = []
for line in read("steps.tsv").splitlines():
    name, status, seconds, note = (line.split("\t", 3) + [""] * 4)[:4]
    steps.append({"name": name, "status": status, "seconds": int(seconds or 0), "note": note})
gpus = [dict(zip(("name", "driver", "memory", "compute_cap"), (x.strip() for x in l.split(","))))
        for l in read("gpu.csv").splitlines() if l.strip()]
m = re.search(r"release ([0-9.]+), V([0-9.]+)", read("nvcc.txt"))
k = re.search(r"gpu_kernels: (\d+) checks, (\d+) ok, (\d+) failed", read("steps/gpu_kernels.log"))
bench = {}
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    row = os.path.basename(path)[:-5]
    if row == "gpu-check":
        continue
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        bench[row] = {"error": str(e)}
        continue
    s, best = d.get("settings", {}), d.get("best") or d  # torch_gpt.py's layout, or the figures at the top
    bench[row] = {"best": {k: best.get(k) for k in ("optimizer", "tokens_per_s", "ms_per_step", "peak_memory_bytes",
                                                   "mfu", "achieved_tflops", "first_loss", "last_loss")},
                  "variants": d.get("variants", []),
                  "settings": {k: s.get(k) for k in ("layers", "dim", "heads", "context", "vocab", "batch", "dtype",
                                                     "compile", "tf32", "params", "flops_per_token", "peak_tflops",
                                                     "device_name", "torch", "cuda")}}
summary = {"commit": commit, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "gpus": gpus,
           "nvcc": {"release": m.group(1), "version": m.group(2)} if m else None,
           "budget_s": budget, "elapsed_s": elapsed, "steps": steps,
           "gpu_kernels": dict(zip(("checks", "ok", "failed"), map(int, k.groups()))) if k else None,
           "benchmarks": bench,
           "failed": [s["name"] for s in steps if s["status"] == "fail"]}
with open(os.path.join(out, "gpu-check.json"), "w") as f:
    json.dump(summary, f, indent=1)
PY
}

main 2>&1 | tee "$OUT/gpu-check.log"
exit "${PIPESTATUS[0]}"
