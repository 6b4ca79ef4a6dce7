#!/usr/bin/env python3
"""Replace (or append) one "## " section of bench/RESULTS.md.

usage: update_results.py RESULTS.md SECTION_FILE "## Title"
"""
import os
import sys

path, section_file, title = sys.argv[1:4]
new = open(section_file).read()
text = open(path).read() if os.path.exists(path) else "# Benchmark results\n\nEach section names the command that produced it.\n"
start = text.find(title + "\n")
if start < 0:
    text = text.rstrip("\n") + "\n\n" + new
else:
    nxt = text.find("\n## ", start + len(title))
    text = text[:start] + new + (text[nxt + 1:] if nxt >= 0 else "")
open(path, "w").write(text)
