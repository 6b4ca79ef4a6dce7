#!/usr/bin/env bash
# Chaos: 10 runs of a small gpt-mini on 4 namespace hosts, each with one
# fault at a random step (kill -9 or SIGSTOP of a random rank, or a host's
# link down for 6 s); dtrun --max-restarts brings the job back from the newest
# checkpoint and every run ends with weights equal to the uninterrupted run's
# to the bit.  DT_TEST_QUICK: 3 runs.  CHAOS_SEED picks the faults.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/netns_common.sh"
scripts/netns-cluster.sh up 4 || fail "cannot build the namespace cluster"
runs=10; [ "${QUICK:-0}" = 1 ] && runs=3
seed=${CHAOS_SEED:-$RANDOM}
echo "chaos: $runs runs, CHAOS_SEED=$seed"
python3 "$(dirname "$0")/chaos.py" "$BIN" "$WORK" "$runs" "$seed"
