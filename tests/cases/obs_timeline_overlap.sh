#!/usr/bin/env bash
# dtrain timeline --overlap (docs/observability.md): a rank's wait for its
# gradient buckets after its backward, split into a slower rank's backward
# and communication.  A hand-made 2-rank trace with known times gives the
# exact rows and summary; one whose last bucket ends before the last
# backward does draws the clock note; a real 2-rank data-parallel run has a
# row per step with both ranks and a tail of at least -1 ms (one machine's
# clock); a pipeline's stages (ranks with other buckets) are measured as
# groups of their own; a single process's trace and page options with
# --overlap are refused, naming why.
. "$(dirname "$0")/lib.sh"
python3 - "$WORK/made.json" "$WORK/skew.json" "$WORK/stages.json" <<'PY'
import json, sys
def trace(steps, nbytes=(4096, 4096)):
    ev = [{"ph": "M", "pid": r, "tid": 0, "name": "process_name", "args": {"name": f"h:{r}"}} for r in range(len(nbytes))]
    ev.append({"ph": "X", "pid": 0, "tid": 7, "ts": 1000, "dur": 500, "cat": "data", "name": "data wait", "args": {}})
    for s, ranks in enumerate(steps):
        base = 10000 + s * 100000
        for r, (bwd_ms, bucket_end_ms) in enumerate(ranks):
            ev.append({"ph": "X", "pid": r, "tid": 7, "ts": base, "dur": 20000, "cat": "forward",
                       "name": "forward gpt", "args": {"step": s, "micro_batch": 0}})
            ev.append({"ph": "X", "pid": r, "tid": 7, "ts": base + 20000, "dur": bwd_ms * 1000, "cat": "backward",
                       "name": "backward gpt", "args": {}})
            ev.append({"ph": "b", "pid": r, "tid": 9, "id": f"0x{s}", "ts": base + 30000, "cat": "bucket",
                       "name": "bucket 0", "args": {"bytes": nbytes[r]}})
            ev.append({"ph": "e", "pid": r, "tid": 9, "id": f"0x{s}", "ts": base + bucket_end_ms * 1000,
                       "cat": "bucket", "name": "bucket 0", "args": {}})
            ev.append({"ph": "X", "pid": r, "tid": 7, "ts": base + 70000, "dur": 3000, "cat": "optimizer",
                       "name": "optimizer step", "args": {}})
    return {"traceEvents": ev}
# per step and rank: (backward ms, bucket end ms from the step's start)
json.dump(trace([[(30, 57), (35, 57)], [(30, 63), (40, 63)], [(38, 59), (30, 59)]]), open(sys.argv[1], "w"))
json.dump(trace([[(30, 57), (35, 57)], [(30, 47.5), (30, 47.5)]]), open(sys.argv[2], "w"))
# a pipeline's two stages (ranks 0 and 2, 1 and 3: their own buckets), each a data-parallel pair
json.dump(trace([[(30, 57), (20, 40), (35, 57), (24, 41)], [(30, 63), (20, 40), (40, 63), (20, 41)]],
                (4096, 8192, 4096, 8192)), open(sys.argv[3], "w"))
# the same job as a 2-node dtrun writes it: a file per node (their first spans 9 ms apart: times are
# taken from each file's first span, so they must be put back on one clock)
made = trace([[(30, 57), (35, 57)], [(30, 63), (40, 63)], [(38, 59), (30, 59)]])["traceEvents"]
for r, name in ((0, sys.argv[1] + ".node0"), (1, sys.argv[1] + ".node1")):
    json.dump({"traceEvents": [e for e in made if e["pid"] == r]}, open(name, "w"))
PY
"$BIN/dtrain" timeline "$WORK/made.json" --overlap >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "--overlap failed"; }
cat >"$WORK/want" <<EOF2
dtrain timeline: the gradient buckets against backward in $WORK/made.json (2 ranks)
 step  slowest  spread ms   tail ms  wait ms per rank (of it a slower rank's)
    0        1        5.0       2.0  7.0 (5.0) 2.0 (0.0)
    1        1       10.0       3.0  13.0 (10.0) 3.0 (0.0)
    2        0        8.0       1.0  1.0 (0.0) 9.0 (8.0)
over 2 steps (the first left out) and 2 ranks, a rank waited after its backward 6.5 ms a step (median 6.0): 4.5 ms for a slower rank's backward (median 4.0), 2.0 ms for communication (median 2.0)
communication after the last rank's backward ended (tail): 2.0 ms a step (median 2.0, most 3.0)
EOF2
diff "$WORK/want" "$WORK/out" || fail "--overlap of the hand-made trace: not the expected rows (diff above: expected, got)"
"$BIN/dtrain" timeline --overlap "$WORK/made.json.node0" "$WORK/made.json.node1" >"$WORK/out" 2>&1 ||
    { cat "$WORK/out"; fail "--overlap of a file per node failed"; }
sed -i "1s|in $WORK/made.json (2 ranks)|in $WORK/made.json.node0 and the other files (2 ranks)|" "$WORK/want"
diff "$WORK/want" "$WORK/out" || fail "--overlap of a file per node: not the rows of the one file (diff above: expected, got)"
"$BIN/dtrain" timeline "$WORK/stages.json" --overlap >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "--overlap (stages) failed"; }
cat >"$WORK/want" <<EOF2
dtrain timeline: the gradient buckets against backward in $WORK/stages.json (4 ranks)
ranks 0 2: a data-parallel group (1 buckets, 4096 bytes a step)
 step  slowest  spread ms   tail ms  wait ms per rank (of it a slower rank's)
    0        2        5.0       2.0  7.0 (5.0) 2.0 (0.0)
    1        2       10.0       3.0  13.0 (10.0) 3.0 (0.0)
over 1 steps (the first left out) and 2 ranks, a rank waited after its backward 8.0 ms a step (median 8.0): 5.0 ms for a slower rank's backward (median 5.0), 3.0 ms for communication (median 3.0)
communication after the last rank's backward ended (tail): 3.0 ms a step (median 3.0, most 3.0)
ranks 1 3: a data-parallel group (1 buckets, 8192 bytes a step)
 step  slowest  spread ms   tail ms  wait ms per rank (of it a slower rank's)
    0        3        4.0      -3.0  0.0 (0.0) 0.0 (0.0)
    1        1        0.0       1.0  0.0 (0.0) 1.0 (0.0)
over 1 steps (the first left out) and 2 ranks, a rank waited after its backward 0.5 ms a step (median 0.5): 0.0 ms for a slower rank's backward (median 0.0), 0.5 ms for communication (median 0.5)
communication after the last rank's backward ended (tail): 1.0 ms a step (median 1.0, most 1.0)
note: in 1 step the last bucket ended before the last rank's backward did (by up to 3.0 ms): the ranks' clocks disagree by at least that much, and the split above is off by as much
EOF2
diff "$WORK/want" "$WORK/out" || fail "--overlap of two stages' groups: not the expected rows (diff above: expected, got)"
"$BIN/dtrain" timeline "$WORK/skew.json" --overlap >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "--overlap (skew) failed"; }
expect_grep "$WORK/out" "^    1        0        0.0      -2.5  0.0 \(0.0\) 0.0 \(0.0\)$"
expect_grep "$WORK/out" "note: in 1 step the last bucket ended before the last rank's backward did \(by up to 2.5 ms\): the ranks' clocks disagree"

# a real run: 2 ranks, small buckets
"$BIN/dtrun" -n 2 --timeline "$WORK/ddp.json" "$BIN/dtrain" train --config configs/gpt-mini.json --set layers=2 \
    --set dim=64 --set context=32 --set threads=1 --set eval_interval=0 --set steps=5 --set log_interval=5 \
    --set bucket_mb=0.02 >"$WORK/run" 2>&1 || { cat "$WORK/run"; fail "the data-parallel run failed"; }
"$BIN/dtrain" timeline "$WORK/ddp.json" --overlap >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "--overlap of a run failed"; }
python3 - "$WORK/out" <<'PY' || fail "--overlap of a 2-rank run"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
rows = [l for l in lines if re.match(r"^ +\d+ ", l)]
steps = [int(l.split()[0]) for l in rows]
if steps != list(range(5)):
    sys.exit(f"rows for steps {steps}, expected 0-4:\n" + "\n".join(lines))
for l in rows:
    f = l.split()
    waits = re.findall(r"(-?[0-9.]+) \((-?[0-9.]+)\)", l)
    if len(waits) != 2 or float(f[3]) < -1.0 or f[1] not in ("0", "1"):
        sys.exit(f"a row without 2 ranks' waits, or a tail below -1 ms: {l}")
    for w, slow in waits:
        if not (0 <= float(slow) <= float(w)):
            sys.exit(f"a slower rank's share outside 0..wait: {l}")
if not any(l.startswith("over 4 steps (the first left out) and 2 ranks, a rank waited") for l in lines) or \
   not any(l.startswith("communication after the last rank's backward ended (tail): ") for l in lines):
    sys.exit("no summary:\n" + "\n".join(lines))
print("\n".join(lines[-2:]))
PY

# a single process has no buckets
"$BIN/dtrun" -n 1 --timeline "$WORK/one.json" "$BIN/dtrain" train --config configs/gpt-mini.json --set layers=1 \
    --set dim=32 --set context=16 --set threads=1 --set eval_interval=0 --set steps=2 >"$WORK/run" 2>&1 ||
    { cat "$WORK/run"; fail "the single-process run failed"; }
"$BIN/dtrain" timeline "$WORK/one.json" --overlap >"$WORK/out" 2>&1 || fail "--overlap of a single process: nonzero exit"
expect_grep "$WORK/out" "no two ranks reduce the same gradient buckets: --overlap needs the timeline of a run with DDP.s buckets"
"$BIN/dtrain" timeline "$WORK/made.json" --overlap -o "$WORK/x.html" >"$WORK/out" 2>&1; rc=$?
[ $rc = 2 ] || fail "--overlap with -o: exit $rc, expected 2"
expect_grep "$WORK/out" "dtrain timeline: --overlap prints a summary of the whole run: it takes no page or window options"
[ ! -e "$WORK/x.html" ] || fail "--overlap with -o wrote a page"
echo "timeline overlap ok"
