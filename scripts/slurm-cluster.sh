#!/usr/bin/env bash
# A real Slurm cluster on one machine: Debian's slurmctld and one slurmd per
# network namespace, each namespace a host with its own name, address,
# spool and log, authenticated by a munged of the cluster's own.
#
#   scripts/slurm-cluster.sh up N [--dir DIR]   start nodes n0..n(N-1)
#   scripts/slurm-cluster.sh run CMD...         run CMD on the login host (sbatch, squeue, ...)
#   scripts/slurm-cluster.sh kill-node K        kill everything on node nK (slurmd, its steps, their tasks)
#   scripts/slurm-cluster.sh start-node K       start nK's slurmd again (a node that rebooted)
#   scripts/slurm-cluster.sh down               stop the daemons, remove the namespaces
#   scripts/slurm-cluster.sh status             sinfo, or "no Slurm cluster"
#
# Layout: namespace dtsctl is the controller and login host "ctl"
# (10.78.0.100, slurmctld); namespace dtsK is compute node "nK"
# (10.78.0.(K+1), slurmd); a bridge in namespace dtsbr joins them.  Each
# daemon runs in its own UTS and mount namespaces with its host name and the
# cluster's /etc/hosts (DIR/hosts mounted over it), so a job sees the host
# names and addresses a real cluster's job would.  The files (slurm.conf, munge key
# and socket, spool, state, logs) live in DIR (default
# /tmp/dtrain-slurm); `run` exports SLURM_CONF for the commands.
# Needs root and Debian's slurm-wlm and munge (scripts/setup.sh --slurm).
# Nothing of the machine's own Slurm or munge is read or changed.
set -euo pipefail

SUBNET=10.78.0
CTL_IP=$SUBNET.100
DIR_FILE=/run/dtrain-slurm.dir # where `up` left DIR, for the other verbs

usage() { sed -n '2,/^set -e/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; }
die() { echo "slurm-cluster: $*" >&2; exit 2; }

need() {
    [ "$(id -u)" = 0 ] || die "needs root (network namespaces, daemons)"
    local c
    for c in ip nsenter unshare slurmctld slurmd sbatch munged; do
        command -v $c >/dev/null || die "needs $c: scripts/setup.sh --slurm installs slurm-wlm and munge"
    done
}

cluster_dir() {
    [ -f $DIR_FILE ] || die "no cluster is up (scripts/slurm-cluster.sh up N)"
    cat $DIR_FILE
}

# on NS HOST CMD...: run CMD in namespace NS as host HOST, with the cluster's
# /etc/hosts.  nsenter rather than `ip netns exec`, which mounts a new /sys
# and so hides the cgroup file systems slurmd checks for at start-up.
on() {
    local ns=$1 host=$2; shift 2
    nsenter --net="/run/netns/$ns" unshare --mount --uts \
        sh -c 'mount --bind "$1" /etc/hosts && hostname "$0" && shift && exec "$@"' "$host" "$(cluster_dir)/hosts" "$@"
}

nodes_of() { ls "$1"/nodes.* 2>/dev/null | sed 's/.*nodes\.//' | sort -n; }

start_slurmd() { # DIR K
    local dir=$1 k=$2
    mkdir -p "$dir/spool/n$k"
    on dts$k n$k env SLURM_CONF="$dir/slurm.conf" slurmd -D >"$dir/slurmd.n$k.out" 2>&1 &
    echo $! >"$dir/slurmd.n$k.pid.launcher"
}

down() {
    local dir="" ns
    [ -f $DIR_FILE ] && dir=$(cat $DIR_FILE)
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^dts([0-9]+|ctl|br)$' || true); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
    if [ -n "$dir" ] && [ -f "$dir/munged.pid" ]; then
        kill "$(cat "$dir/munged.pid")" 2>/dev/null || true
    fi
    rm -f $DIR_FILE
}

wait_for() { # SECONDS WHAT CMD...: poll CMD until it succeeds
    local limit=$1 what=$2 i; shift 2
    for ((i = 0; i < limit * 5; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    die "$what did not happen within $limit s (logs in $(cat $DIR_FILE 2>/dev/null))"
}

up() {
    local n=$1; shift
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 32 ] || die "N must be 1..32, got '$n'"
    local dir=/tmp/dtrain-slurm
    while [ $# -gt 0 ]; do
        case $1 in
            --dir) dir=${2:-}; [ -n "$dir" ] || die "--dir needs a path"; shift 2 ;;
            *) die "unknown option '$1'" ;;
        esac
    done
    down
    rm -rf "$dir"
    mkdir -p "$dir/state" "$dir/spool"
    dir=$(cd "$dir" && pwd)
    echo "$dir" >$DIR_FILE

    # The network: a bridge namespace, the controller, the nodes.
    ip netns add dtsbr
    ip -n dtsbr link set lo up
    ip -n dtsbr link add br0 type bridge
    ip -n dtsbr link set br0 up
    local hosts="127.0.0.1 localhost
$CTL_IP ctl" i
    for ((i = 0; i < n; i++)); do hosts+=$'\n'"$SUBNET.$((i + 1)) n$i"; done
    add_host() { # NS IP PORT
        ip netns add "$1"
        ip link add name "$3" netns dtsbr type veth peer name eth0 netns "$1"
        ip -n dtsbr link set "$3" master br0
        ip -n dtsbr link set "$3" up
        ip -n "$1" link set lo up
        ip -n "$1" addr add "$2/24" dev eth0
        ip -n "$1" link set eth0 up
    }
    echo "$hosts" >"$dir/hosts"
    add_host dtsctl $CTL_IP vsctl
    for ((i = 0; i < n; i++)); do
        add_host dts$i $SUBNET.$((i + 1)) vs$i
        : >"$dir/nodes.$i"
    done

    # munge: the cluster's own key and socket (the machine's munged, if any, is untouched).
    dd if=/dev/urandom of="$dir/munge.key" bs=1 count=1024 status=none
    chmod 600 "$dir/munge.key"
    munged --force --key-file="$dir/munge.key" --socket="$dir/munge.sock" --pid-file="$dir/munged.pid" \
        --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" ||
        die "munged did not start: $(tail -n 3 "$dir/munged.log" 2>/dev/null)"

    local cpus
    cpus=$(nproc)
    {
        echo "# written by scripts/slurm-cluster.sh up $n"
        echo "ClusterName=dtrain"
        echo "SlurmctldHost=ctl($CTL_IP)"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "AuthType=auth/munge"
        echo "CredType=cred/munge"
        # cred_expire is also how long a requeued job waits before it may start
        # again (default 120 s); 10 s keeps the tests short.
        echo "AuthInfo=socket=$dir/munge.sock,cred_expire=10"
        echo "StateSaveLocation=$dir/state"
        echo "SlurmdSpoolDir=$dir/spool/%n"
        echo "SlurmctldPidFile=$dir/slurmctld.pid"
        echo "SlurmdPidFile=$dir/slurmd.%n.pid"
        echo "SlurmctldLogFile=$dir/slurmctld.log"
        echo "SlurmdLogFile=$dir/slurmd.%n.log"
        echo "SlurmctldDebug=info"
        echo "SlurmdDebug=info"
        # No cgroups: the nodes share one kernel, and processes are tracked by group.
        echo "ProctrackType=proctrack/pgid"
        echo "TaskPlugin=task/none"
        echo "JobAcctGatherType=jobacct_gather/none"
        echo "AccountingStorageType=accounting_storage/none"
        echo "SwitchType=switch/none"
        echo "MpiDefault=none"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_CPU"
        echo "SchedulerType=sched/backfill"
        # A requeued job becomes eligible when its begin time passes, and then
        # waits for a scheduling pass: backfill's every 30 s by default, the
        # main scheduler's every 60 s (a requeue took 37-39 s where 21 s were
        # due).  Every second on this small cluster.
        echo "SchedulerParameters=bf_interval=1"
        # A node that stops answering is DOWN after 10 s; one that comes back is usable again.
        # slurmctld pings a silent node every SlurmdTimeout/3 s, but each ping of a dead
        # one retries its connection for MessageTimeout (default 10 s), and only the
        # next ping marks it DOWN: 27-30 s from a kill with the default, 12 s with 4.
        # 5 s is still ample for an RPC between namespaces of one machine.
        echo "SlurmdTimeout=10"
        echo "MessageTimeout=5"
        echo "ReturnToService=2"
        echo "JobRequeue=0"
        echo "KillWait=5"
        echo "MinJobAge=600"
        echo "InactiveLimit=0"
        for ((i = 0; i < n; i++)); do
            echo "NodeName=n$i NodeAddr=$SUBNET.$((i + 1)) CPUs=$cpus State=UNKNOWN"
        done
        echo "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    } >"$dir/slurm.conf"

    on dtsctl ctl env SLURM_CONF="$dir/slurm.conf" slurmctld -D -i >"$dir/slurmctld.out" 2>&1 &
    wait_for 30 "slurmctld answering" on dtsctl ctl env SLURM_CONF="$dir/slurm.conf" scontrol ping
    for ((i = 0; i < n; i++)); do start_slurmd "$dir" $i; done
    idle() { [ "$(on dtsctl ctl env SLURM_CONF="$dir/slurm.conf" sinfo -h -t idle -o %D)" = "$n" ]; }
    wait_for 60 "$n nodes idle" idle
    echo "slurm-cluster: controller ctl ($CTL_IP), $n nodes n0..n$((n - 1)) ($SUBNET.1..$SUBNET.$n), files in $dir"
}

case ${1:-} in
    up) need; [ $# -ge 2 ] || die "usage: up N [--dir DIR]"; shift; up "$@" ;;
    run)
        need; shift; [ $# -ge 1 ] || die "usage: run CMD..."
        dir=$(cluster_dir)
        on dtsctl ctl env SLURM_CONF="$dir/slurm.conf" "$@"
        ;;
    kill-node)
        need; [[ "${2:-}" =~ ^[0-9]+$ ]] || die "usage: kill-node K"
        ip netns list | grep -q "^dts$2\b" || die "no node n$2"
        # Everything in the namespace: slurmd, slurmstepd and the job's tasks, at once.
        ip netns pids "dts$2" | xargs -r kill -9
        echo "slurm-cluster: node n$2 killed"
        ;;
    start-node)
        need; [[ "${2:-}" =~ ^[0-9]+$ ]] || die "usage: start-node K"
        dir=$(cluster_dir)
        [ -f "$dir/nodes.$2" ] || die "no node n$2"
        start_slurmd "$dir" "$2"
        ;;
    down) need; down ;;
    status)
        if [ -f $DIR_FILE ]; then
            on dtsctl ctl env SLURM_CONF="$(cat $DIR_FILE)/slurm.conf" sinfo
        else
            echo "no Slurm cluster"
        fi
        ;;
    -h|--help|help) usage ;;
    *) usage; exit 2 ;;
esac
