#!/usr/bin/env bash
# dtbench across 4 namespace hosts at 1000 mbit: no wrong element at any size.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/netns_common.sh"
scripts/netns-cluster.sh up 4 --rate 1000mbit || fail "cannot build the namespace cluster"
for op in allreduce broadcast reduce_scatter allgather alltoall; do
    run_cluster 4 120 "$BIN/dtbench" $op -b 8 -e 2M -f 8 -n 3 -w 1 || { cat "$WORK"/node.*; fail "dtbench $op failed"; }
    expect_grep "$WORK/node.0" "# total #wrong: 0"
    grep -v '#' "$WORK/node.0" | tail -1
done
echo ok
