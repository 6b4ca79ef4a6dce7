#!/usr/bin/env bash
# When each synchronisation mode pays: the mlp on Fashion-MNIST (SGD,
# momentum 0.9, lr 0.05, batch 64 per worker, one compute thread per rank)
# trained by 2 workers, with allreduce data parallelism (2 ranks) and with
# a parameter server (2 workers + 1 server: BSP, SSP with staleness 1, 2
# and 4, ASP): with equal workers; with worker 1 a steady straggler (it
# sleeps a random 0..SLOW ms before every step; a step takes a few ms); and
# with worker 1 a bursty one (before a random tenth of the steps it sleeps
# a random 0..BURST ms: about as slow on average, but in bursts).
# Worker 0 evaluates 1280 held-out images every 25 steps; "time to TARGET"
# is worker 0's training time (its train_s, evaluation excluded) at its
# first evaluation at or above TARGET accuracy; "steps/s" is worker 0's.
# Every configuration runs ROUNDS times, the configurations alternating
# within a round; the table gives the medians.  A markdown table on stdout.
#
#   bench/ps/straggler.sh [STEPS=400] [ROUNDS=3] [SLOW=30] [TARGET=0.78] [BURST=200] [BUILD=build]
set -euo pipefail
case ${1:-} in -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/../.."
STEPS=${1:-400} ROUNDS=${2:-3} SLOW=${3:-30} TARGET=${4:-0.78} BURST=${5:-200} BUILD=${6:-build}
[ -x "$BUILD/bin/dtrain" ] || { echo "build first: make build" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
common=(--config configs/mlp.json --set steps="$STEPS" --set batch_size=64 --set threads=1 --set log_interval=25
        --set eval_interval=25 --set eval_batches=10 --set grad_clip=0)
modes=("allreduce" "bsp" "ssp1" "ssp2" "ssp4" "asp")
for round in $(seq "$ROUNDS"); do
    for pattern in none steady bursty; do
        case $pattern in
        none) strag=() ;;
        steady) strag=(--set straggler_rank=1 --set straggler_ms="$SLOW") ;;
        bursty) strag=(--set straggler_rank=1 --set straggler_ms="$BURST" --set straggler_prob=0.1) ;;
        esac
        for mode in "${modes[@]}"; do
            echo "ps_straggler: round $round/$ROUNDS, straggler $pattern, $mode" >&2
            out="$WORK/$mode-$pattern-$round"
            case $mode in
            allreduce) "$BUILD/bin/dtrun" -n 2 "$BUILD/bin/dtrain" train "${common[@]}" ${strag[@]+"${strag[@]}"} \
                           --set metrics_file="$out.jsonl" >"$out" 2>&1 ;;
            bsp | asp) "$BUILD/bin/dtrun" -n 3 --servers 1 "$BUILD/bin/dtrain" train "${common[@]}" ${strag[@]+"${strag[@]}"} \
                           --set sync=$mode --set metrics_file="$out.jsonl" >"$out" 2>&1 ;;
            ssp*) "$BUILD/bin/dtrun" -n 3 --servers 1 "$BUILD/bin/dtrain" train "${common[@]}" ${strag[@]+"${strag[@]}"} \
                      --set sync=ssp --set staleness="${mode#ssp}" --set metrics_file="$out.jsonl" >"$out" 2>&1 ;;
            esac || { cat "$out" >&2; exit 1; }
        done
    done
done
python3 - "$WORK" "$ROUNDS" "$SLOW" "$TARGET" "$BURST" "${modes[@]}" <<'PY'
import json, statistics, sys
work, rounds, slow, target, burst, modes = (sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), sys.argv[5],
                                            sys.argv[6:])
pattern = {"none": "none", "steady": f"steady, 0-{slow} ms every step", "bursty": f"bursty, 0-{burst} ms in 1 step of 10"}
names = {"allreduce": "allreduce (2 ranks)", "bsp": "BSP", "ssp1": "SSP s=1", "ssp2": "SSP s=2", "ssp4": "SSP s=4",
         "asp": "ASP"}
def run(mode, s, r):
    rows = [json.loads(l) for l in open(f"{work}/{mode}-{s}-{r}.jsonl")]
    evals = [x for x in rows if "eval_accuracy" in x]
    hit = next((x["train_s"] for x in evals if x["eval_accuracy"] >= target), None)
    steps = [x for x in rows if "step" in x and "loss" in x]
    rate = steps[-1]["step"] / steps[-1]["elapsed_s"] if steps else 0
    return hit, evals[-1]["eval_accuracy"], rate, evals[-1]["train_s"]
def med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None
print(f"| mode | straggler | time to {target:.0%} (s) | final accuracy | worker 0 steps/s | worker 0 train time (s) |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for s in ["none", "steady", "bursty"]:
    for m in modes:
        rs = [run(m, s, r) for r in range(1, rounds + 1)]
        hits = [x[0] for x in rs]
        hit = med(hits)
        missed = sum(h is None for h in hits)
        t = "not reached" if hit is None else f"{hit:.2f}" + (f" ({missed} of {rounds} missed)" if missed else "")
        print(f"| {names[m]} | {pattern[s]} | {t} | {med([x[1] for x in rs]):.1%} | "
              f"{med([x[2] for x in rs]):.0f} | {med([x[3] for x in rs]):.2f} |")
PY
