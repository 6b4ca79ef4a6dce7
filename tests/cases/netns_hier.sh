#!/usr/bin/env bash
# Hierarchical collectives: 2 ranks on each of 3 namespace hosts (shared
# memory inside a host, TCP between hosts).  Every collective is checked bit
# for bit, and the log must show that the hierarchy was set up, on the world
# and on a communicator split over two of the hosts; then the same
# with DT_HIER=off (the flat algorithms on the same layout).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/netns_common.sh"
scripts/netns-cluster.sh up 3 --rate 1000mbit || fail "cannot build the namespace cluster"
export RANKS_PER_NODE=2
big=65536; [ "${QUICK:-0}" = 1 ] && big=16384
DT_DEBUG=info run_cluster 3 450 "$BIN/coll_check" --quick --big $big || { tail -20 "$WORK"/node.*; fail "a node failed"; }
expect_grep "$WORK/node.0" "coll_check: world 6: [0-9]+ checks, 0 mismatches"
expect_grep "$WORK/node.1" "hierarchical collectives: 3 hosts x 2 ranks"
# the split over the first two hosts keeps the hierarchy (coll_check runs it)
expect_grep "$WORK/node.0" "hierarchical collectives \(split communicator\): 2 hosts x 2 ranks"
DT_HIER=off DT_DEBUG=info run_cluster 3 450 "$BIN/coll_check" --quick --big $big || { tail -20 "$WORK"/node.*; fail "a node failed with DT_HIER=off"; }
expect_grep "$WORK/node.0" "coll_check: world 6: [0-9]+ checks, 0 mismatches"
if grep -q "hierarchical collectives:" "$WORK"/node.*; then fail "DT_HIER=off still set up the hierarchy"; fi
echo ok
