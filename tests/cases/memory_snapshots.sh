#!/usr/bin/env bash
# Memory snapshots (memory_checkpoint_interval=1) under dtrun --max-restarts on
# one host, 4 ranks: a kill -9 mid-run resumes from the snapshot in dtrun's
# /dev/shm directory (no disk checkpoint after step 0) for DDP, ZeRO-1, tp=2,
# pp=2 and a parameter server (the server killed); a snapshot damaged before
# the restart is refused by its CRC and the other one resumed; with every
# snapshot gone the disk checkpoint is resumed and the log says so.  Two
# dtrun nodes on localhost with a snapshot root each (two hosts' memories):
# node 1 killed whole (dtrun and ranks), its memory wiped and a new node 1
# started: its ranks get the snapshot copied from rank 0; with node 0's
# snapshots wiped too, the disk checkpoint is resumed; one rank of node 1
# killed: node 1 kept the data-parallel snapshots in its own memory too.  Every
# run's final weights equal an uninterrupted run's to the bit, and dtrun
# removes its snapshot directory at the end.  DT_TEST_QUICK: DDP, ZeRO, a host
# replaced.
. "$(dirname "$0")/lib.sh"
# the snapshots of this test alone (in memory, as dtrun's default), so that their removal is checked
export DT_SNAPSHOT_ROOT=$(mktemp -d /dev/shm/dtrain-test.XXXXXX)
trap 'rm -rf "$WORK" "$DT_SNAPSHOT_ROOT"' EXIT
cases="ddp:kill ddpbg:kill ddp:crc ddp:lost zero:kill tp:kill pp:kill ps:kill nodes:kill nodes:host nodes:both nodeszero:host nodeszero:both"
[ "${QUICK:-${DT_TEST_QUICK:-0}}" = 1 ] && cases="ddp:kill ddpbg:kill ddp:crc ddp:lost zero:kill nodes:kill nodes:host nodeszero:host"
python3 "$(dirname "$0")/memory_snapshots.py" "$BIN" "$WORK" $cases || exit 1
# where the copy runs: another word is refused, naming the variable
mkdir -p "$WORK/badcopy"
if DT_SNAPSHOT_DIR="$WORK/badcopy" DT_SNAPSHOT_COPY=fast "$BIN/dtrain" train --config configs/gpt-mini.json \
    --set steps=1 --set eval_interval=0 --set memory_checkpoint_interval=1 >"$WORK/badcopy.log" 2>&1; then
    fail "DT_SNAPSHOT_COPY=fast was accepted"
fi
expect_grep "$WORK/badcopy.log" "DT_SNAPSHOT_COPY='fast': expected auto, update or background"
left=$(ls -A "$DT_SNAPSHOT_ROOT")
[ -z "$left" ] || fail "dtrun left its snapshot directory behind: $left"
# A dtrun killed with -9 leaves its snapshot directory: the next dtrun under the same parent removes it once
# every dtrun that marked it is gone (its pid dead on this host and pid namespace), and leaves a live one's.
me="$(cat /proc/sys/kernel/random/boot_id) $(stat -Lc %i /proc/self/ns/pid)"
dead=$(sh -c 'echo $$')
mkdir -p "$DT_SNAPSHOT_ROOT/dtrain-00000000000dead0/step-00000001" "$DT_SNAPSHOT_ROOT/dtrain-000000000000a11e"
echo "$me" >"$DT_SNAPSHOT_ROOT/dtrain-00000000000dead0/.dtrun-$dead"
echo "$me" >"$DT_SNAPSHOT_ROOT/dtrain-000000000000a11e/.dtrun-$$"
"$BIN/dtrun" --max-restarts 1 -n 1 true >"$WORK/abandoned.log" 2>&1 || fail "dtrun -n 1 true failed: $(cat "$WORK/abandoned.log")"
[ ! -e "$DT_SNAPSHOT_ROOT/dtrain-00000000000dead0" ] || fail "the directory of a dead dtrun ($dead) was not removed"
expect_grep "$WORK/abandoned.log" "removed $DT_SNAPSHOT_ROOT/dtrain-00000000000dead0, the memory snapshots of a job whose dtrun was killed"
[ -e "$DT_SNAPSHOT_ROOT/dtrain-000000000000a11e" ] || fail "the directory of a live dtrun ($$) was removed"
rm -rf "$DT_SNAPSHOT_ROOT/dtrain-000000000000a11e"
echo "a dead dtrun's snapshot directory removed by the next dtrun, a live one's kept"
