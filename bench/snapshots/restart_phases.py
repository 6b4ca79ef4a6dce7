#!/usr/bin/env python3
"""The phases of a restart from a DT_RESTART_TRACE file (dt_phase_mark's
lines "<unix time> <text>" of dtrun and the ranks; a line "<time> kill" the
benchmark's fault).

usage: restart_phases.py FILE

Prints each phase after the kill (or the first failure dtrun saw): seconds
from the kill to the first and to the last process that reached it (the
ranks' marks merged over the ranks: "rank * ..."), in order of the last.
"""
import re, sys

lines = []
for l in open(sys.argv[1]):
    t, _, text = l.rstrip("\n").partition(" ")
    try:
        lines.append((float(t), text))
    except ValueError:
        pass
lines.sort()
t0 = next((t for t, x in lines if x == "kill"), None) or next((t for t, x in lines if " ended (" in x), None)
if t0 is None or len(lines) < 2:
    sys.exit(f"{sys.argv[1]}: no phases (a build without DT_RESTART_TRACE?)")
phases = {}
for t, x in lines:
    if t < t0 or x == "kill":
        continue
    key = re.sub(r"^rank \d+ gen \d+ ", "rank * ", re.sub(r"^rank \d+ ", "rank * ", x))
    key = re.sub(r"^dtrun node (\d+) rank \d+ ended \(wait status \d+\)", r"dtrun node \1 a rank ended", key)
    first, last, n = phases.get(key, (t, t, 0))
    phases[key] = (min(first, t), max(last, t), n + 1)
print(f"{'from the kill, s':>18}  phase (first .. last process; count)")
for key, (first, last, n) in sorted(phases.items(), key=lambda kv: kv[1][1]):
    span = f"{first - t0:6.3f} .. {last - t0:6.3f}" if n > 1 else f"{'':10}{last - t0:6.3f}"
    print(f"{span:>18}  {key} ({n})")
