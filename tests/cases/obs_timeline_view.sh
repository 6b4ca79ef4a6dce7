#!/usr/bin/env bash
# dtrain timeline (docs/observability.md): the merged timeline of a short
# 2-rank data-parallel run (small buckets) drawn as a page: it parses and
# nests, has no script and loads nothing; it has the main, progress-thread
# and bucket lanes of both ranks (labelled host:rank / thread) and boxes of
# forward, backward, collective, bucket and optimizer spans, each box inside
# the picture with a tooltip; the default window is two steps from the
# middle, and --from-step, --start-ms pick others.  A missing file, one that
# is not JSON, one without spans and a step outside the run are errors that
# name the problem.
. "$(dirname "$0")/lib.sh"
"$BIN/dtrun" -n 2 --timeline "$WORK/ddp.json" "$BIN/dtrain" train --config configs/gpt-mini.json --set layers=4 \
    --set dim=64 --set context=32 --set threads=1 --set eval_interval=0 --set steps=6 --set log_interval=2 \
    --set grad_clip=0 --set bucket_mb=0.02 >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "the data-parallel run failed"; }
"$BIN/dtrain" timeline "$WORK/ddp.json" >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "dtrain timeline failed"; }
expect_grep "$WORK/out" "dtrain timeline: $WORK/ddp.html \(steps 2 to 3, [0-9.]+ to [0-9.]+ ms: [0-9]+ of [0-9]+ spans, 2 ranks, [0-9]+ lanes\)"
"$BIN/dtrain" timeline "$WORK/ddp.json" -o "$WORK/s0.html" --from-step 0 --steps 1 >"$WORK/out" 2>&1 || fail "--from-step failed"
expect_grep "$WORK/out" "\(step 0, "
"$BIN/dtrain" timeline "$WORK/ddp.json" -o "$WORK/t.html" --start-ms 0 --span-ms 50 >"$WORK/out" 2>&1 || fail "--start-ms failed"
expect_grep "$WORK/out" "\(0.0 to 50.0 ms: "
python3 tests/cases/html_page.py >/dev/null || fail "html_page.py's self-test"
python3 - "$WORK/ddp.html" "$WORK/s0.html" "$WORK/t.html" <<'PY' || fail "the timeline page"
import sys
sys.path.insert(0, "tests/cases")
from html_page import Page, check_page
class P(Page):
    def __init__(self, path):
        super().__init__(path)
        self.lanes, self.boxes, self.lane, self.titled = [], [], None, 0
    def start_tag(self, tag, a):
        if tag == "svg" and a.get("id") == "timeline":
            self.width = float(a["width"])
        if tag == "g" and a.get("class") == "lane":
            self.lane = (int(a["data-pid"]), a["data-thread"])
            self.lanes.append(self.lane)
        if tag == "rect" and a.get("class") == "box":
            x, w = float(a["x"]), float(a["width"])
            if not (0 <= x and x + w <= self.width + 0.5 and w > 0):
                self.fail(f"a {a['data-cat']} box at x {x} width {w}: outside the picture")
            self.boxes.append((self.lane, a["data-cat"]))
        if tag == "title" and self.stack[-1:] == ["rect"]:
            self.titled += 1
    def end_tag(self, tag):
        if tag == "g":
            self.lane = None
for page in sys.argv[1:]:
    p = check_page(page, P, required={"svg"})
    if p.titled != len(p.boxes):
        sys.exit(f"{page}: {len(p.boxes)} boxes, {p.titled} tooltips")
    print(f"{page}: {len(p.lanes)} lanes {p.lanes}, {len(p.boxes)} boxes")
    if page != sys.argv[1]:
        continue
    for r in (0, 1):
        threads = {t for (pid, t) in p.lanes if pid == r}
        for want in ("main", "buckets"):
            if want not in threads:
                sys.exit(f"rank {r}: no {want} lane, only {sorted(threads)}")
        if not any(t.startswith("comm ") and t.endswith(" progress") for t in threads):
            sys.exit(f"rank {r}: no communicator progress lane, only {sorted(threads)}")
        cats = {c for (lane, c) in p.boxes if lane and lane[0] == r}
        missing = {"forward", "backward", "comm", "bucket", "optimizer"} - cats
        if missing:
            sys.exit(f"rank {r}: no {sorted(missing)} boxes (has {sorted(cats)})")
        print(f"rank {r}: lanes {sorted(threads)}, boxes of {sorted(cats)}")
PY
grep -q "bytes = " "$WORK/ddp.html" && grep -q "algorithm = " "$WORK/ddp.html" || fail "no bytes or algorithm in the tooltips"

# errors, each naming the problem
err() { # EXPECTED-STATUS PATTERN ARGS...
    local want=$1 pat=$2; shift 2
    "$BIN/dtrain" timeline "$@" >"$WORK/out" 2>&1; local rc=$?
    [ $rc = "$want" ] || { cat "$WORK/out"; fail "dtrain timeline $*: exit $rc, expected $want"; }
    expect_grep "$WORK/out" "$pat"
}
err 1 "dtrain timeline: cannot read $WORK/none.json: No such file or directory" "$WORK/none.json"
head -c 3000 "$WORK/ddp.json" >"$WORK/cut.json"
err 2 "dtrain timeline: $WORK/cut.json is not valid JSON \(at byte [0-9]+" "$WORK/cut.json"
echo '{"traceEvents":[{"ph":"M","pid":0,"tid":0,"name":"process_name","args":{"name":"a:0"}}]}' >"$WORK/empty.json"
err 2 "dtrain timeline: $WORK/empty.json has no spans \(1 events, none of them a span" "$WORK/empty.json"
echo '{"traceEvents":[{"ph":"","ts":1,"dur":2,"pid":0,"tid":0,"name":"a"}]}' >"$WORK/noph.json"
err 2 "noph.json has no spans" "$WORK/noph.json"
echo '{"traceEvents":[{"ph":"X","ts":1,"dur":1e308,"pid":0,"tid":0,"name":"a"}]}' >"$WORK/huge.json"
err 2 "huge.json has no spans" "$WORK/huge.json"
echo '{"events":[]}' >"$WORK/other.json"
err 2 "dtrain timeline: $WORK/other.json is not a Chrome trace \(no \"traceEvents\" array\)" "$WORK/other.json"
err 2 "dtrain timeline: --from-step 99: the trace has steps 0 to 5" "$WORK/ddp.json" --from-step 99
err 2 "dtrain timeline: --start-ms 1e\+06 is past the end of the trace" "$WORK/ddp.json" --start-ms 1000000
err 2 "not both" "$WORK/ddp.json" --from-step 1 --start-ms 5
err 2 "dtrain timeline: --from-step 1e\+11: the trace has steps 0 to 5" "$WORK/ddp.json" --from-step 99999999999
err 2 "-o $WORK/ddp.json is the trace itself" "$WORK/ddp.json" -o "$WORK/ddp.json"
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$WORK/ddp.json" || fail "the trace was overwritten"
# more steps than the run (past an int once): the whole run
"$BIN/dtrain" timeline "$WORK/ddp.json" -o "$WORK/all.html" --steps 3000000000 >"$WORK/out" 2>&1 ||
    { cat "$WORK/out"; fail "--steps 3000000000 failed"; }
expect_grep "$WORK/out" "steps 0 to 5"
"$BIN/dtrain" timeline --help | grep -q "^usage: dtrain timeline TRACE.json" || fail "no --help"
echo "timeline view ok"
