#!/usr/bin/env bash
# A picture of multi-copy tensor parallelism (issue 50): gpt-small with tp=2
# across 2 namespace hosts at RATE (one rank each, host i on CPU i, one
# compute thread), tp_copies 1 and COPIES, each with `dtrun --timeline`; one
# step of rank 0 drawn by `dtrain timeline` and photographed by headless
# chromium into docs/images/tp_copies_<c>.png.  Prints each run's median
# step (after 3 warm-up steps) and, from the timeline, the step's time with
# no copy computing (the exposed exchanges).  Namespaces tpv0, tpv1, tpvbr
# (scripts/netns-cluster.sh, NETNS_PREFIX=tpv), removed at the end.
#
#   bench/parallel/tp_copies_timeline.sh [COPIES=4] [RATE=1000mbit] [STEPS=6]
set -euo pipefail
case ${1:-} in -h | --help) sed -n '2,/^set -e/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/../.."
COPIES=${1:-4}
RATE=${2:-1000mbit}
STEPS=${3:-6}
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first: make build" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 2; }
command -v chromium >/dev/null || { echo "needs chromium (scripts/setup.sh --browser)" >&2; exit 2; }
export NETNS_PREFIX=tpv
WORK=$(mktemp -d /tmp/dtrain-tptl.XXXXXX)
trap 'scripts/netns-cluster.sh down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
scripts/netns-cluster.sh up 2 --rate "$RATE" >/dev/null
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/tok"
CFG=(--config configs/gpt-small.json --set threads=1 --set log_interval=1 --set eval_interval=0 --set eval_batches=1
     --set steps=$((STEPS + 3)) --set tp=2)
across() { # copies
    taskset -c 1 ip netns exec tpv1 $BIN/dtrun --nnodes 2 --node-rank 1 --master 10.77.0.1:29541 \
        --token-file "$WORK/tok" -n 1 $BIN/dtrain train "${CFG[@]}" --set tp_copies="$1" >"$WORK/n1.$1" 2>&1 &
    local p=$!
    taskset -c 0 ip netns exec tpv0 $BIN/dtrun --nnodes 2 --node-rank 0 --master 10.77.0.1:29541 \
        --token-file "$WORK/tok" --timeline "$WORK/c$1.json" -n 1 $BIN/dtrain train "${CFG[@]}" \
        --set tp_copies="$1" --set metrics_file="$WORK/c$1.jsonl" >"$WORK/n0.$1" 2>&1 ||
        { cat "$WORK/n0.$1" "$WORK/n1.$1"; exit 1; }
    wait $p
}
for c in 1 "$COPIES"; do
    across "$c"
    step=$((STEPS + 1))
    $BIN/dtrain timeline "$WORK/c$c.json" -o "$WORK/c$c.html" --from-step "$step" --steps 1 >/dev/null
    timeout 90 chromium --headless --no-sandbox --disable-gpu --no-first-run --hide-scrollbars \
        --user-data-dir="$WORK/profile" --window-size=1400,330 --screenshot="docs/images/tp_copies_$c.png" \
        "file://$WORK/c$c.html" 2>>"$WORK/chromium.log" >/dev/null || { cat "$WORK/chromium.log"; exit 1; }
    python3 - "$WORK/c$c.jsonl" "$WORK/c$c.json" "$c" "$step" <<'PY'
import json, statistics, sys
metrics, trace, c, step = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
e = [json.loads(l)["elapsed_s"] for l in open(metrics) if '"loss"' in l]
d = [b - a for a, b in zip(e, e[1:])][2:]
ev = json.load(open(trace))["traceEvents"]
ev = [x for x in ev if x.get("ph") == "X" and x.get("pid") == min(y.get("pid", 1 << 30) for y in ev if "pid" in y)]
fw = sorted(x["ts"] for x in ev if x.get("cat") == "forward" and (x.get("args") or {}).get("step") == step)
nx = sorted(x["ts"] for x in ev if x.get("cat") == "forward" and (x.get("args") or {}).get("step") == step + 1)
t0, t1 = fw[0], nx[0]
# with copies: the union of the copies' turns; without: the exchanges' spans
if c > 1:
    busy = [(x["ts"], x["ts"] + x["dur"]) for x in ev if x.get("cat") == "copy" and t0 <= x["ts"] < t1]
    merged = []
    for a, b in sorted(busy):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    inside = sum(b - a for a, b in merged)
    note = f"copies computing {inside / 1e6:.3f} s of the {(t1 - t0) / 1e6:.3f} s step (the rest: embedding, head, optimizer, exposed exchanges)"
else:
    comm = sum(x["dur"] for x in ev if x.get("cat") == "comm" and t0 <= x["ts"] < t1 and x["args"].get("ranks") == 2)
    note = f"tensor-parallel exchanges {comm / 1e6:.3f} s of the {(t1 - t0) / 1e6:.3f} s step"
print(f"tp_copies={c}: median step {statistics.median(d):.3f} s; step {step} drawn: {note}")
PY
done
