#!/usr/bin/env python3
"""One training step's GPU kernels, from Nsight Compute's CSV.

Usage: scripts/ncu-step-table.py NCU_CSV [STEP_MARKER]

NCU_CSV is the output of `ncu --csv --metrics gpu__time_duration.sum
--log-file NCU_CSV PROGRAM...` (scripts/gpu-check.sh's kernel-ncu step).
A step runs from one launch of the marker kernel (default xent_rows, the
cross-entropy: once a step) to the next; the second such window is taken
(the first step builds plans and grows buffers). Prints each kernel and
grid with its calls and time, the costliest first, and the step's total.
ncu serialises the kernels, so the total is the GPU's work without overlap
between kernels, not the step's wall time.
"""
import collections
import csv
import sys


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) >= 2 else 2
    marker = sys.argv[2] if len(sys.argv) > 2 else "xent_rows"
    header, launches = None, []
    with open(sys.argv[1], newline="") as f:
        for row in csv.reader(f):
            if row and row[0] == "ID":
                header = row
            elif header and len(row) == len(header):
                r = dict(zip(header, row))
                if r.get("Metric Name") == "gpu__time_duration.sum":
                    launches.append((r["Kernel Name"].split("(")[0].strip(), r["Grid Size"],
                                     float(r["Metric Value"].replace(",", "")) / 1e3))
    marks = [i for i, (name, _, _) in enumerate(launches) if name == marker]
    if len(marks) < 3:
        print(f"ncu-step-table: {len(launches)} kernel launches with {len(marks)} of the marker {marker}: "
              "need 3 (two whole steps)", file=sys.stderr)
        return 1
    step = launches[marks[1]:marks[2]]
    kinds = collections.defaultdict(lambda: [0, 0.0])
    for name, grid, us in step:
        kinds[(name, grid)][0] += 1
        kinds[(name, grid)][1] += us
    total = sum(v[1] for v in kinds.values())
    print(f"one step's kernels (ncu gpu__time_duration, kernels serialised): {total / 1e3:.2f} ms, "
          f"{len(step)} launches")
    print("    ms  share  calls  kernel  grid")
    for (name, grid), (calls, us) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        print(f"{us / 1e3:6.3f} {100 * us / total:5.1f}% {calls:5d}  {name}  {grid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
