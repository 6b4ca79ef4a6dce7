#!/usr/bin/env bash
# dtrun --monitor's dashboard in a real headless browser (Debian's chromium,
# installed by scripts/setup.sh --browser; skipped when it is absent and
# cannot be installed).  A 2-rank training runs under --monitor; the page
# is loaded while it trains: the state says running, the step and loss shown
# are those of the metrics file at that step, and the curves have points.
# Then dtrun is interrupted: the page, loaded again while dtrun lingers,
# shows the job failed with the reason, the final step and loss of the
# metrics file, one curve point per logged step and one per evaluation,
# both ranks in the table, and has stopped polling.  The screenshot taken
# while training is checked to be a PNG; DT_UPDATE_DOCS=1 copies it to
# docs/images/dashboard.png.
. "$(dirname "$0")/lib.sh"
if ! command -v chromium >/dev/null; then
    scripts/setup.sh --browser >"$WORK/setup" 2>&1 || true
    command -v chromium >/dev/null || { tail -n 3 "$WORK/setup"; echo "no chromium, and scripts/setup.sh --browser could not install it"; exit 77; }
fi
browse() { # URL ARGS...: chromium headless, its own profile, 5 s of page time
    local url=$1; shift
    timeout 90 chromium --headless --no-sandbox --disable-gpu --no-first-run --hide-scrollbars \
        --user-data-dir="$WORK/profile" --virtual-time-budget=5000 "$@" "$url" 2>>"$WORK/chromium.log"
}
"$BIN/dtrun" -n 2 --monitor 127.0.0.1:0 --monitor-linger 120 "$BIN/dtrain" train --config configs/gpt-mini.json \
    --set layers=2 --set dim=64 --set context=32 --set threads=1 --set steps=1000000 --set log_interval=10 \
    --set eval_interval=30 --set eval_batches=1 --set metrics_file="$WORK/m.jsonl" >"$WORK/out" 2>"$WORK/err" &
job=$!
trap 'kill -9 $job 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 600); do grep -q eval_loss "$WORK/m.jsonl" 2>/dev/null && break; sleep 0.1; done
url=$(grep -o 'http://127.0.0.1:[0-9]*/' "$WORK/err" | head -1)
[ -n "$url" ] || { cat "$WORK/err"; fail "dtrun did not say where the monitor is"; }

check() { # DOM WHEN
    python3 - "$1" "$WORK/m.jsonl" "$2" <<'PY'
import json, re, sys
from html.parser import HTMLParser
dom, mfile, when = sys.argv[1:]
class P(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.lines, self.rows, self.body, self.cur = {}, {}, 0, {}, None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        if "id" in a:
            self.ids[a["id"]] = {"attrs": a, "text": ""}
            self.cur = a["id"]
        if tag == "polyline":
            pts = a.get("points", "").split()
            if int(a["data-points"]) != len(pts):
                sys.exit(f"{when}: polyline {a['class']}: data-points {a['data-points']}, {len(pts)} points")
            self.lines[a["class"].split()[-1]] = len(pts)
        if tag == "tr":
            self.rows += 1
    def handle_data(self, d):
        if self.cur:
            self.ids[self.cur]["text"] += d
    def handle_endtag(self, tag):
        self.cur = None
p = P()
p.feed(open(dom).read())
recs = [json.loads(l) for l in open(mfile)]
train = {r["step"]: r for r in recs if "loss" in r}
evals = [r for r in recs if "eval_loss" in r]
state = p.ids["banner"]["text"]
step = int(p.ids["step"]["text"])
loss_attr = float(p.ids["loss"]["attrs"]["data-value"])
if step not in train:
    sys.exit(f"{when}: the page shows step {step}; the metrics file has no such step")
want = train[step]["loss"]
if abs(loss_attr - want) > 1e-6 * abs(want) or p.ids["loss"]["text"] != f"{want:.4f}":
    sys.exit(f"{when}: loss shown {p.ids['loss']['text']} ({loss_attr}), the metrics file's at step {step}: {want}")
if p.rows != 3:
    sys.exit(f"{when}: {p.rows - 1} rows in the rank table, expected 2")
if when == "running":
    if state != "running" or p.lines.get("train", 0) < 3 or p.lines.get("rate", 0) < 3:
        sys.exit(f"{when}: state {state!r}, curve points {p.lines}")
    n_train = len([s for s in train if s <= step])
    if p.lines["train"] > n_train:
        sys.exit(f"{when}: {p.lines['train']} train points at step {step}, the file has {n_train} up to it")
else:
    if state != "failed" or "interrupted" not in p.ids["reason"]["text"]:
        sys.exit(f"{when}: state {state!r} {p.ids['reason']['text']!r}")
    if step != max(train):
        sys.exit(f"{when}: step {step}, the file's last {max(train)}")
    if p.lines.get("train") != len(train) or p.lines.get("rate") != len(train) or p.lines.get("eval") != len(evals):
        sys.exit(f"{when}: curve points {p.lines}, the file has {len(train)} steps and {len(evals)} evaluations")
    if p.body.get("data-polling") != "stopped":
        sys.exit(f"{when}: the page still polls")
print(f"{when}: {state} at step {step}, loss {p.ids['loss']['text']} as in the metrics file; points {p.lines}")
PY
}
browse "$url" --dump-dom >"$WORK/dom1.html" || { cat "$WORK/chromium.log"; fail "chromium failed"; }
check "$WORK/dom1.html" running || fail "the page while training"
browse "$url" --window-size=1160,640 --screenshot="$WORK/dashboard.png" >/dev/null || fail "no screenshot"
python3 -c 'import sys; d=open(sys.argv[1],"rb").read(); sys.exit(d[:8]!=b"\x89PNG\r\n\x1a\n" or len(d)<10000)' \
    "$WORK/dashboard.png" || fail "the screenshot is not a PNG of a page"
[ "${DT_UPDATE_DOCS:-0}" = 1 ] && cp "$WORK/dashboard.png" docs/images/dashboard.png

kill -INT $job # the ranks stop; dtrun lingers with the final state
for _ in $(seq 300); do grep -q "serving the final state" "$WORK/err" && break; sleep 0.1; done
expect_grep "$WORK/err" "serving the final state"
browse "$url" --dump-dom >"$WORK/dom2.html" || fail "chromium failed"
check "$WORK/dom2.html" ended || fail "the page after the job ended"
kill -INT $job
wait $job
echo ok
