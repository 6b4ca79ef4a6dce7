#!/usr/bin/env bash
# DT_TCP_CONGESTION: the peer connections really run the congestion control
# asked for (seen in ss), a name the kernel lacks is refused with a clear error
# before any rank waits on another.  Exit 77 (a skip) where it cannot be seen.
. "$(dirname "$0")/lib.sh"
command -v ss >/dev/null || { echo "needs ss (iproute2)"; exit 77; }

# An unknown name: every rank stops at once, naming it and what the kernel has.
start=$(now)
DT_TCP_CONGESTION=warp-drive "$BIN/dtrun" -n 2 "$BIN/coll_check" --quick --big 64 >"$WORK/bad" 2>&1 && fail "DT_TCP_CONGESTION=warp-drive accepted"
expect_grep "$WORK/bad" "DT_TCP_CONGESTION='warp-drive': this kernel has no such TCP congestion control \(available: .*reno"
less_than "$(elapsed "$start")" 10 || fail "the refusal took $(elapsed "$start") s"

# One the process may use that is not the default, so that ss tells them apart.
default=$(cat /proc/sys/net/ipv4/tcp_congestion_control)
if [ "$(id -u)" = 0 ]; then offered=$(cat /proc/sys/net/ipv4/tcp_available_congestion_control)
else offered=$(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control); fi
want=$(tr ' ' '\n' <<<"$offered" | grep -vx "$default" | grep -v '^$' | head -1)
[ -n "$want" ] || { echo "the kernel offers no congestion control besides $default"; exit 77; }

# The congestion control of the dtbench processes' established TCP sockets, one per line.
ccs_of_job() {
    ss -tinp state established 2>/dev/null | awk '/users:\(\("dtbench"/ { getline; print $1 }' | sort -u
}
# Runs a TCP-only 2-rank job and prints every congestion control ss saw on
# its sockets: until $want shows, or for 20 looks (2 s) once sockets exist.
observe() {
    env "$@" DT_TRANSPORT=tcp "$BIN/dtrun" -n 2 "$BIN/dtbench" allreduce -b 1048576 -e 1048576 -n 100000 -w 1 \
        >"$WORK/job" 2>&1 &
    local job=$! seen="" looks=0 i
    for i in $(seq 1 150); do
        seen=$(printf '%s\n%s\n' "$seen" "$(ccs_of_job)" | grep -v '^$' | sort -u)
        grep -qx "$want" <<<"$seen" && break
        [ -n "$seen" ] && looks=$((looks + 1))
        [ $looks -ge 20 ] && break
        sleep 0.1
    done
    kill "$job" 2>/dev/null
    wait "$job" 2>/dev/null
    echo "$seen"
}
with=$(observe DT_TCP_CONGESTION="$want")
[ -n "$with" ] || { cat "$WORK/job"; fail "no established dtbench socket seen"; }
grep -qx "$want" <<<"$with" || fail "DT_TCP_CONGESTION=$want, but the job's sockets use: $with"
without=$(observe)
grep -qx "$want" <<<"$without" && fail "without DT_TCP_CONGESTION a socket uses $want (default $default): the check cannot tell"
echo "ok: $want with the setting; $without without it"
