#!/usr/bin/env bash
# Data-parallel scaling on 2 namespace hosts, two builds side by side (a
# change against the commit before it): each round runs, for each build,
# gpt-mini in one process (pinned to CPU 0) and on 2 namespace hosts (one
# rank each, host i on CPU i), alternating the builds.  Scaling efficiency
# = 2-host tokens/s / (2 x one-process tokens/s), each build against its own
# single-process rate; the best of the rounds is kept (a shared machine).
#
#   bench/ddp/scaling_ab.sh BASE_BIN NEW_BIN [ROUNDS=3] [RATE=1000mbit] [STEPS=20]
#
# BASE_BIN and NEW_BIN are build/bin folders (of two worktrees).  Needs root.
set -euo pipefail
cd "$(dirname "$0")/../.."
BASE=${1:?usage: scaling_ab.sh BASE_BIN NEW_BIN [ROUNDS] [RATE] [STEPS]}
NEW=${2:?usage: scaling_ab.sh BASE_BIN NEW_BIN [ROUNDS] [RATE] [STEPS]}
ROUNDS=${3:-3}
RATE=${4:-1000mbit}
STEPS=${5:-20}
WORK=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'scripts/netns-cluster.sh down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/tok"
CFG=(--config configs/gpt-mini.json --set threads=1 --set log_interval=1 --set eval_interval=0 --set eval_batches=1
     --set steps=$((STEPS + 5)))
rate_of() { python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][5:]
print(f"{len(rows) / sum(1.0 / r['tokens_per_s'] for r in rows):.1f}")
PY
}
one() { taskset -c 0 "$1/dtrain" train "${CFG[@]}" --set metrics_file="$WORK/one.jsonl" >/dev/null; rate_of "$WORK/one.jsonl"; }
two() {
    taskset -c 1 ip netns exec dt1 "$1/dtrun" --nnodes 2 --node-rank 1 --master 10.77.0.1:29500 --token-file "$WORK/tok" \
        -n 1 "$1/dtrain" train "${CFG[@]}" >"$WORK/n1" 2>&1 &
    local p=$!
    taskset -c 0 ip netns exec dt0 "$1/dtrun" --nnodes 2 --node-rank 0 --master 10.77.0.1:29500 --token-file "$WORK/tok" \
        -n 1 "$1/dtrain" train "${CFG[@]}" --set metrics_file="$WORK/two.jsonl" >"$WORK/n0" 2>&1 || { cat "$WORK/n0"; exit 1; }
    wait $p
    rate_of "$WORK/two.jsonl"
}
scripts/netns-cluster.sh up 2 --rate "$RATE" >/dev/null
: >"$WORK/rows"
for ((r = 0; r < ROUNDS; r++)); do
    for which in base new; do
        bin=$BASE; [ $which = new ] && bin=$NEW
        o=$(one "$bin"); t=$(two "$bin")
        echo "$which $o $t" | tee -a "$WORK/rows"
    done
done
python3 - "$WORK/rows" "$RATE" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
best = {}
for which, one, two in rows:
    eff = float(two) / (2 * float(one))
    if which not in best or eff > best[which][0]:
        best[which] = (eff, float(one), float(two))
for which in ("base", "new"):
    e, o, t = best[which]
    print(f"{which}: one process {o:.0f} tokens/s, 2 hosts at {sys.argv[2]} {t:.0f} tokens/s, efficiency {e:.3f}")
print(f"difference (new - base): {best['new'][0] - best['base'][0]:+.3f}")
PY
