#!/usr/bin/env bash
# Elastic membership (dtrun --nnodes 3:4) on 4 namespace hosts: a host removed
# for good -> the job goes on with 3 and the same global batch (gradient
# accumulation 3 -> 4); the host comes back -> it joins at the next restart.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/netns_common.sh"
scripts/netns-cluster.sh up 4 || fail "cannot build the namespace cluster"
python3 "$(dirname "$0")/elastic.py" "$BIN" "$WORK"
