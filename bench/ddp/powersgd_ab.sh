#!/usr/bin/env bash
# PowerSGD's compute in a training step (issue 51): one process, gpt-mini,
# 1 thread, compression from the first step (with one rank the collectives
# cost nothing, so the step time over grad_compression=none is the
# compressor's compute), DT_POWERSGD_KERNELS=reference and =fast and no
# compression alternating, REPS rounds; prints each run's median ms per
# step (of STEPS after 5 warm-up) and its CPU time (user + system, start-up
# and all STEPS + 5 steps) per step, then the medians of the runs: on a
# loaded machine the CPU time is the steadier of the two.
#
#   bench/ddp/powersgd_ab.sh [STEPS=20] [REPS=5] [RANK=32]
#   NICE=19   run under nice (a shared machine)
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-20}
REPS=${2:-5}
RANK=${3:-32}
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-psgd-ab.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
CFG=(--config configs/gpt-mini.json --set threads=1 --set log_interval=1 --set eval_interval=0 --set eval_batches=1
     --set steps=$((STEPS + 5)))
ms_per_step() { # the median step's compute_s (the whole step: one rank has no communication)
    python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][5:]
print(f"{statistics.median(r['compute_s'] for r in rows) * 1000:.1f}")
PY
}
run() { # name, DT_POWERSGD_KERNELS, trainer args...: "median ms per step, the run's CPU ms per step"
    local name=$1 kernels=$2 cpu
    shift 2
    cpu=$( { TIMEFORMAT='%U %S'; time DT_POWERSGD_KERNELS=$kernels nice -n "${NICE:-0}" $BIN/dtrain train \
        "${CFG[@]}" "$@" --set metrics_file="$WORK/$name.jsonl" >/dev/null 2>"$WORK/err"; } 2>&1) ||
        { cat "$WORK/err" >&2; exit 1; }
    echo "$(ms_per_step "$WORK/$name.jsonl") $(echo "$cpu" | awk -v n=$((STEPS + 5)) '{ printf "%.1f", ($1 + $2) / n * 1000 }')"
    rm -f "$WORK/$name.jsonl"
}
PS=(--set grad_compression=powersgd --set powersgd_rank=$RANK --set compress_start_step=0)
for ((i = 1; i <= REPS; i++)); do
    # the order turns each round, so that no configuration always runs first
    for c in $( ((i % 2)) && echo "none reference fast" || echo "fast reference none"); do
        case $c in
        none) echo "none $(run none fast --set grad_compression=none)" ;;
        *) echo "$c $(run $c $c "${PS[@]}")" ;;
        esac
    done
done | tee "$WORK/all"
python3 - "$WORK/all" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, ms, cpu = line.split()
    runs.setdefault(name, []).append((float(ms), float(cpu)))
for i, what in enumerate(("step time (median step of each run)", "CPU time of the whole run / steps")):
    med = {k: statistics.median(x[i] for x in v) for k, v in runs.items()}
    ref, fast = med["reference"] - med["none"], med["fast"] - med["none"]
    print(f"{what}, medians, ms per step: " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()))
    print(f"  PowerSGD over none: reference {ref:.1f} ms, fast {fast:.1f} ms, fast / reference {fast / ref:.2f}")
PY
