#!/usr/bin/env bash
# Create or remove a cluster of network namespaces dt0..dt(N-1), each with one
# interface eth0 (10.77.0.(i+1)/24), joined by a bridge that lives in its own
# namespace "dtbr".  Nothing is added to the caller's namespace.
#
#   scripts/netns-cluster.sh up N [--rate 1000mbit] [--delay 100us] [--cc reno]
#   scripts/netns-cluster.sh down
#   scripts/netns-cluster.sh status
#
# --rate shapes both directions of every host's link (tbf on eth0 for what a
# host sends, tbf on the bridge port for what it receives), so each host has
# a full-duplex link of that rate.  --delay D (e.g. 100us) holds every packet
# that crosses the bridge for D: this kernel has no tc netem, so an iptables
# FORWARD rule in the bridge namespace queues bridged packets (NFQUEUE) to
# build/bin/dt-netdelay (needs iptables and libnetfilter-queue-dev:
# scripts/setup.sh --bench).
# NETNS_PREFIX=P (default dt) names the namespaces P0..P(N-1) and Pbr, so
# that clusters of different users of one machine do not meet.
# --cc ALG is the hosts' default TCP congestion control (default reno;
# "system" keeps the machine's).  A namespace may only take one listed in
# net.ipv4.tcp_allowed_congestion_control.
set -euo pipefail

P=${NETNS_PREFIX:-dt}
[[ "$P" =~ ^[a-z][a-z0-9]{0,7}$ ]] || { echo "netns-cluster: NETNS_PREFIX '$P': 1 to 8 lower-case letters and digits" >&2; exit 2; }
BR_NS=${P}br
SUBNET=10.77.0
NETDELAY=${NETDELAY:-$(cd "$(dirname "$0")/.." && pwd)/build/bin/dt-netdelay}
DELAY_LOG=/tmp/dt-netdelay.log

usage() { sed -n '2,/^set -e/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; }
die() { echo "netns-cluster: $*" >&2; exit 2; }

need_root() {
    [ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
    command -v ip >/dev/null || die "needs iproute2 (scripts/setup.sh installs it)"
}

down() {
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$P([0-9]+|br)\$" || true); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
}

# tbf burst: ~2 ms of traffic, at least 128 KiB.  tbf cuts a packet longer
# than its burst into MTU-sized ones in software (a real NIC does that for
# free): a 64 KiB burst is a few header bytes short of TCP's largest GSO
# packet, and at 200mbit the cutting took 15% of both cores in softirq (2%
# with 128 KiB; DDP on 2 hosts went from 6913 to 9165 tokens/s).
burst_for() {
    local rate=$1 bits
    case $rate in
        *gbit) bits=$(( ${rate%gbit} * 1000000000 )) ;;
        *mbit) bits=$(( ${rate%mbit} * 1000000 )) ;;
        *kbit) bits=$(( ${rate%kbit} * 1000 )) ;;
        *) die "--rate '$rate': use a number with kbit, mbit or gbit" ;;
    esac
    local b=$(( bits / 8 / 500 ))
    [ $b -lt 131072 ] && b=131072
    echo $b
}

up() {
    local n=$1; shift
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] || die "N must be 1..64, got '$n'"
    # reno: what a plain Debian host (cubic) does on a link that drops
    # nothing, and cubic cannot be a namespace's default.  This VM's own
    # default, bbr, empties each busy connection for 200 ms every 10 s to
    # probe the round trip (ss shows cwnd 4): 4 hosts at 1000mbit, allreduce
    # 32-64 MiB, 0.86-0.90 of the link with bbr against 0.94 with reno.
    local rate="" delay="" cc=reno
    while [ $# -gt 0 ]; do
        case $1 in
            --rate) rate=${2:-}; shift 2 ;;
            --delay) delay=${2:-}; shift 2 ;;
            --cc) cc=${2:-}; shift 2 ;;
            *) die "unknown option '$1'" ;;
        esac
    done
    local delay_us=""
    if [ -n "$delay" ]; then
        case $delay in
            *us) delay_us=${delay%us} ;;
            *ms) delay_us=$(( ${delay%ms} * 1000 )) ;;
            *) die "--delay '$delay': use a number with us or ms (e.g. 100us)" ;;
        esac
        [[ "$delay_us" =~ ^[0-9]+$ ]] || die "--delay '$delay': use a whole number with us or ms"
        [ -x "$NETDELAY" ] || die "--delay needs $NETDELAY (install libnetfilter-queue-dev with scripts/setup.sh --bench, then make build)"
        command -v iptables-legacy >/dev/null || die "--delay needs iptables-legacy (scripts/setup.sh --bench installs iptables)"
    fi
    local allowed
    allowed=$(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control)
    [ "$cc" = system ] || [[ " $allowed " == *" $cc "* ]] || die "--cc '$cc': a namespace may take one of: $allowed (or system)"
    local burst=""
    [ -n "$rate" ] && burst=$(burst_for "$rate")
    down
    ip netns add $BR_NS
    ip -n $BR_NS link set lo up
    ip -n $BR_NS link add br0 type bridge
    ip -n $BR_NS link set br0 up
    for ((i = 0; i < n; i++)); do
        local ns=$P$i
        ip netns add $ns
        ip link add name vb$i netns $BR_NS type veth peer name eth0 netns $ns
        ip -n $BR_NS link set vb$i master br0
        ip -n $BR_NS link set vb$i up
        ip -n $ns link set lo up
        ip -n $ns addr add $SUBNET.$((i + 1))/24 dev eth0
        ip -n $ns link set eth0 up
        [ "$cc" = system ] || ip netns exec $ns sysctl -qw net.ipv4.tcp_congestion_control="$cc"
        if [ -n "$rate" ]; then
            tc -n $ns qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 50ms
            tc -n $BR_NS qdisc add dev vb$i root tbf rate "$rate" burst "$burst" latency 50ms
        fi
    done
    if [ -n "$delay_us" ]; then
        # Bridged IPv4 packets go through iptables in the bridge namespace.
        ip netns exec $BR_NS sysctl -qw net.bridge.bridge-nf-call-iptables=1 \
            || die "cannot enable bridge netfilter in $BR_NS"
        ip netns exec $BR_NS iptables-legacy -A FORWARD -j NFQUEUE --queue-num 0
        # Its output goes to the log, so that it holds no pipe of the caller's
        # open (`netns-cluster.sh up 4 --delay 100us | tail` would never end).
        ip netns exec $BR_NS "$NETDELAY" --queue 0 --delay-us "$delay_us" </dev/null >"$DELAY_LOG" 2>&1 &
        local i=0
        until grep -q "per packet" "$DELAY_LOG" 2>/dev/null; do
            sleep 0.1
            i=$((i + 1))
            [ $i -lt 50 ] || die "dt-netdelay did not start: $(cat "$DELAY_LOG")"
        done
    fi
    [ "$cc" = system ] && cc=$(cat /proc/sys/net/ipv4/tcp_congestion_control)
    echo "netns-cluster: $n hosts ${P}0..$P$((n - 1)) at $SUBNET.1..$SUBNET.$n${rate:+, links $rate}${delay:+, $delay per hop}, TCP $cc"
}

case ${1:-} in
    up) need_root; [ $# -ge 2 ] || die "usage: up N [--rate R] [--delay D] [--cc ALG]"; shift; up "$@" ;;
    down) need_root; down ;;
    status) ip netns list | grep -E "^$P" || echo "no $P namespaces" ;;
    -h|--help|help) usage ;;
    *) usage; exit 2 ;;
esac
