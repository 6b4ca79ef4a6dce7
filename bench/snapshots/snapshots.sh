#!/usr/bin/env bash
# In-memory checkpoints measured on 2 namespace hosts joined by a 1000 mbit
# link (bench/snapshots/snapshots.py says what; the "In-memory checkpoints"
# section of bench/RESULTS.md holds the figures).
#
#   bench/snapshots/snapshots.sh [STEP_RUNS=5] [FAULT_RUNS=3] [RATE=1000mbit]
#
# FAULT_KINDS=rank:snap,host:snap (default: every kind) picks the faults;
# SNAP_EVERY=k times the steps with a snapshot every k steps (the mean of
# 4k steps: a median would leave the snapshot steps out);
# NS=name names the namespaces name0, name1 (default snap).  Each fault run
# prints the phases of its restart (restart_phases.py, from DT_RESTART_TRACE).
#
# The hosts are namespaces snap0 and snap1 (10.79.0.1, 10.79.0.2) with a veth
# pair between them, each end shaped to RATE by tbf (what a host sends), each
# host's processes on a CPU of its own (taskset: host i on CPU i).  Needs root
# and a built tree (build/bin).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEP_RUNS=${1:-5}
FAULT_RUNS=${2:-3}
RATE=${3:-1000mbit}
NS=${NS:-snap}
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 2; }
BIN=${BIN:-$PWD/build/bin} # BIN=other/build/bin: another build's programs (a before/after comparison)
[ -x "$BIN/dtrain" ] || { echo "build first" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-snapbench.XXXXXX)
down() { for ns in ${NS}0 ${NS}1; do ip netns pids $ns 2>/dev/null | xargs -r kill -9 2>/dev/null || true
                                   ip netns del $ns 2>/dev/null || true; done; }
trap 'down; [ -n "${KEEP:-}" ] || rm -rf "$WORK"' EXIT # KEEP=1: leave the logs
down
ip netns add ${NS}0
ip netns add ${NS}1
ip link add eth0 netns ${NS}0 type veth peer name eth0 netns ${NS}1
bits=$(( ${RATE%mbit} * 1000000 )); burst=$(( bits / 8 / 500 )); [ $burst -lt 131072 ] && burst=131072
for i in 0 1; do
    ip -n ${NS}$i link set lo up
    ip -n ${NS}$i addr add 10.79.0.$((i + 1))/24 dev eth0
    ip -n ${NS}$i link set eth0 up
    ip netns exec ${NS}$i sysctl -qw net.ipv4.tcp_congestion_control=reno
    tc -n ${NS}$i qdisc add dev eth0 root tbf rate "$RATE" burst "$burst" latency 50ms
done
echo "2 namespace hosts ${NS}0, ${NS}1 at 10.79.0.1-2, a $RATE link, TCP reno"
python3 bench/snapshots/snapshots.py "$BIN" "$WORK" ${NS}0 ${NS}1 10.79.0.1 "$STEP_RUNS" "$FAULT_RUNS"
