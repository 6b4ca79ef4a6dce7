#!/usr/bin/env bash
# Data-parallel scaling with the gradient compressors (issue 51) on 2 and 4
# namespace hosts at 200 and 1000 mbit: dtrain with f32, f16, PowerSGD and
# top-k gradients, PyTorch DDP (gloo) with f32 and with its powerSGD_hook,
# in one run; writes the "gradient compressors: scaling" section of
# bench/RESULTS.md.
#
#   bench/ddp/netns_compression.sh [STEPS=20] [RATES="200mbit 1000mbit"] [HOSTS="2 4"] [REPS=3]
#   PSGD_RANK=4 TOPK=0.01              the compressors' keys (PyTorch's hook: the same rank)
#   NETNS_PREFIX=dt                    the namespaces' names (scripts/netns-cluster.sh)
#   TORCH=0                            PyTorch's rows left out
#   KEEP=DIR                           the measurements (rows, singles, ceil) also
#                                      appended to DIR's, for FROM
#   FROM=DIR                           measure nothing: the section from the rows,
#                                      singles and ceil files of an earlier run (a
#                                      copy of its work directory, cut short or not)
#
# gpt-mini, batch 16 x 128 per rank, 1 thread per rank, STEPS timed steps
# after 5 warm-up, compression from the first step (compress_start_step 0;
# PyTorch's hook from its second).  Host i runs on CPU i mod 2 (taskset):
# 2 hosts have a CPU each, 4 hosts share the 2 CPUs two by two.  Each
# configuration runs REPS times, the systems alternating within each round
# (this machine is shared); the table gives medians.  Efficiency = aggregate
# tokens/s / (hosts x own single-process rate, on one CPU, median of the runs
# before and after); "of ceiling": against the same number of dtrain
# processes side by side on the same CPUs without communication (with 4
# hosts on 2 CPUs the single-process rate is out of reach).  Needs root.
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-20}
RATES=${2:-"200mbit 1000mbit"}
HOSTS=${3:-"2 4"}
REPS=${4:-3}
PSGD_RANK=${PSGD_RANK:-4}
TOPK=${TOPK:-0.01}
export NETNS_PREFIX=${NETNS_PREFIX:-dt}
P=$NETNS_PREFIX
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first: make build" >&2; exit 2; }
[ "$(nproc)" -ge 2 ] || { echo "needs 2 CPUs" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'scripts/netns-cluster.sh down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
[ -n "${FROM:-}" ] && cp "$FROM"/{rows,singles,ceil} "$WORK/"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/tok"
CFG=(--config configs/gpt-mini.json --set threads=1 --set log_interval=1 --set eval_interval=0 --set eval_batches=1
     --set steps=$((STEPS + 5)))

rate_of() { python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][5:]
comm = sum(r.get("comm_s", 0) for r in rows) / len(rows) * 1000
exp = sum(r.get("exposed_comm_s", 0) for r in rows) / len(rows) * 1000
print(f"{len(rows) / sum(1.0 / r['tokens_per_s'] for r in rows):.1f} {comm:.0f} {exp:.0f}")
PY
}
cpu() { echo "taskset -c $(($1 % 2))"; }
dtrain_one() { $(cpu 0) $BIN/dtrain train "${CFG[@]}" --set metrics_file="$WORK/one.jsonl" >/dev/null; rate_of "$WORK/one.jsonl"; }
torch_one() { $(cpu 0) /usr/bin/python3 bench/ddp/torch_ddp.py "$STEPS" | awk '{print $2}'; }
side_by_side() { # n: n dtrain processes at once, no communication: aggregate tokens/s
    local pids=() i
    for ((i = 1; i < $1; i++)); do
        $(cpu $i) $BIN/dtrain train "${CFG[@]}" --set metrics_file="$WORK/s$i.jsonl" >/dev/null &
        pids+=($!)
    done
    $(cpu 0) $BIN/dtrain train "${CFG[@]}" --set metrics_file="$WORK/s0.jsonl" >/dev/null
    wait "${pids[@]}"
    for ((i = 0; i < $1; i++)); do rate_of "$WORK/s$i.jsonl"; done | awk '{ s += $1 } END { printf "%.1f\n", s }'
}
dtrain_n() { # n extra --set args: "tokens/s comm_ms exposed_ms" of rank 0
    local n=$1 pids=() i
    shift
    for ((i = n - 1; i >= 1; i--)); do
        $(cpu $i) ip netns exec $P$i $BIN/dtrun --nnodes "$n" --node-rank $i --master 10.77.0.1:29500 \
            --token-file "$WORK/tok" -n 1 $BIN/dtrain train "${CFG[@]}" "$@" >"$WORK/n$i" 2>&1 &
        pids+=($!)
    done
    $(cpu 0) ip netns exec ${P}0 $BIN/dtrun --nnodes "$n" --node-rank 0 --master 10.77.0.1:29500 --token-file "$WORK/tok" \
        -n 1 $BIN/dtrain train "${CFG[@]}" --set metrics_file="$WORK/two.jsonl" "$@" >"$WORK/n0" 2>&1 ||
        { cat "$WORK/n0" >&2; exit 1; }
    wait "${pids[@]}"
    rate_of "$WORK/two.jsonl"
}
torch_n() { # n powersgd-rank (0: none)
    local n=$1 pids=() i
    for ((i = n - 1; i >= 1; i--)); do
        $(cpu $i) ip netns exec $P$i env RANK=$i WORLD_SIZE=$n MASTER_ADDR=10.77.0.1 MASTER_PORT=29600 \
            GLOO_SOCKET_IFNAME=eth0 TORCH_POWERSGD_RANK=$2 /usr/bin/python3 bench/ddp/torch_ddp.py "$STEPS" >"$WORK/t$i" 2>&1 &
        pids+=($!)
    done
    $(cpu 0) ip netns exec ${P}0 env RANK=0 WORLD_SIZE=$n MASTER_ADDR=10.77.0.1 MASTER_PORT=29600 GLOO_SOCKET_IFNAME=eth0 \
        TORCH_POWERSGD_RANK=$2 /usr/bin/python3 bench/ddp/torch_ddp.py "$STEPS" | awk '{print $2, "-", "-"}'
    wait "${pids[@]}"
}
SYSTEMS=("dtrain f32|d|dtrain_n N --set grad_compression=none"
         "dtrain f16|d|dtrain_n N --set grad_compression=f16"
         "dtrain powersgd r$PSGD_RANK|d|dtrain_n N --set grad_compression=powersgd --set powersgd_rank=$PSGD_RANK --set compress_start_step=0"
         "dtrain topk $TOPK|d|dtrain_n N --set grad_compression=topk --set topk_fraction=$TOPK --set compress_start_step=0"
         "PyTorch DDP f32|t|torch_n N 0"
         "PyTorch powerSGD_hook r$PSGD_RANK|t|torch_n N $PSGD_RANK")
[ "${TORCH:-1}" = 0 ] && SYSTEMS=("${SYSTEMS[@]:0:4}")

[ -n "${FROM:-}" ] || : >"$WORK/singles"
single_round() {
    echo "d $(dtrain_one | awk '{print $1}')" >>"$WORK/singles"
    [ "${TORCH:-1}" = 0 ] || echo "t $(torch_one)" >>"$WORK/singles"
}
[ -z "${FROM:-}" ] && single_round
[ -n "${FROM:-}" ] || : >"$WORK/rows" # link hosts system-index rep tokens comm exposed
[ -n "${FROM:-}" ] || : >"$WORK/ceil"
[ -n "${FROM:-}" ] && HOSTS="" # measured already
for n in $HOSTS; do
    for ((r = 0; r < REPS; r++)); do echo "$n $(side_by_side "$n")" >>"$WORK/ceil"; done
    for rate in $RATES; do
        scripts/netns-cluster.sh up "$n" --rate "$rate" >/dev/null
        for ((r = 0; r < REPS; r++)); do
            for i in "${!SYSTEMS[@]}"; do
                IFS='|' read -r _ _ cmd <<<"${SYSTEMS[$i]}"
                echo "  $n hosts, $rate, round $((r + 1)): ${SYSTEMS[$i]%%|*}" >&2
                echo "$rate $n $i $r $(${cmd/N/$n} || echo failed)" >>"$WORK/rows"
            done
        done
        scripts/netns-cluster.sh down >/dev/null
    done
done
[ -z "${FROM:-}" ] && single_round
if [ -n "${KEEP:-}" ] && [ -z "${FROM:-}" ]; then
    mkdir -p "$KEEP"
    for f in rows singles ceil; do cat "$WORK/$f" >>"$KEEP/$f"; done
fi
section="## Gradient compressors (PowerSGD, top-k): scaling on 2 and 4 hosts"
{
    echo "$section"
    echo
    echo "Measured $(date -u +%Y-%m-%d) on this 2-core VM: network namespace hosts, one rank each, 1 compute thread"
    echo "per rank, host i on CPU i mod 2, TCP reno; gpt-mini, batch 16 x 128 per rank, $STEPS timed steps after 5"
    echo "warm-up; powersgd_rank $PSGD_RANK (PyTorch's hook the same rank), topk_fraction $TOPK, compression from"
    echo "the first step. Medians of $REPS rounds, the systems alternating within each round. Efficiency ="
    echo "aggregate / (hosts x own single-process rate on one CPU); of ceiling = aggregate / the same number of"
    echo "dtrain processes side by side on the same CPUs with no communication. Command:"
    echo "\`bench/ddp/netns_compression.sh $STEPS \"$RATES\" \"${3:-2 4}\" $REPS\`"
    echo
    python3 - "$WORK" "${SYSTEMS[@]}" <<'PY'
import statistics as st, sys
work, systems = sys.argv[1], [s.split("|") for s in sys.argv[2:]]
med = st.median
singles = {}
for line in open(f"{work}/singles"):
    k, v = line.split()
    singles.setdefault(k, []).append(float(v))
one = {k: max(v) for k, v in singles.items()}
ceil = {}
for line in open(f"{work}/ceil"):
    n, v = line.split()
    ceil.setdefault(int(n), []).append(float(v))
rows, failed = {}, {}
for line in open(f"{work}/rows"):
    w = line.split()
    if len(w) != 7 or w[4] == "failed":  # the run failed (PyTorch's hook under gloo, here)
        failed.setdefault((w[0], int(w[1]), int(w[2])), 0)
        failed[(w[0], int(w[1]), int(w[2]))] += 1
        continue
    rate, n, i, r, tok, comm, exp = w
    rows.setdefault((rate, int(n), int(i)), []).append((float(tok), comm, exp))
print(f"Single process: dtrain {', '.join(f'{v:.0f}' for v in singles['d'])}, PyTorch "
      f"{', '.join(f'{v:.0f}' for v in singles.get('t', []))} tokens/s (before, after; the faster is the base); side by side, "
      "no communication: " + ", ".join(f"{n} processes {med(v):.0f}" for n, v in sorted(ceil.items())) + " tokens/s.")
print()
print("| link | hosts | system | tokens/s | comm / exposed ms per step | efficiency | of ceiling |")
print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
for (rate, n, i), v in sorted(rows.items(), key=lambda kv: (kv[0][1], -int(kv[0][0].rstrip("mbit")), kv[0][2])):
    tok = med(x[0] for x in v)
    mine = sorted(v, key=lambda x: x[0])[len(v) // 2]
    name, kind = systems[i][0], systems[i][1]
    ms = f"{mine[1]} / {mine[2]}" if mine[1] != "-" else "-"
    of_ceiling = f"{tok / med(ceil[n]):.2f}" if kind == "d" and n in ceil else "-"
    print(f"| {rate} | {n} | {name} | {tok:.0f} ({len(v)} runs) | {ms} | {tok / (n * one[kind]):.2f} | {of_ceiling} |")
for (rate, n, i), k in sorted(failed.items()):
    if (rate, n, i) not in rows:
        print(f"| {rate} | {n} | {systems[i][0]} | failed ({k} runs) | - | - | - |")
PY
} >"$WORK/section.md"
cat "$WORK/section.md"
python3 bench/update_results.py bench/RESULTS.md "$WORK/section.md" "$section"
