#!/usr/bin/env bash
# This machine's floating-point peak per core (build/bin/peak_flops, best of
# RUNS runs of its own best-of-3 passes): f32 FMA, AVX512_BF16 dot products and
# AMX tile products where the CPU has them, on 1 and all cores.  Writes the
# "This machine's floating-point peak" section of bench/RESULTS.md (RESULTS=FILE
# writes elsewhere); the training tables quote their share of these figures.
#
#   bench/kernels/peak.sh [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${1:-3}
RESULTS=${RESULTS:-bench/RESULTS.md}
[ -x build/bin/peak_flops ] || { echo "build first: make build" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-peak.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cores=$(nproc)
for r in $(seq "$RUNS"); do build/bin/peak_flops "$cores" 0.5 >>"$WORK/runs.txt"; done
section="## This machine's floating-point peak"
python3 - "$WORK/runs.txt" "$RUNS" "$cores" "$(date -u +%Y-%m-%d)" \
    "$(lscpu | sed -nE 's/^Model name: +//p' | head -1)" \
    "$(grep -m1 -oE '\b(avx2|fma|avx512f|avx512_bf16|amx_bf16|amx_tile)\b' -w /proc/cpuinfo | sort -u | tr '\n' ' ')" \
    >"$WORK/section.md" <<'PY'
import re, sys
path, runs, cores, day, cpu, flags = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
best = {}
for line in open(path):
    m = re.match(r"(.+): (\d+) threads?: ([\d.]+) GFLOP/s", line)
    if m:
        k = (m.group(1), int(m.group(2)))
        best[k] = max(best.get(k, 0.0), float(m.group(3)))
kernels = list(dict.fromkeys(k for k, _ in best))
print("## This machine's floating-point peak\n")
print(f"Measured {day} on `{cpu}`, {cores} cores (flags: {flags.strip()}). `build/bin/peak_flops {cores} 0.5` "
      f"(bench/kernels/peak_flops.c: independent chains of each instruction per thread, accumulators in registers, "
      f"the kernels chosen from the CPU's flags at run time), the best of {runs} runs. "
      f"Command: `bench/kernels/peak.sh {runs}`\n")
print(f"| kernel | 1 thread (GFLOP/s) | {cores} threads (GFLOP/s) | per core at {cores} |")
print("| --- | ---: | ---: | ---: |")
for k in kernels:
    one, all_ = best.get((k, 1), 0.0), best.get((k, cores), 0.0)
    print(f"| {k} | {one:.1f} | {all_:.1f} | {all_ / cores:.1f} |")
print()
print("A multiply-add counts 2 flops. The training tables quote their share of the f32 figure (and of the bf16 "
      "one for bf16 runs). On this CPU a VDPBF16PS issues at half the f32 FMA rate, so AVX512_BF16 alone is "
      "slower than f32; AMX tiles are an order of magnitude faster, which is what bf16 training uses here.")
PY
cat "$WORK/section.md"
python3 bench/update_results.py "$RESULTS" "$WORK/section.md" "$section"
