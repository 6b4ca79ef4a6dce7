#!/usr/bin/env python3
"""Keep the rows a ROWS-filtered run of bench/train/run.sh did not measure.

usage: merge_rows.py RESULTS.md NEW_SECTION_FILE "## Title"

The new section's table rows replace the old section's rows of the same
model and threads; the old rows it lacks stay, in the old order, marked
with the date they were measured and, when it was another, the CPU (the
old section's "Measured DATE on `CPU`" line).
The section file is rewritten in place.
"""
import re
import sys

path, section_file, title = sys.argv[1:4]
new = open(section_file).read()
text = open(path).read()
start = text.find(title + "\n")
if start < 0:
    sys.exit(0)
nxt = text.find("\n## ", start + len(title))
old = text[start:nxt if nxt >= 0 else len(text)]
m = re.search(r"Measured (\d{4}-\d{2}-\d{2}) on `([^`]*)`", old)
cpu_now = re.search(r"Measured \S+ on `([^`]*)`", new)
date = m.group(1) if m else "earlier"
if m and cpu_now and m.group(2) != cpu_now.group(1):
    date += " on " + m.group(2)


def rows(section):
    return [l for l in section.splitlines() if l.startswith("| ") and not l.startswith("| model") and "---" not in l]


def key(row):
    cells = [c.strip() for c in row.strip("|").split("|")]
    return re.sub(r" \(measured [^)]*\)$", "", cells[0]), cells[1]


fresh = {key(r): r for r in rows(new)}
merged, seen = [], set()
for r in rows(old):
    k = key(r)
    if k in fresh:
        merged.append(fresh[k])
        seen.add(k)
    elif "(measured " in r.split("|")[1]:
        merged.append(r)
    else:
        cells = r.split("|")
        amx = ", AMX" if "bf16" in cells[1] and "amx" in old.split("flags:", 1)[-1].split(")", 1)[0] else ""
        cells[1] = cells[1].rstrip() + f" (measured {date}{amx}) "
        merged.append("|".join(cells))
merged += [r for k, r in fresh.items() if k not in seen]
lines, out, done = new.splitlines(), [], False
for l in lines:
    if l in fresh.values():
        if not done:
            out += merged
            done = True
        continue
    out.append(l)
if not done:  # no row measured: nothing to merge into
    sys.exit(0)
open(section_file, "w").write("\n".join(out) + "\n")
