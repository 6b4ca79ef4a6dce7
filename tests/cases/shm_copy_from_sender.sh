#!/usr/bin/env bash
# The single copy over shared memory (DATA_REF): every collective and
# point-to-point check of coll_check still gives the right bits when every
# payload is read straight out of its sender's memory, payloads that arrive
# before their receive wait in the sender's memory and are copied when it is
# posted, and the cycle of blocking sends completes through the buffering
# after DT__REF_WAIT_NS.  Unset, DT_SHM_COPY_MIN follows the host: on when
# the host's ranks outnumber its cores.  Needs process_vm_readv on the peers
# (root, or ptrace_scope 0: run_tests.sh checks).
. "$(dirname "$0")/lib.sh"
# The collectives of one host go through the arena unless it is off: this is
# about the messages.
export DT_SHM_COLL=off

DT_DEBUG=info DT_SHM_COPY_MIN=1 DT_SHM_RING=8192 "$BIN/dtrun" -n 3 "$BIN/coll_check" --quick --big 65536 >"$WORK/ref" 2>&1 \
    || { cat "$WORK/ref"; fail "coll_check with every payload copied from its sender failed"; }
[ "$(grep -c 'a single copy from 1 bytes with 2 of them' "$WORK/ref")" = 3 ] \
    || { cat "$WORK/ref"; fail "not every rank can read both peers' memory"; }
# Per rank: copied, of them deferred until the receive, buffered after the wait.
grep -oE 'shared memory: [0-9]+ payloads copied from their senders. memory, [0-9]+ of them after waiting for their receive, [0-9]+ buffered' "$WORK/ref" \
    | awk '{print $3, $10, $18}' >"$WORK/counts"
[ "$(wc -l <"$WORK/counts")" = 3 ] || { cat "$WORK/ref"; fail "not every rank reported its single copies"; }
awk '{c += $1; d += $2; b += $3} END {exit !(c > 1000 && d > 0 && b > 0)}' "$WORK/counts" \
    || { cat "$WORK/counts"; fail "expected >1000 single copies in all, some deferred until their receive and some buffered after the wait (copied, deferred, buffered per rank above)"; }

# The default follows the host: with more ranks than cores on, else off.
cpus=$(nproc)
for n in 2 4; do
    DT_DEBUG=info "$BIN/dtrun" -n $n "$BIN/coll_check" --quick --big 4096 >"$WORK/auto$n" 2>&1 \
        || { cat "$WORK/auto$n"; fail "coll_check on $n ranks with the default single-copy threshold failed"; }
    if [ $n -gt "$cpus" ]; then
        expect_grep "$WORK/auto$n" "a single copy from 262144 bytes with $((n - 1)) of them"
    else
        expect_grep "$WORK/auto$n" "every payload through the rings"
    fi
done

# Bad settings are named.
DT_SHM_COPY_MIN=lots "$BIN/dtrun" -n 2 "$BIN/coll_check" --quick --big 4096 >"$WORK/bad" 2>&1 \
    && fail "DT_SHM_COPY_MIN=lots was accepted"
expect_grep "$WORK/bad" "DT_SHM_COPY_MIN"
echo "ok"
