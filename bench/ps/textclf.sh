#!/usr/bin/env bash
# The sparse text classifier (configs/textclf.json: a 2^20 x 32 EmbeddingBag
# table and a linear layer, 33.6 M parameters, Adagrad lr 0.2, batch 64 per
# worker) on the fortunes, trained on a budget of BUDGET examples in all:
# one process (BUDGET / 64 steps), a parameter server with W workers and S
# servers (BSP and ASP; BUDGET / 64 / W steps per worker), and allreduce
# data parallelism on 2 ranks (which moves the whole table every step: it
# runs DENSE_STEPS steps, for its speed and bytes).  One compute thread per
# rank.  Per row: examples/s (the budget over worker 0's training time,
# evaluation excluded), held-out accuracy at the end (all 1463 held-out
# fortunes, worker 0's view of the servers' parameters), and bytes worker 0
# sent and received per step (the table's rows, the linear layer, headers);
# the table itself is 134 MB.  Medians of ROUNDS rounds, the rows alternating
# within each.  A markdown table on stdout.
#
#   bench/ps/textclf.sh [BUDGET=64000] [ROUNDS=3] [DENSE_STEPS=20] [BUILD=build]
set -euo pipefail
case ${1:-} in -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/../.."
BUDGET=${1:-64000} ROUNDS=${2:-3} DENSE_STEPS=${3:-20} BUILD=${4:-build}
[ -x "$BUILD/bin/dtrain" ] || { echo "build first: make build" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
common=(--config configs/textclf.json --set threads=1 --set eval_interval=0)
rows=("single" "bsp-2-1" "bsp-2-2" "asp-2-1" "bsp-4-2" "asp-4-2" "allreduce-2")
for round in $(seq "$ROUNDS"); do
    for row in "${rows[@]}"; do
        echo "ps_textclf: round $round/$ROUNDS, $row" >&2
        out="$WORK/$row-$round"
        IFS=- read -r mode w s <<<"$row"
        case $mode in
        single) steps=$((BUDGET / 64))
                "$BUILD/bin/dtrain" train "${common[@]}" --set steps=$steps --set log_interval=$steps --set eval_batches=1000 \
                    --set metrics_file="$out.jsonl" >"$out" 2>&1 ;;
        allreduce) "$BUILD/bin/dtrun" -n "$w" "$BUILD/bin/dtrain" train "${common[@]}" --set steps="$DENSE_STEPS" \
                       --set log_interval="$DENSE_STEPS" --set eval_batches=1 --set metrics_file="$out.jsonl" >"$out" 2>&1 ;;
        *) steps=$((BUDGET / 64 / w))
           "$BUILD/bin/dtrun" -n $((w + s)) --servers "$s" "$BUILD/bin/dtrain" train "${common[@]}" --set sync="$mode" \
               --set steps=$steps --set log_interval=$steps --set eval_batches=1000 --set metrics_file="$out.jsonl" >"$out" 2>&1 ;;
        esac || { cat "$out" >&2; exit 1; }
    done
done
python3 - "$WORK" "$ROUNDS" "$BUDGET" "${rows[@]}" <<'PY'
import json, re, statistics, sys
work, rounds, budget, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
def one(row, r):
    recs = [json.loads(l) for l in open(f"{work}/{row}-{r}.jsonl")]
    ev = [x for x in recs if "eval_accuracy" in x][-1]
    tr = [x for x in recs if "loss" in x][-1]
    text = open(f"{work}/{row}-{r}").read()
    m = re.search(r"rank 0 sent ([\d.]+) MB and received ([\d.]+) MB per step", text)
    steps = tr["step"]
    w = 1 if row == "single" else int(row.split("-")[1])
    rate = steps * 64 * w / ev["train_s"]
    return rate, ev["eval_accuracy"], (float(m.group(1)), float(m.group(2))) if m else None
names = {"single": "one process", "allreduce-2": "allreduce, 2 ranks (whole table)"}
print("| run | workers | servers | examples/s | held-out accuracy | MB per step sent / received by worker 0 |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for row in rows:
    rs = [one(row, r) for r in range(1, rounds + 1)]
    rate = statistics.median(x[0] for x in rs)
    acc = statistics.median(x[1] for x in rs)
    mode, w, s = (row.split("-") + ["", ""])[:3]
    name = names.get(row, mode.upper())
    b = rs[0][2]
    wire = f"{b[0]:.3f} / {b[1]:.3f}" if b else ("134 / 134 (allreduce)" if mode == "allreduce" else "-")
    accs = "-" if mode == "allreduce" else f"{acc:.1%}"
    print(f"| {name} | {w or 1} | {s or '-'} | {rate:.0f} | {accs} | {wire} |")
PY
