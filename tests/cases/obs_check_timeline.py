"""Check a merged dtrun --timeline file (tests/cases/obs_timeline.sh).

    obs_check_timeline.py FILE RANKS KIND

KIND ddp: every rank has data wait, forward, backward, recompute, optimizer
and collective spans and bucket spans, and some bucket span overlaps a
backward span on every rank; rank 0 has a checkpoint write.  KIND pp: every
rank has pipeline transfer spans.  Prints what it found; exits 1 naming
what is missing."""
import json
import sys

path, ranks, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(path) as f:
    doc = json.load(f)  # valid JSON, or this raises
events = doc["traceEvents"]
bad = []
procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
if sorted(procs) != list(range(ranks)):
    bad.append(f"processes {sorted(procs)}, expected ranks 0..{ranks - 1}")
for pid, name in procs.items():
    if not name.endswith(f":{pid}"):
        bad.append(f"process {pid} is named {name!r}, expected host:{pid}")
threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
for e in events:
    if e.get("ph") in ("X", "b", "e"):
        for key in ("pid", "tid", "ts", "cat", "name"):
            if key not in e:
                bad.append(f"an event without {key}: {e}")
        if e["ph"] == "X" and not e["dur"] >= 0:
            bad.append(f"negative duration: {e}")
        if (e["pid"], e["tid"]) not in threads:
            bad.append(f"an event on an unnamed thread: {e}")
            break


def spans(rank, cat):
    return [(e["ts"], e["ts"] + e["dur"], e) for e in events if e.get("ph") == "X" and e["pid"] == rank and e["cat"] == cat]


def buckets(rank):
    begin = {}
    out = []
    for e in events:
        if e.get("pid") != rank or e.get("cat") != "bucket":
            continue
        if e["ph"] == "b":
            begin[e["id"]] = e
        elif e["ph"] == "e":
            b = begin.pop(e["id"], None)
            if b is None:
                bad.append(f"rank {rank}: a bucket end without its start: {e}")
            else:
                out.append((b["ts"], e["ts"], b))
    if begin:
        bad.append(f"rank {rank}: bucket starts without an end: {list(begin)}")
    return out


for r in range(ranks):
    if kind == "ddp":
        want = ["data", "forward", "backward", "recompute", "optimizer", "comm"]
        if r == 0:
            want.append("checkpoint")
        counts = {cat: len(spans(r, cat)) for cat in want}
        for cat, n in counts.items():
            if n == 0:
                bad.append(f"rank {r}: no {cat} span")
        bk = buckets(r)
        if not bk:
            bad.append(f"rank {r}: no bucket span")
        coll = [s for s in spans(r, "comm") if s[2]["name"] == "allreduce"]
        for s in coll[:1]:
            a = s[2]["args"]
            if not (a.get("comm") and a.get("algorithm") not in (None, "-") and a.get("bytes", 0) > 0):
                bad.append(f"rank {r}: a collective span without communicator, algorithm or bytes: {s[2]}")
        back = spans(r, "backward")
        overlap = [(b, k) for b in bk for k in back if b[0] < k[1] and k[0] < b[1]]
        if not overlap:
            bad.append(f"rank {r}: no bucket span overlaps a backward span")
        else:
            b, k = overlap[0]
            print(f"rank {r}: {b[2]['name']} [{b[0]:.0f}, {b[1]:.0f}] overlaps {k[2]['name']} [{k[0]:.0f}, {k[1]:.0f}] us")
        print(f"rank {r}: " + ", ".join(f"{n} {c}" for c, n in counts.items()) + f", {len(bk)} bucket, "
              f"{len(overlap)} bucket/backward overlaps; threads: {sorted(v for (p, t), v in threads.items() if p == r)}")
    elif kind == "pp":
        pipe = spans(r, "pipeline")
        names = sorted({s[2]["name"] for s in pipe})
        if not pipe:
            bad.append(f"rank {r}: no pipeline span")
        print(f"rank {r}: {len(pipe)} pipeline spans: {names}")
# the ranks of one host share a clock: their first spans start within seconds of each other
firsts = [min((e["ts"] for e in events if e.get("ph") == "X" and e["pid"] == r), default=None) for r in range(ranks)]
if None not in firsts and max(firsts) - min(firsts) > 30e6:
    bad.append(f"the ranks' first spans are {(max(firsts) - min(firsts)) / 1e6:.1f} s apart: clocks not aligned")
if bad:
    print("FAIL:\n  " + "\n  ".join(bad[:20]), file=sys.stderr)
    sys.exit(1)
print(f"{path}: {len(events)} events, valid")
