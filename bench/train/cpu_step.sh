#!/usr/bin/env bash
# CPU milliseconds per training step, for a machine shared with other work
# (issue 48): wall time there measures the other tenants; CPU time leaves out
# the time the process waited for a core (not the slowing by tenants sharing
# the core's caches), so it still spreads 10-20%: alternate variants, take
# medians.  The user + system time of a run of STEPS more steps, less that of
# a short run, divided by STEPS (start-up cancels out).
#
#   bench/train/cpu_step.sh dtrain|torch MODEL f32|bf16 [STEPS=8] [THREADS=1]
#
# MODEL: gpt-mini or gpt-small (configs/MODEL.json; torch_train.py's model).
# dtrain's bf16 takes DT_BF16_GEMM from the environment; give PyTorch the
# OpenBLAS kernels dtrain's start line names (OPENBLAS_CORETYPE=Cooperlake on
# a Zen 5), as run.sh does.  At 2 threads the
# figure includes the pools' spinning, so compare 1-thread figures only.
set -euo pipefail
cd "$(dirname "$0")/../.."
prog=$1 model=$2 prec=$3 steps=${4:-8} threads=${5:-1}
cpu() { /usr/bin/time -f "%U %S" "$@" 2>&1 >/dev/null | tail -1 | awk '{print $1 + $2}'; }
run() { # extra steps -> CPU seconds
    if [ "$prog" = dtrain ]; then
        cpu build/bin/dtrain train --config "configs/$model.json" --set steps=$((3 + $1)) --set threads="$threads" \
            --set log_interval=100 --set eval_interval=0 --set eval_batches=1 --set checkpoint_dir= \
            --set precision="$prec"
    else
        local flags=()
        [ "$prec" = bf16 ] && flags=(--bf16)
        cpu /usr/bin/python3 bench/train/torch_train.py "$model" "$threads" $((1 + $1)) "${flags[@]}"
    fi
}
short=$(run 0)
long=$(run "$steps")
python3 -c "print(f'{($long - $short) / $steps * 1000:.1f}')"
