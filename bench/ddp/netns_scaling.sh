#!/usr/bin/env bash
# Data-parallel scaling on 2 namespace hosts, dtrain against PyTorch DDP
# (gloo) in the same run; writes the "data parallel scaling" section of
# bench/RESULTS.md.
#
#   bench/ddp/netns_scaling.sh [STEPS=30] [RATES="1000mbit 200mbit"]
#
# gpt-mini, batch 16 x 128 per rank, 1 thread per rank.  Scaling efficiency =
# aggregate tokens/s of 2 ranks / (2 x tokens/s of 1 process), each system
# against its own single-process figure.  dtrain also runs with f16 gradient
# compression.  Every figure is the better of 2 runs (this machine is shared).
# The "ceiling" row runs two single processes side by side with no
# communication at all: what sharing the 2 cores costs before any network
# work.  Needs root and a built tree.
#
# Each namespace host gets a CPU of its own (taskset: host i on CPU i, a
# single process on CPU 0), as two machines would; both systems are then
# measured again with placement left to the scheduler ("unpinned" rows),
# which moves one host's threads onto the other's core.
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-30}
RATES=${2:-"1000mbit 200mbit"}
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first: make build" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'scripts/netns-cluster.sh down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/tok"
CFG=(--config configs/gpt-mini.json --set threads=1 --set log_interval=1 --set eval_interval=0 --set eval_batches=1)

rate_of() { python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][5:]
print(f"{len(rows) / sum(1.0 / r['tokens_per_s'] for r in rows):.1f}")
PY
}
exposed_of() { python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][5:]
print(f"{sum(r['comm_s'] for r in rows) / len(rows) * 1000:.0f} ms comm, "
      f"{sum(r['exposed_comm_s'] for r in rows) / len(rows) * 1000:.0f} ms exposed")
PY
}
best_of_2() { # cmd...: the run with the higher leading number
    local a b
    a=$("$@"); b=$("$@")
    python3 -c "import sys; a, b = sys.argv[1], sys.argv[2]; print(a if float(a.split()[0]) >= float(b.split()[0]) else b)" "$a" "$b"
}
[ "$(nproc)" -ge 2 ] || { echo "needs 2 CPUs (one per namespace host)" >&2; exit 2; }
PIN=1 # 1: host i runs on CPU i (cpu_of); 0: the scheduler places everything
cpu_of() { if [ "$PIN" = 1 ]; then echo "taskset -c $1"; fi; }
dtrain_one() { $(cpu_of 0) $BIN/dtrain train "${CFG[@]}" --set steps=$((STEPS + 5)) --set metrics_file="$WORK/one.jsonl" >/dev/null; rate_of "$WORK/one.jsonl"; }
side_by_side() { # two independent single processes at once: aggregate tokens/s
    $(cpu_of 1) $BIN/dtrain train "${CFG[@]}" --set steps=$((STEPS + 5)) --set metrics_file="$WORK/s1.jsonl" >/dev/null &
    local p=$!
    $(cpu_of 0) $BIN/dtrain train "${CFG[@]}" --set steps=$((STEPS + 5)) --set metrics_file="$WORK/s0.jsonl" >/dev/null
    wait $p
    python3 -c "print(f'{$(rate_of "$WORK/s0.jsonl") + $(rate_of "$WORK/s1.jsonl"):.1f}')"
}
dtrain_two() { # extra --set args
    $(cpu_of 1) ip netns exec dt1 $BIN/dtrun --nnodes 2 --node-rank 1 --master 10.77.0.1:29500 --token-file "$WORK/tok" -n 1 \
        $BIN/dtrain train "${CFG[@]}" --set steps=$((STEPS + 5)) "$@" >"$WORK/n1" 2>&1 &
    local p=$!
    $(cpu_of 0) ip netns exec dt0 $BIN/dtrun --nnodes 2 --node-rank 0 --master 10.77.0.1:29500 --token-file "$WORK/tok" -n 1 \
        $BIN/dtrain train "${CFG[@]}" --set steps=$((STEPS + 5)) --set metrics_file="$WORK/two.jsonl" "$@" >"$WORK/n0" 2>&1
    wait $p
    echo "$(rate_of "$WORK/two.jsonl") ($(exposed_of "$WORK/two.jsonl"))"
}
torch_one() { $(cpu_of 0) /usr/bin/python3 bench/ddp/torch_ddp.py "$STEPS" | awk '{print $2}'; }
torch_two() {
    $(cpu_of 1) ip netns exec dt1 env RANK=1 WORLD_SIZE=2 MASTER_ADDR=10.77.0.1 MASTER_PORT=29600 GLOO_SOCKET_IFNAME=eth0 \
        /usr/bin/python3 bench/ddp/torch_ddp.py "$STEPS" >"$WORK/t1" 2>&1 &
    local p=$!
    $(cpu_of 0) ip netns exec dt0 env RANK=0 WORLD_SIZE=2 MASTER_ADDR=10.77.0.1 MASTER_PORT=29600 GLOO_SOCKET_IFNAME=eth0 \
        /usr/bin/python3 bench/ddp/torch_ddp.py "$STEPS" | awk '{print $2}'
    wait $p
}
eff() { python3 -c "print(f'{float(\"$1\".split()[0]) / (2 * $2):.2f}')"; }
# What the gradients' allreduce alone costs the CPUs: dtbench on the same
# pinned hosts, nothing else running, at the model's gradient bytes (f32, or
# f16 as compression sends them); busy time from /proc/stat (user, system,
# irq, softirq) of each host's CPU: the compute time a training step gives
# up to communication when its host has one core.  A run of 5 calls and one
# of 45: their difference over 40 leaves out start-up and rendezvous.  dtbench
# makes each number of calls twice (out of place, then in place), so the
# difference is 80 calls.
# DT_POLL_SPIN_US=0: a blocking call otherwise looks at its sockets for 200 us
# before sleeping (44 ms of CPU per f32 call at 1000mbit instead of 7), and
# the thread that runs training's nonblocking allreduces never does.
cpu_ticks() { awk '$1 == "cpu0" || $1 == "cpu1" { print $2 + $3 + $4 + $7 + $8 }' /proc/stat | paste -sd' '; }
allreduce_calls() { # dtype bytes calls -> us per call (rank 0)
    taskset -c 1 ip netns exec dt1 env DT_POLL_SPIN_US=0 $BIN/dtrun --nnodes 2 --node-rank 1 --master 10.77.0.1:29500 --token-file "$WORK/tok" -n 1 \
        $BIN/dtbench allreduce -d "$1" -b "$2" -e "$2" -n "$3" -w 0 -c 0 >/dev/null 2>&1 &
    local p=$!
    taskset -c 0 ip netns exec dt0 env DT_POLL_SPIN_US=0 $BIN/dtrun --nnodes 2 --node-rank 0 --master 10.77.0.1:29500 --token-file "$WORK/tok" -n 1 \
        $BIN/dtbench allreduce -d "$1" -b "$2" -e "$2" -n "$3" -w 0 -c 0 | sed 's/^\[0\] //' | awk '!/^#/ && NF >= 14 { print $6 }'
    wait $p
}
comm_cpu() { # dtype bytes -> "host 0 / host 1 ms of CPU per call | ms per call"
    local a b c t
    a=$(cpu_ticks); allreduce_calls "$1" "$2" 5 >/dev/null; b=$(cpu_ticks); t=$(allreduce_calls "$1" "$2" 45); c=$(cpu_ticks)
    python3 - "$a" "$b" "$c" "$t" <<'PY'
import os, sys
hz = os.sysconf('SC_CLK_TCK')
a, b, c = ([int(v) for v in x.split()] for x in sys.argv[1:4])
ms = [((z - y) - (y - x)) * 1000 / hz / 80 for x, y, z in zip(a, b, c)]
print(f"{ms[0]:.0f} / {ms[1]:.0f} | {float(sys.argv[4]) / 1000:.0f}")
PY
}
# The machine's speed drifts over the minutes this takes: the single-process
# rates are measured before and after the 2-rank runs, and each system's
# efficiency is taken against the faster of the two (the lower efficiency).
d1a=$(best_of_2 dtrain_one); t1a=$(best_of_2 torch_one); sbs=$(best_of_2 side_by_side)
: >"$WORK/rows"
cpu_rows=""
row() { printf '%s\t%s\t%s\t%s\n' "$@" >>"$WORK/rows"; } # link, system, figure, own single-process rate (d|t)
for rate in $RATES; do
    scripts/netns-cluster.sh up 2 --rate "$rate" >/dev/null
    for PIN in 1 0; do
        how=""
        [ "$PIN" = 0 ] && how=", unpinned"
        row "$rate" "dtrain$how" "$(best_of_2 dtrain_two)" d
        row "$rate" "dtrain, f16 gradients$how" "$(best_of_2 dtrain_two --set grad_compression=f16)" d
        row "$rate" "PyTorch DDP (gloo)$how" "$(best_of_2 torch_two)" t
    done
    params=$(sed -n 's/.*training gpt (\([0-9]*\) parameters).*/\1/p' "$WORK/n0" | head -1)
    cpu_rows+="| $rate | f32, $((params * 4)) B | $(comm_cpu f32 $((params * 4))) |"$'\n'
    cpu_rows+="| $rate | f16, $((params * 2)) B | $(comm_cpu f16 $((params * 2))) |"$'\n'
    PIN=1
    scripts/netns-cluster.sh down >/dev/null
done
d1b=$(best_of_2 dtrain_one); t1b=$(best_of_2 torch_one)
d1=$(python3 -c "print(max($d1a, $d1b))"); t1=$(python3 -c "print(max($t1a, $t1b))")
section="## Data parallel scaling, 2 hosts"
{
    echo "$section"
    echo
    echo "Measured $(date -u +%Y-%m-%d) on this 2-core VM: 2 network namespaces, one rank each, 1 compute thread per"
    echo "rank, each namespace host on a CPU of its own (taskset) unless the row says unpinned, TCP congestion"
    echo "control reno (scripts/netns-cluster.sh --cc says why); gpt-mini, batch"
    echo "16 x 128 per rank; $STEPS timed steps after 5 warm-up. Single process (on one CPU), before and after"
    echo "the 2-rank runs: dtrain $d1a and $d1b, PyTorch $t1a and $t1b tokens/s. Efficiency = 2-rank aggregate /"
    echo "(2 x own single-process rate), the faster of the two single-process figures. Command:"
    echo "\`bench/ddp/netns_scaling.sh $STEPS \"$RATES\"\`"
    echo
    echo "| link | system | 2-rank tokens/s (per-step comm / exposed) | efficiency |"
    echo "| --- | --- | ---: | ---: |"
    echo "| none | ceiling: 2 dtrain processes side by side, no communication | $sbs | $(eff "$sbs" "$d1") |"
    while IFS=$'\t' read -r link system figure own; do
        base=$d1
        [ "$own" = t ] && base=$t1
        echo "| $link | $system | $figure | $(eff "$figure" "$base") |"
    done <"$WORK/rows"
    echo
    echo "A host's rank, its progress thread and the kernel's network path (veth, bridge, tbf) share that host's"
    echo "one CPU, so every byte on the wire costs compute time; the ceiling row shows what two processes on"
    echo "the machine cost each other before any network work. Unpinned, the scheduler moves threads between"
    echo "the two CPUs (a rank's progress thread onto the other rank's core), which separate hosts cannot do."
    echo
    echo "What one step's gradient allreduce costs the CPUs with nothing else running (dtbench on the same"
    echo "pinned hosts; busy time of each host's CPU from /proc/stat: user, system, irq and softirq, of every"
    echo "process; the difference between a run of 45 calls and one of 5, over 40; DT_POLL_SPIN_US=0, as"
    echo "the thread that runs training's allreduces never spins). A training step gives this up from its"
    echo "compute, against a single-process step of $(python3 -c "print(f'{2048 / $d1 * 1000:.0f}')") ms:"
    echo
    echo "| link | allreduce | CPU ms of host 0 / host 1 per call | ms per call |"
    echo "| --- | --- | ---: | ---: |"
    printf '%s' "$cpu_rows"
} >"$WORK/section.md"
cat "$WORK/section.md"
python3 bench/update_results.py bench/RESULTS.md "$WORK/section.md" "$section"
