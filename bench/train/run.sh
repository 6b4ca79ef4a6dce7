#!/usr/bin/env bash
# Training throughput of dtrain and PyTorch side by side, in one run, on the
# same models and data; writes the "training throughput" section of
# bench/RESULTS.md.
#
#   bench/train/run.sh [STEPS=30]
#
# gpt-mini and gpt-small (batch 16 x 128): tokens/s with 1 and 2 threads;
# PyTorch at 2 threads both as shipped and with OMP_WAIT_POLICY=PASSIVE (its
# best-tuned figure).  mlp and cnn (batch 128): samples/s at 1 thread, and the
# seconds per 60,000-image epoch that implies.  The first 5 steps of every run
# are warm-up.  GFLOP/s for the GPTs counts 6 x parameters x tokens (the
# matmul work of forward and backward) plus attention.
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-30}
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first: make build" >&2; exit 2; }
/usr/bin/python3 -c "import torch" || { echo "needs python3-torch (scripts/setup.sh)" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

dtrain_rate() { # config threads -> items/s over steps 6..STEPS+5
    local cfg=$1 threads=$2
    $BIN/dtrain train --config "$cfg" --set steps=$((STEPS + 5)) --set threads=$threads --set log_interval=1 \
        --set eval_interval=0 --set eval_batches=1 --set metrics_file="$WORK/m.jsonl" >/dev/null
    python3 - "$WORK/m.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
key = "tokens_per_s" if "tokens_per_s" in rows[0] else "samples_per_s"
timed = rows[5:]
# log_interval is 1: every row is one step of the same size, so the run's rate
# (all items over all wall time) is the harmonic mean of the per-step rates.
print(f"{len(timed) / sum(1.0 / r[key] for r in timed):.1f}")
PY
}

torch_rate() { # model threads [passive]
    if [ "${3:-}" = passive ]; then
        OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/train/torch_train.py "$1" "$2" "$STEPS" | awk '{print $3}'
    else
        /usr/bin/python3 bench/train/torch_train.py "$1" "$2" "$STEPS" | awk '{print $3}'
    fi
}

ratio() { python3 -c "print(f'{$1 / $2:.2f}')"; }
gflops() { python3 -c "print(f'{$1 * (6 * $2 + 6 * $3 * 128 * $4) / 1e9:.1f}')"; } # rate params layers dim

section="## Training throughput: dtrain vs PyTorch"
{
    echo "$section"
    echo
    echo "Measured $(date -u +%Y-%m-%d) on this 2-core VM with PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')"
    echo "(Debian), $STEPS timed steps after 5 warm-up steps. PyTorch's threads are torch.set_num_threads plus"
    echo "OMP_NUM_THREADS and OPENBLAS_NUM_THREADS (Debian's OpenBLAS pool ignores the first and otherwise"
    echo "takes every core). Command: \`bench/train/run.sh $STEPS\`"
    echo
    echo "| model | threads | dtrain | PyTorch | PyTorch tuned (OMP_WAIT_POLICY=PASSIVE) | dtrain / best PyTorch | dtrain GFLOP/s | dtrain / its 1 thread |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for m in gpt-mini gpt-small; do
        case $m in gpt-mini) params=3257856 layers=4 dim=256 ;; gpt-small) params=10783488 layers=6 dim=384 ;; esac
        for t in 1 2; do
            d=$(dtrain_rate configs/$m.json $t)
            p=$(torch_rate $m $t)
            if [ $t = 2 ]; then pp=$(torch_rate $m $t passive); else pp=$p; fi
            best=$(python3 -c "print(max($p, $pp))")
            if [ $t = 1 ]; then d1=$d; speedup="—"; else speedup=$(ratio "$d" "$d1"); fi
            echo "| $m (tokens/s) | $t | $d | $p | $pp | $(ratio "$d" "$best") | $(gflops "$d" $params $layers $dim) | $speedup |"
        done
    done
    for m in mlp cnn; do
        d=$(dtrain_rate configs/$m.json 1)
        p=$(torch_rate $m 1)
        echo "| $m (samples/s; s/epoch dtrain $(python3 -c "print(f'{60000 / $d:.1f}')"), PyTorch $(python3 -c "print(f'{60000 / $p:.1f}')")) | 1 | $d | $p | — | $(ratio "$d" "$p") | — | — |"
    done
    echo
    echo "GFLOP/s counts 6 x parameters x tokens plus attention. For scale: this AMD EPYC core (AVX-512 with"
    echo "full-width FMA: avx512_vp2intersect and avx_vnni in /proc/cpuinfo mark Zen 5) does 64 fp32 flops per"
    echo "cycle, 134 GFLOP/s at the nominal 2.1 GHz and more under boost. dtrain runs OpenBLAS's AVX-512 kernels"
    echo "(OpenBLAS 0.3.21 alone would pick its AVX2 Haswell ones; see docs/engine.md)."
} >"$WORK/section.md"
cat "$WORK/section.md"

python3 bench/update_results.py bench/RESULTS.md "$WORK/section.md" "$section"
