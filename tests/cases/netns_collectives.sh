#!/usr/bin/env bash
# Every collective across 4 namespace hosts linked at 1000 mbit, one dtrun node each.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/netns_common.sh"
scripts/netns-cluster.sh up 4 --rate 1000mbit || fail "cannot build the namespace cluster"
big=262144; [ "${QUICK:-0}" = 1 ] && big=8192
run_cluster 4 450 "$BIN/coll_check" --quick --big $big || { tail -20 "$WORK"/node.*; fail "a node failed"; }
expect_grep "$WORK/node.0" "coll_check: world 4: [0-9]+ checks, 0 mismatches"
grep -h "coll_check:" "$WORK"/node.0
echo ok
