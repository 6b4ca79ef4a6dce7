#!/usr/bin/env bash
# dtrain report (docs/observability.md): from the metrics file of a short
# run (with evaluations), a self-contained HTML page: it parses, has no
# script and loads nothing; the loss (train and eval), learning rate,
# gradient norm and throughput plots have one point per record; the summary's
# values equal the file's.  A malformed line, an empty file and a missing
# file are errors that name the line or the file.
. "$(dirname "$0")/lib.sh"
"$BIN/dtrain" train --config configs/gpt-mini.json --set layers=2 --set dim=64 --set context=32 --set threads=1 \
    --set steps=60 --set log_interval=4 --set eval_interval=20 --set eval_batches=1 \
    --set metrics_file="$WORK/run.jsonl" >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "training failed"; }
"$BIN/dtrain" report "$WORK/run.jsonl" >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "report failed"; }
expect_grep "$WORK/out" "dtrain report: $WORK/run.html \(15 training records, 3 evaluations, up to step 60\)"
"$BIN/dtrain" report "$WORK/run.jsonl" -o "$WORK/r.html" >/dev/null || fail "report -o failed"
cmp -s "$WORK/run.html" "$WORK/r.html" || fail "-o wrote something else"
python3 tests/cases/html_page.py >/dev/null || fail "html_page.py's self-test"
python3 - "$WORK/r.html" "$WORK/run.jsonl" <<'PY' || fail "the report"
import json, sys
sys.path.insert(0, "tests/cases")
from html_page import Page, check_page
page, mfile = sys.argv[1:]
class P(Page):
    def __init__(self, path):
        super().__init__(path)
        self.lines, self.values = {}, {}
    def start_tag(self, tag, a):
        if tag == "polyline":
            pts = a["points"].split()
            if int(a["data-points"]) != len(pts):
                self.fail(f"{a['class']}: data-points {a['data-points']} for {len(pts)} points")
            for p in pts:
                x, y = map(float, p.split(","))
                if not (0 <= x <= 640 and 0 <= y <= 260):
                    self.fail(f"{a['class']}: point {p} outside the plot")
            self.lines[a["class"]] = len(pts)
        if tag == "td" and "data-key" in a:
            self.values[a["data-key"]] = float(a["data-value"])
p = check_page(page, P, required={"svg", "table"})
recs = [json.loads(l) for l in open(mfile)]
train = [r for r in recs if "loss" in r]
evals = [r for r in recs if "eval_loss" in r]
want_lines = {"train-loss": len(train), "eval-loss": len(evals), "lr": len(train), "grad-norm": len(train),
              "throughput": len(train)}
if p.lines != want_lines:
    sys.exit(f"plot points {p.lines}, expected {want_lines}")
want = {"steps": train[-1]["step"], "records": len(train), "final_loss": train[-1]["loss"],
        "best_loss": min(r["loss"] for r in train), "final_eval_loss": evals[-1]["eval_loss"],
        "best_eval_loss": min(r["eval_loss"] for r in evals), "final_eval_accuracy": 100 * evals[-1]["eval_accuracy"],
        "mean_throughput": sum(r["tokens_per_s"] for r in train) / len(train),
        "wall_s": max(r["elapsed_s"] for r in recs), "train_s": evals[-1]["train_s"]}
for k, v in want.items():
    got = p.values.get(k)
    if got is None or abs(got - v) > 1e-6 * max(1, abs(v)):
        sys.exit(f"summary {k}: {got}, the file's {v}")
print(f"report ok: plots {p.lines}, summary {len(p.values)} values as in the file")
PY
# errors
{ head -n 3 "$WORK/run.jsonl"; echo '{"step": 13, "loss": '; tail -n 2 "$WORK/run.jsonl"; } >"$WORK/bad.jsonl"
"$BIN/dtrain" report "$WORK/bad.jsonl" >"$WORK/out" 2>&1; rc=$?
[ $rc = 2 ] || fail "a malformed line: exit $rc, expected 2"
expect_grep "$WORK/out" "dtrain report: $WORK/bad.jsonl line 4: not a JSON object: \{\"step\": 13, \"loss\": "
[ -e "$WORK/bad.html" ] && fail "a report was written for a malformed file"
echo '{"step": 3, "accuracy": 1}' >"$WORK/odd.jsonl"
"$BIN/dtrain" report "$WORK/odd.jsonl" >"$WORK/out" 2>&1 && fail "a record of neither kind was accepted"
expect_grep "$WORK/out" "odd.jsonl line 1: neither a training record"
: >"$WORK/empty.jsonl"
"$BIN/dtrain" report "$WORK/empty.jsonl" >"$WORK/out" 2>&1 && fail "an empty file was accepted"
expect_grep "$WORK/out" "empty.jsonl has no training or evaluation records \(the file is empty\)"
"$BIN/dtrain" report "$WORK/none.jsonl" >"$WORK/out" 2>&1; rc=$?
[ $rc = 1 ] || fail "a missing file: exit $rc, expected 1"
expect_grep "$WORK/out" "cannot read $WORK/none.jsonl: No such file"
cp "$WORK/run.jsonl" "$WORK/keep.jsonl"
"$BIN/dtrain" report "$WORK/run.jsonl" -o "$WORK/run.jsonl" >"$WORK/out" 2>&1 && fail "-o the metrics file itself was accepted"
expect_grep "$WORK/out" "is the metrics file itself"
cmp -s "$WORK/run.jsonl" "$WORK/keep.jsonl" || fail "the metrics file was overwritten"
"$BIN/dtrain" report >"$WORK/out" 2>&1 && fail "no file was accepted"
expect_grep "$WORK/out" "METRICS.jsonl is required"
"$BIN/dtrain" report --help | grep -q "usage: dtrain report METRICS.jsonl" || fail "report --help"
echo ok
