#!/usr/bin/env bash
# What dtrun --timeline costs a training step (issue 36: under 2% on, nothing
# measurable off).
#
#   bench/observability/timeline_cost.sh [PAIRS=5] [STEPS=60] [CONFIG=configs/gpt-mini.json] [--set K=V ...]
#
# e.g. a model whose steps take milliseconds, where spans weigh the most:
#   bench/observability/timeline_cost.sh 5 200 configs/gpt-mini.json --set layers=4 --set dim=64 --set context=32 --set threads=1
#
# 2 local ranks train CONFIG data-parallel for STEPS steps, alternately
# without and with --timeline (PAIRS of each, the order alternating so that
# the machine's drift hits both alike).  A run's step time is the median of
# its logged windows' seconds per step (metrics file, the first window, with
# start-up and the first allocations, left out); the figure is the median
# over runs of each kind, and their ratio.  On a shared or loaded machine the
# runs' spread is larger than the cost, so the script also measures what one
# span costs the recording thread (build/bin/span_cost) and prints the cost
# it implies: spans per step and rank x ns per span / step time.
set -euo pipefail
cd "$(dirname "$0")/../.."
PAIRS=${1:-5}
STEPS=${2:-60}
CONFIG=${3:-configs/gpt-mini.json}
shift $(($# < 3 ? $# : 3))
SETS=("$@")
BIN=${BIN:-build/bin}
[ -x $BIN/dtrain ] || { echo "build first: make build" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
LOG=10

run() { # name [dtrun options]
    local name=$1; shift
    $BIN/dtrun -n 2 "$@" $BIN/dtrain train --config "$CONFIG" "${SETS[@]}" --set steps="$STEPS" --set log_interval=$LOG \
        --set eval_interval=0 --set eval_batches=1 --set metrics_file="$WORK/$name.jsonl" >"$WORK/$name.log" 2>&1 ||
        { cat "$WORK/$name.log" >&2; exit 1; }
    python3 - "$WORK/$name.jsonl" $LOG <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
per = []
for a, b in zip(rows, rows[1:]):
    per.append((b["elapsed_s"] - a["elapsed_s"]) / (b["step"] - a["step"]))
print(f"{statistics.median(per):.6f}")
PY
}
off=() on=()
for i in $(seq "$PAIRS"); do
    if [ $((i % 2)) = 1 ]; then
        off+=("$(run off$i)"); on+=("$(run on$i --timeline "$WORK/tl$i.json")")
    else
        on+=("$(run on$i --timeline "$WORK/tl$i.json")"); off+=("$(run off$i)")
    fi
    echo "pair $i: off ${off[-1]} s/step, on ${on[-1]} s/step" >&2
done
events=$(grep -c '"ph":"[Xb]"' "$WORK/tl1.json")
bytes=$(stat -c %s "$WORK/tl1.json")
span=$($BIN/span_cost)
echo "$span"
python3 - "${off[*]}" "${on[*]}" "$events" "$bytes" "$STEPS" "$span" <<'PY' | tee "$WORK/figures.txt"
import re, statistics, sys
off = [float(x) for x in sys.argv[1].split()]
on = [float(x) for x in sys.argv[2].split()]
mo, mn = statistics.median(off), statistics.median(on)
events, steps = int(sys.argv[3]), int(sys.argv[5])
ns = max(float(x) for x in re.findall(r"on (?:with a collective's args )?([0-9.]+) ns", sys.argv[6]))
per = events / steps / 2
print(f"timeline off: median {1e3 * mo:.1f} ms/step over {len(off)} runs ({', '.join(f'{1e3 * x:.1f}' for x in off)})")
print(f"timeline on:  median {1e3 * mn:.1f} ms/step over {len(on)} runs ({', '.join(f'{1e3 * x:.1f}' for x in on)})")
print(f"one timeline: {events} spans, {int(sys.argv[4]) / 1e6:.2f} MB for {steps} steps of 2 ranks ({per:.0f} spans a step and rank)")
print(f"measured: {100 * (mn / mo - 1):+.2f}% (on / off = {mn / mo:.4f}; the runs' own spread is "
      f"{100 * (max(off) - min(off)) / mo:.1f}% off and {100 * (max(on) - min(on)) / mn:.1f}% on)")
print(f"implied by the span cost: {per:.0f} spans x {ns:.0f} ns = {per * ns / 1e3:.1f} us a step, "
      f"{100 * per * ns * 1e-9 / mo:.4f}% of {1e3 * mo:.1f} ms")
PY
# The RESULTS.md section (RESULTS=FILE writes elsewhere; RESULTS=none skips it).
RESULTS=${RESULTS:-bench/RESULTS.md}
if [ "$RESULTS" != none ]; then
    section="## Timeline cost (issue 36)"
    {
        echo "$section"
        echo
        echo "Measured $(date -u +%Y-%m-%d) on \`$(lscpu | sed -nE 's/^Model name: +//p' | head -1)\`, $(nproc) cores: 2 local ranks"
        echo "training $CONFIG${SETS[*]:+ (${SETS[*]})} for $STEPS steps, $PAIRS alternating pairs without and with"
        echo "\`dtrun --timeline\`. Command: \`bench/observability/timeline_cost.sh $PAIRS $STEPS $CONFIG${SETS[*]:+ ${SETS[*]}}\`"
        echo
        echo '```'
        echo "$span"
        cat "$WORK/figures.txt"
        echo '```'
        echo
        echo "Off, a span costs one load of a flag and a predicted branch (the first line); on, the implied figure"
        echo "is the cost the recording threads pay. On a shared machine the runs' own spread is larger than the"
        echo "difference between them, so the measured figure bounds the cost rather than resolving it."
    } >"$WORK/section.md"
    python3 bench/update_results.py "$RESULTS" "$WORK/section.md" "$section"
fi
