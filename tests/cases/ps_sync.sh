#!/usr/bin/env bash
# The parameter server (tests/ps_check.c), the last ranks serving:
#   - BSP, 2 workers and 2 servers, against allreduce data parallelism over
#     the 2 workers from the same weights (GPT with dropout and a tied
#     embedding, then an MLP; AdamW with decay groups, 2 micro-batches,
#     clipping): 30 steps of losses and norms within 1e-5;
#   - ASP with one worker against single-process training: bitwise;
#   - SSP with staleness 1 and 2, 3 workers (the last slowed) and one
#     server: the servers' clock log never shows a pull answered more than
#     s steps ahead of the slowest worker, and the fast workers reach it;
#   - a worker with a different model is refused, naming it and the
#     tensor, and the other worker trains on as if alone; after joining, a
#     worker pushing a row outside the table and one pushing gradients
#     outside the server's range (raw protocol messages) are refused naming
#     the worker, the tensor and the fault, and the third trains on;
#   - the text classifier's row-sparse table served by rows: BSP with 2
#     workers and 2 servers against allreduce, ASP with one worker against
#     one process (bitwise), only the touched rows on the wire.
. "$(dirname "$0")/lib.sh"
par "$WORK/bsp" "$BIN/dtrun" -n 4 "$BIN/ps_check" bsp
par "$WORK/asp" "$BIN/dtrun" -n 2 "$BIN/ps_check" asp
par_wait
par "$WORK/sparse4" "$BIN/dtrun" -n 4 "$BIN/ps_check" sparse
par "$WORK/sparse2" "$BIN/dtrun" -n 2 "$BIN/ps_check" sparse
par_wait
for m in sparse4 sparse2; do
    par_ok "$WORK/$m" || { cat "$WORK/$m"; fail "ps_check $m"; }
    expect_grep "$WORK/$m" "ps_check sparse: ok"
    grep "rank 0:" "$WORK/$m"
done
for m in bsp asp; do
    par_ok "$WORK/$m" || { cat "$WORK/$m"; fail "ps_check $m"; }
    expect_grep "$WORK/$m" "ps_check $m: ok"
    grep "rank 0:" "$WORK/$m"
done
for s in 1 2; do
    "$BIN/dtrun" -n 4 "$BIN/ps_check" ssp $s "$WORK/clock$s.log" >"$WORK/ssp$s" 2>&1 ||
        { cat "$WORK/ssp$s"; fail "ps_check ssp $s"; }
    expect_grep "$WORK/ssp$s" "ps_check ssp: ok"
    grep "staleness" "$WORK/ssp$s"
done
"$BIN/dtrun" -n 3 "$BIN/ps_check" refuse >"$WORK/refuse" 2>&1 || { cat "$WORK/refuse"; fail "ps_check refuse"; }
expect_grep "$WORK/refuse" "ps_check refuse: ok"
grep "refused" "$WORK/refuse" | head -2
"$BIN/dtrun" -n 4 "$BIN/ps_check" hostile >"$WORK/hostile" 2>&1 || { cat "$WORK/hostile"; fail "ps_check hostile"; }
expect_grep "$WORK/hostile" "ps_check hostile: ok"
expect_grep "$WORK/hostile" "refused worker 1: row 507 of embedding.weight: outside the table"
expect_grep "$WORK/hostile" "refused worker 2: a push of 16 gradients at element [0-9]+ \(tensor fc.bias\) outside this server's range"
echo ok
