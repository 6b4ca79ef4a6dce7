#!/usr/bin/env bash
# A host's link goes down mid-job: every rank ends with an error within the
# configured timeout (DT_TIMEOUT=5), never a hang, and every dtrun exits non-zero.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/netns_common.sh"
scripts/netns-cluster.sh up 4 || fail "cannot build the namespace cluster"
# cut the link once every rank is inside its allreduce loop
( for _ in $(seq 600); do [ "$(ls "$WORK"/ready.* 2>/dev/null | wc -l)" = 4 ] && break; sleep 0.1; done
  sleep 1; date +%s.%N >"$WORK/down_at"; ip -n dt2 link set eth0 down ) &
export DT_TIMEOUT=5
t0=$(now)
run_cluster 4 60 "$BIN/fault_peer" "$WORK" --count 262144 --iters 1000000 && fail "the job survived a dead link"
less_than "$(elapsed "$t0")" 30 || fail "the job took $(elapsed "$t0") s to end"
down=$(cat "$WORK/down_at")
for r in 0 1 3; do
    f="$WORK/result.$r"
    [ -f "$f" ] || { cat "$WORK"/node.*; fail "rank $r wrote no result"; }
    expect_grep "$f" "^status=DT_ERR_(TIMEOUT|PEER)$"
    at=$(sed -n 's/^failed_at=//p' "$f")
    d=$(python3 -c "print($at - $down)")
    less_than "$d" 12 || fail "rank $r failed $d s after the link went down"
    echo "rank $r: $(sed -n 's/^status=//p' "$f") $d s after the link went down"
done
echo ok
