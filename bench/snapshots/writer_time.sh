#!/usr/bin/env bash
# One process, gpt-mini, a memory snapshot every step into a fresh /dev/shm
# directory: the trainer's end line gives each snapshot's time on the
# training thread (the copy) and in the background (the write).  For a
# before/after comparison of the writer, run it with each build's programs.
#
#   bench/snapshots/writer_time.sh [BIN=build/bin] [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build/bin}
RUNS=${2:-3}
[ -x "$BIN/dtrain" ] || { echo "writer_time: no $BIN/dtrain (build first)" >&2; exit 2; }
text=$(mktemp /tmp/dtrain-writer-time.XXXXXX)
dir=$(mktemp -d /dev/shm/dtrain-writer-time.XXXXXX)
trap 'rm -rf "$text" "$dir"' EXIT
cat README.md docs/*.md >"$text"
for ((i = 1; i <= RUNS; i++)); do
    rm -rf "${dir:?}"/* "$dir"/.spare
    DT_SNAPSHOT_DIR=$dir "$BIN/dtrain" train --config configs/gpt-mini.json --set model=gpt --set data=text \
        --set data_path="$text" --set steps=40 --set log_interval=40 --set eval_interval=0 --set threads=1 \
        --set memory_checkpoint_interval=1 2>&1 | grep 'memory snapshots:' | sed 's/^[^ ]* //'
done
