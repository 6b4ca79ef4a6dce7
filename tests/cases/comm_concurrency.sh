#!/usr/bin/env bash
# Communicators progress side by side from several threads (issue 30's
# runtime test): on a dp x tp split of 4 ranks, small allreduces on each tp
# pair and ping-pongs on a third communicator finish while a large
# nonblocking allreduce on the dp groups is in flight; every result exact.
# Over TCP and over shared memory.  The per-rank timings are in the log.
. "$(dirname "$0")/lib.sh"
# The large allreduce must outlast a few small ones: through shared memory
# on 2 cores 64 MiB takes about 25 ms, so it moves 256 MiB there.
quick=${DT_TEST_QUICK:-0}
for tr in tcp shm; do
    mib=64
    [ $tr = shm ] && mib=256
    [ "$quick" = 1 ] && mib=$((mib / 2))
    DT_TRANSPORT=$tr timeout 120 "$BIN/dtrun" -n 4 "$BIN/comm_concurrency" --mib $mib >"$WORK/out.$tr" 2>&1 ||
        { cat "$WORK/out.$tr"; fail "DT_TRANSPORT=$tr: comm_concurrency failed"; }
    echo "--- DT_TRANSPORT=$tr"
    cat "$WORK/out.$tr"
    expect_grep "$WORK/out.$tr" "comm_concurrency: 4 ranks: ok"
done
echo ok
