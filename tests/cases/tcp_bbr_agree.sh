#!/usr/bin/env bash
# Under bbr the ranks leave halving-doubling above 64 KiB (up to 4 ranks):
# every rank must make that choice when any one rank's connections run bbr,
# or ranks would run different algorithms on the same call and hang.  Rank 0
# alone asks for bbr here; allreduce and reduce_scatter of 160 KiB (between
# the two limits) must match on all 4 ranks, and every rank must say it took
# the bbr limit.  Exit 77 (a skip) where this process may not use bbr or reno.
. "$(dirname "$0")/lib.sh"
if [ "$(id -u)" = 0 ]; then offered=$(cat /proc/sys/net/ipv4/tcp_available_congestion_control)
else offered=$(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control); fi
for cc in bbr reno; do
    [[ " $offered " == *" $cc "* ]] || { echo "needs TCP congestion control $cc (offered: $offered)"; exit 77; }
done

# Each rank's congestion control: rank 0 $1, the others $2.
run_job() {
    DT_TRANSPORT=tcp DT_DEBUG=info RANK0_CC=$1 OTHERS_CC=$2 "$BIN/dtrun" -n 4 bash -c \
        'if [ "$DT_RANK" = 0 ]; then export DT_TCP_CONGESTION=$RANK0_CC; else export DT_TCP_CONGESTION=$OTHERS_CC; fi
         exec "$0" --quick --big 40000' "$BIN/coll_check" >"$WORK/out" 2>&1
}

run_job bbr reno || { cat "$WORK/out"; fail "coll_check failed with bbr on rank 0 only"; }
for r in 0 1 2 3; do
    expect_grep "$WORK/out" "^\[$r\].*TCP peer connections run bbr"
done
run_job reno reno || { cat "$WORK/out"; fail "coll_check failed under reno"; }
expect_no_grep "$WORK/out" "TCP peer connections run bbr"
echo "ok: every rank took the bbr limit when rank 0 alone ran bbr, none under reno"
