#!/usr/bin/env python3
"""Keep the rows a ROWS-filtered run of bench/train/run.sh did not measure,
and the rows measured on other CPUs.

usage: merge_rows.py RESULTS.md NEW_SECTION_FILE "## Title"

A row's CPU is the one named in its mark "(measured DATE on CPU)", else
its section's ("Measured DATE on `CPU`").  The new section's rows replace
the old rows of the same model and threads measured on the same CPU; old
rows they do not replace stay in the old order, each marked with its date
and, when another than the new section's, its CPU (and AMX for a bf16 row
of a CPU with AMX).  The section file is rewritten in place.
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
head = re.search(r"Measured (\d{4}-\d{2}-\d{2}) on `([^`]*)`", old)
old_date, old_cpu = (head.group(1), head.group(2)) if head else ("earlier", "")
now = re.search(r"Measured \S+ on `([^`]*)`", new)
new_cpu = now.group(1) if now else ""
old_amx = "amx" in old.split("flags:", 1)[-1].split(")", 1)[0]
MARK = re.compile(r" \(measured ([^)]*)\)$")


def rows(section):
    return [l for l in section.splitlines() if l.startswith("| ") and not l.startswith("| model") and "---" not in l]


def cells(row):
    return [c.strip() for c in row.strip("|").split("|")]


def key(row):
    c = cells(row)
    return MARK.sub("", c[0]), c[1]


def cpu_of(row):
    m = MARK.search(cells(row)[0])
    if m and " on " in m.group(1):
        return m.group(1).split(" on ", 1)[1].replace(", AMX", "")
    return old_cpu


def marked(row):
    c = row.split("|")
    if MARK.search(c[1].rstrip()):
        return row
    where = "" if old_cpu == new_cpu else f" on {old_cpu}"
    amx = ", AMX" if where and old_amx and "bf16" in c[1] else ""
    c[1] = c[1].rstrip() + f" (measured {old_date}{where}{amx}) "
    return "|".join(c)


fresh = {key(r): r for r in rows(new)}
merged, used = [], set()
for r in rows(old):
    k = key(r)
    if cpu_of(r) == new_cpu:
        if k in fresh and k not in used:
            merged.append(fresh[k])
            used.add(k)
        elif k not in fresh:
            merged.append(marked(r))
    else:
        if k in fresh and k not in used:
            merged.append(fresh[k])
            used.add(k)
        merged.append(marked(r))
merged += [r for k, r in fresh.items() if k not in used]
out, done = [], False
for line in new.splitlines():
    if line in fresh.values():
        if not done:
            out += merged
            done = True
        continue
    out.append(line)
if done:
    open(section_file, "w").write("\n".join(out) + "\n")
