#!/usr/bin/env bash
# ZeRO with the optimizer state offloaded to disk (offload=disk):
#   1. the cost: gpt-small, zero_stage 1 on 2 ranks of this host, with and
#      without offload, alternated ROUNDS times: tokens/s (the median of the
#      logged windows after the first) and the bytes offload moves per step;
#   2. a model that does not fit: a GPT of 57 M parameters (gpt-small with
#      dim 768, 12 heads, 8 layers) on 2 ranks in a cgroup (v1 memory
#      controller) capped at CAP MiB for both: data parallelism, ZeRO-3, and
#      ZeRO-3 with offload; which finish, their tokens/s and rank 0's peak RSS.
# Needs root for the cgroup (part 2 is skipped otherwise).  Markdown on stdout.
#
#   bench/zero/offload.sh [ROUNDS=2] [CAP=1800] [BUILD_DIR=build]
set -uo pipefail
case ${1:-} in -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/../.."
ROUNDS=${1:-2}
CAP=${2:-1800}
BUILD=${3:-build}
[ -x "$BUILD/bin/dtrain" ] || { echo "build first: make build" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
CG=""
cleanup() {
    [ -n "$CG" ] && [ -d "$CG" ] && rmdir "$CG" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
rate() { # metrics file: the median tokens/s of the windows after the first
    python3 -c 'import json, statistics, sys
r = [json.loads(l)["tokens_per_s"] for l in open(sys.argv[1]) if "tokens_per_s" in l][1:]
print(f"{statistics.median(r):.0f}" if r else "-")' "$1"
}
echo "## 1. The cost of offload: gpt-small, zero_stage 1, 2 ranks, 1 thread each"
echo
echo "| round | offload | tokens/s | read per step (MiB) | written per step (MiB) |"
echo "| ---: | --- | ---: | ---: | ---: |"
B=(--config configs/gpt-small.json --set steps=10 --set threads=1 --set batch_size=8 --set eval_batches=1
   --set log_interval=2 --set zero_stage=1)
for ((r = 1; r <= ROUNDS; r++)); do
    for off in none disk; do
        "$BUILD/bin/dtrun" -n 2 "$BUILD/bin/dtrain" train "${B[@]}" --set offload=$off --set offload_dir=/var/tmp \
            --set metrics_file="$WORK/m.jsonl" >"$WORK/o" 2>&1 || { cat "$WORK/o"; exit 1; }
        io=$(grep -oE "[0-9.]+ MiB read and [0-9.]+ MiB written" "$WORK/o" | awk '{print $1 " | " $5}')
        echo "| $r | $off | $(rate "$WORK/m.jsonl") | ${io:-0 | 0} |"
    done
done
echo
mem=$(grep ':memory:' /proc/self/cgroup | cut -d: -f3)
if [ "$(id -u)" != 0 ] || [ ! -d "/sys/fs/cgroup/memory$mem" ]; then
    echo "(part 2 skipped: needs root and the cgroup v1 memory controller)"
    exit 0
fi
CG=/sys/fs/cgroup/memory$mem/dtrain-bench-$$
mkdir "$CG" && echo $((CAP * 1024 * 1024)) >"$CG/memory.limit_in_bytes" || exit 1
echo "## 2. 57 M parameters on 2 ranks capped at $CAP MiB together (a cgroup)"
echo
echo "| run | finished | tokens/s | rank 0 peak RSS (MiB) | model states on rank 0 |"
echo "| --- | --- | ---: | ---: | --- |"
G=(--config configs/gpt-small.json --set dim=768 --set heads=12 --set layers=8 --set steps=6 --set threads=1
   --set batch_size=2 --set eval_batches=1 --set log_interval=2)
for args in "zero_stage=0" "zero_stage=3" "zero_stage=3 offload=disk"; do
    sets=()
    for kv in $args; do sets+=(--set "$kv"); done
    (echo $BASHPID >"$CG/cgroup.procs" && exec "$BUILD/bin/dtrun" -n 2 "$BUILD/bin/dtrain" train "${G[@]}" "${sets[@]}" \
        --set offload_dir=/var/tmp --set metrics_file="$WORK/g.jsonl") >"$WORK/o" 2>&1
    rc=$?
    states=$(grep -oE "model states allocated [0-9.]+ MiB" "$WORK/o" | head -1)
    rss=$(grep -oE "peak RSS [0-9.]+" "$WORK/o" | awk '{print $3}')
    killed=$(grep -oE "rank [0-9]+ \(pid [0-9]+\) was killed by signal 9" "$WORK/o" | head -1)
    if [ $rc = 0 ]; then fin=yes; else fin="no: ${killed:-exit $rc}"; fi
    echo "| $args | $fin | $([ $rc = 0 ] && rate "$WORK/g.jsonl" || echo -) | ${rss:--} | ${states:--} |"
    rm -f "$WORK/g.jsonl"
done
