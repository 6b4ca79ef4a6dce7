#!/usr/bin/env bash
# Collectives side by side: dtrain (dtbench), OpenMPI (mpi_bench.c, built here
# with mpicc) and torch.distributed gloo (gloo_bench.py), same sizes, same
# machine, same run.  Writes one section per scenario into bench/RESULTS.md.
#
#   bench/comm/run.sh [SCENARIO ...]        (default: local2 local4 hosts4-1000mbit)
#
# SCENARIO
#   localN         N ranks on this host (each system's default transport:
#                  dtrain shared memory, OpenMPI vader, gloo TCP loopback)
#   hostsN-RATE    N network-namespace hosts, one rank each, links shaped to
#                  RATE (e.g. hosts4-1000mbit, hosts8-200mbit); needs root
#   hostsN-RATE-DELAY  the same with DELAY added to every hop (e.g.
#                  hosts4-1000mbit-100us; user-space emulator, see
#                  scripts/netns-cluster.sh)
# Environment: OPS (default "allreduce broadcast allgather reduce_scatter
# alltoall"), MINBYTES (8), MAXBYTES (67108864), ITERS (10), WARMUP (2),
# MINTIME (0.2: seconds each size is timed for at least, with more than ITERS
# calls where they are short; the same rule in all three programs),
# RUNS (1: with more, the systems take turns RUNS times and each figure is
# the median run's), CC (the namespace hosts' TCP congestion control, reno;
# scripts/netns-cluster.sh --cc says why).
#
# Each table gives time (us) and busbw (GB/s) per system and size, and
# dtrain/best = the better peer's time divided by dtrain's (above 1: dtrain is
# faster).  Needs a built tree (make build), openmpi-bin, libopenmpi-dev and
# python3-torch (scripts/setup.sh --bench installs them).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=build/bin
OPS=${OPS:-allreduce broadcast allgather reduce_scatter alltoall}
MINBYTES=${MINBYTES:-8} MAXBYTES=${MAXBYTES:-67108864} ITERS=${ITERS:-10} WARMUP=${WARMUP:-2} RUNS=${RUNS:-1}
MINTIME=${MINTIME:-0.2}
CC=${CC:-reno}
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || { echo "RUNS='$RUNS': expected a positive whole number" >&2; exit 2; }
PY=/usr/bin/python3
[ "${1:-}" = -h ] || [ "${1:-}" = --help ] && { sed -n '2,/^set -e/p' "$0" | grep '^#'  | sed 's/^# \{0,1\}//'; exit 0; }
[ -x $BIN/dtbench ] || { echo "build first: make build" >&2; exit 2; }
command -v mpicc >/dev/null || { echo "needs OpenMPI: scripts/setup.sh --bench installs it" >&2; exit 2; }
$PY -c 'import torch' 2>/dev/null || { echo "needs python3-torch" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-comm.XXXXXX)
trap 'scripts/netns-cluster.sh down >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
mpicc -O2 -o "$WORK/mpi_bench" bench/comm/mpi_bench.c -lm
TOKEN_FILE=$WORK/tok
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TOKEN_FILE"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1)
port=29600

# ---- one host ----
local_dtrain() { # N OP -> "size time algbw busbw"
    $BIN/dtrun -n "$1" --token-file "$TOKEN_FILE" $BIN/dtbench "$2" -b $MINBYTES -e $MAXBYTES -f 2 -n $ITERS -w $WARMUP -t $MINTIME \
        | sed 's/^\[0\] //' | awk '!/^#/ && NF >= 14 { print $1, $6, $7, $8 }'
}
local_mpi() { "${MPIRUN[@]}" -np "$1" "$WORK/mpi_bench" "$2" $MINBYTES $MAXBYTES 2 $ITERS $WARMUP $MINTIME; }
local_gloo() {
    local n=$1 op=$2 pids=() r
    port=$((port + 1))
    for ((r = 1; r < n; r++)); do
        RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $PY bench/comm/gloo_bench.py "$op" $MINBYTES $MAXBYTES 2 $ITERS $WARMUP $MINTIME &
        pids+=($!)
    done
    RANK=0 WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $PY bench/comm/gloo_bench.py "$op" $MINBYTES $MAXBYTES 2 $ITERS $WARMUP $MINTIME
    for r in "${pids[@]}"; do wait "$r"; done
}

# ---- namespace hosts (scripts/netns-cluster.sh: dt0.., 10.77.0.(i+1)) ----
ns_dtrain() {
    local n=$1 op=$2 pids=() i
    for ((i = n - 1; i >= 1; i--)); do
        ip netns exec dt$i $BIN/dtrun --nnodes "$n" --node-rank $i --master 10.77.0.1:29500 --token-file "$TOKEN_FILE" -n 1 \
            $BIN/dtbench "$op" -b $MINBYTES -e $MAXBYTES -f 2 -n $ITERS -w $WARMUP -t $MINTIME >/dev/null 2>"$WORK/ns.$i" &
        pids+=($!)
    done
    ip netns exec dt0 $BIN/dtrun --nnodes "$n" --node-rank 0 --master 10.77.0.1:29500 --token-file "$TOKEN_FILE" -n 1 \
        $BIN/dtbench "$op" -b $MINBYTES -e $MAXBYTES -f 2 -n $ITERS -w $WARMUP -t $MINTIME | sed 's/^\[0\] //' \
        | awk '!/^#/ && NF >= 14 { print $1, $6, $7, $8 }'
    for i in "${pids[@]}"; do wait "$i"; done
}
ns_gloo() {
    local n=$1 op=$2 pids=() i
    port=$((port + 1))
    for ((i = n - 1; i >= 1; i--)); do
        ip netns exec dt$i env GLOO_SOCKET_IFNAME=eth0 RANK=$i WORLD_SIZE=$n MASTER_ADDR=10.77.0.1 MASTER_PORT=$port \
            $PY bench/comm/gloo_bench.py "$op" $MINBYTES $MAXBYTES 2 $ITERS $WARMUP $MINTIME &
        pids+=($!)
    done
    ip netns exec dt0 env GLOO_SOCKET_IFNAME=eth0 RANK=0 WORLD_SIZE=$n MASTER_ADDR=10.77.0.1 MASTER_PORT=$port \
        $PY bench/comm/gloo_bench.py "$op" $MINBYTES $MAXBYTES 2 $ITERS $WARMUP $MINTIME
    for i in "${pids[@]}"; do wait "$i"; done
}
# OpenMPI across namespaces: mpirun in dt0; its "ssh" starts each daemon in
# namespace dtK under its own UTS namespace with hostname hK, so every
# namespace is a distinct host to OpenMPI.
ns_mpi() {
    local n=$1 op=$2 i
    cat >"$WORK/agent" <<'EOF'
#!/bin/sh
# OpenMPI's remote-shell agent: run "$@" on host hK = namespace dtK.
h=$1; shift
exec ip netns exec "dt${h#h}" unshare --uts sh -c 'hostname "$0"; exec sh -c "$*"' "$h" "$@"
EOF
    chmod +x "$WORK/agent"
    : >"$WORK/hosts"
    for ((i = 0; i < n; i++)); do echo "h$i slots=1" >>"$WORK/hosts"; done
    ip netns exec dt0 unshare --uts sh -c 'hostname h0; exec "$@"' sh \
        "${MPIRUN[@]}" -np "$n" --hostfile "$WORK/hosts" --mca plm_rsh_agent "$WORK/agent" \
        --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
        "$WORK/mpi_bench" "$op" $MINBYTES $MAXBYTES 2 $ITERS $WARMUP $MINTIME
}

table() { # title, link GB/s or "" -> markdown on stdout; inputs in $WORK/{d,m,g}
    local link=$1
    echo "| size (B) | dtrain us | dtrain busbw | OpenMPI us | OpenMPI busbw | gloo us | gloo busbw | dtrain/best |$([ -n "$link" ] && echo ' dtrain busbw/link |')"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |$([ -n "$link" ] && echo ' ---: |')"
    $PY - "$WORK/d" "$WORK/m" "$WORK/g" "$link" <<'EOF'
import sys
def load(p):  # size -> (time, busbw) of the median run (by time)
    runs = {}
    for line in open(p):
        f = line.split()
        if len(f) == 4 and f[0].isdigit():
            runs.setdefault(int(f[0]), []).append((float(f[1]), float(f[3])))
    return {size: sorted(r)[len(r) // 2] for size, r in runs.items()}
d, m, g = (load(p) for p in sys.argv[1:4])
def us(t):  # two decimals under 10 us, where one would make the ratio coarse
    return f"{t:.2f}" if t < 10 else f"{t:.1f}"
link = float(sys.argv[4]) if sys.argv[4] else None
for size in sorted(d):
    t, bw = d[size]
    cells = [str(size), us(t), f"{bw:.3f}"]
    peers = []
    for peer in (m, g):
        if size in peer:
            cells += [us(peer[size][0]), f"{peer[size][1]:.3f}"]
            peers.append(peer[size][0])
        else:
            cells += ["-", "-"]
    cells.append(f"{min(peers) / t:.2f}" if peers and t > 0 else "-")
    if link:
        cells.append(f"{bw / link:.2f}")
    print("| " + " | ".join(cells) + " |")
EOF
}

scenario() {
    local sc=$1 n rate="" link="" kind delay=""
    if [[ $sc =~ ^local([0-9]+)$ ]]; then
        kind=local n=${BASH_REMATCH[1]}
    elif [[ $sc =~ ^hosts([0-9]+)-([0-9]+[kmg]bit)(-([0-9]+[um]s))?$ ]]; then
        kind=ns n=${BASH_REMATCH[1]} rate=${BASH_REMATCH[2]} delay=${BASH_REMATCH[4]}
        [ "$(id -u)" = 0 ] || { echo "$sc: needs root (network namespaces)" >&2; return 2; }
        scripts/netns-cluster.sh up "$n" --rate "$rate" ${delay:+--delay "$delay"} --cc "$CC" >/dev/null
        link=$($PY -c "r='$rate'; m={'gbit':1e9,'mbit':1e6,'kbit':1e3}; u=r[-4:]; print(float(r[:-4])*m[u]/8/1e9)")
    else
        echo "unknown scenario '$sc' (localN, hostsN-RATE or hostsN-RATE-DELAY)" >&2
        return 2
    fi
    local title
    if [ $kind = local ]; then title="## Collectives side by side: one host, $n ranks"
    else title="## Collectives side by side: $n hosts at $rate${delay:+, $delay per hop}"; fi
    {
        echo "$title"
        echo
        echo "Measured $(date -u +%Y-%m-%d) on a 2-core VM, $([ "$RUNS" = 1 ] && echo "one run" || echo "median of $RUNS runs (the systems in turn)"), f32 sum, each size timed for at least $MINTIME s ($ITERS calls or more)."
        if [ $kind = local ]; then
            echo "$n ranks on one host, each system with its default transport (dtrain: shared"
            echo "memory; OpenMPI: vader; gloo: TCP over loopback)."
        else
            echo "$n network namespaces, one rank each, both directions of each link shaped to $rate"
            echo "with tbf (the wire: $link GB/s), TCP congestion control $CC on every host. OpenMPI: TCP BTL;"
            echo "gloo: GLOO_SOCKET_IFNAME=eth0."
            [ -n "$delay" ] && echo "Every packet that crosses the bridge is held $delay (dt-netdelay, NFQUEUE)."
        fi
        echo "dtrain/best: the better peer's time over dtrain's (above 1: dtrain is faster). Command:"
        echo
        local envs="" v def
        for v in OPS:"allreduce broadcast allgather reduce_scatter alltoall" MINBYTES:8 MAXBYTES:67108864 ITERS:10 WARMUP:2 MINTIME:0.2 RUNS:1 CC:reno; do
            def=${v#*:} v=${v%%:*}
            [ "${!v}" != "$def" ] && envs+="$v=$( [[ "${!v}" == *" "* ]] && echo "\"${!v}\"" || echo "${!v}") "
        done
        echo "    ${envs}bench/comm/run.sh $sc"
        echo
    } >"$WORK/section.md"
    for op in $OPS; do
        : >"$WORK/d"; : >"$WORK/m"; : >"$WORK/g"
        for ((run = 1; run <= RUNS; run++)); do
            echo "[$sc] $op (run $run of $RUNS): dtrain" >&2
            ${kind}_dtrain "$n" "$op" >>"$WORK/d"
            echo "[$sc] $op (run $run of $RUNS): OpenMPI" >&2
            ${kind}_mpi "$n" "$op" >>"$WORK/m" 2>"$WORK/m.err" || { echo "OpenMPI failed:" >&2; tail -5 "$WORK/m.err" >&2; }
            echo "[$sc] $op (run $run of $RUNS): gloo" >&2
            ${kind}_gloo "$n" "$op" >>"$WORK/g" 2>"$WORK/g.err" || { echo "gloo failed:" >&2; tail -5 "$WORK/g.err" >&2; }
        done
        { echo "### $op"; echo; [ "$op" = reduce_scatter ] && { echo "(gloo's torch backend has no reduce_scatter.)"; echo; }
          table "$link"; echo; } >>"$WORK/section.md"
    done
    [ $kind = ns ] && scripts/netns-cluster.sh down >/dev/null
    cat "$WORK/section.md"
    python3 bench/update_results.py bench/RESULTS.md "$WORK/section.md" "$title"
}

[ $# -gt 0 ] || set -- local2 local4 hosts4-1000mbit
for sc in "$@"; do scenario "$sc"; done
