#!/usr/bin/env bash
# The device mesh: coordinates, one communicator per dimension and its
# members, the refusals; on 4, 6 and 8 ranks with 1 to 3 dimensions.
. "$(dirname "$0")/lib.sh"
for run in "4 dp=0,tp=2" "6 dp=2,pp=1,tp=3" "6 tp=6" "8 dp=2,pp=2,tp=2" "4 dp=4"; do
    set -- $run
    "$BIN/dtrun" -n "$1" "$BIN/mesh_check" "$2" >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "mesh $2 on $1 ranks"; }
    expect_grep "$WORK/out" "mesh_check: $1 ranks: ok"
    grep "mesh_check: [a-z]" "$WORK/out" | head -1
done
echo ok
