#!/usr/bin/env bash
# While a job is starting, strangers hit its rendezvous port with garbage, a
# truncated handshake and a wrong token: each is refused and logged, and the
# job completes.
. "$(dirname "$0")/lib.sh"
trap '' PIPE # the store hangs up on the garbage while we are still writing it: that is the point
port=$(free_port)
echo "rdv-token-$$" >"$WORK/tok"
echo "not-the-token" >"$WORK/wrong"
"$BIN/dtrun" --master 127.0.0.1:$port --token-file "$WORK/tok" -n 4 sh -c "sleep 2; exec $BIN/coll_check --quick --big 4096" \
    >"$WORK/out" 2>"$WORK/err" &
job=$!
sleep 0.3
# garbage
exec 3<>/dev/tcp/127.0.0.1/$port && { printf 'GET / HTTP/1.0\r\n\r\n%.0s' $(seq 10) >&3 2>/dev/null; exec 3>&-; } || true
# truncated header (a few bytes of a response, then hang up)
exec 3<>/dev/tcp/127.0.0.1/$port && { head -c 37 <&3 >/dev/null; printf 'DTAU' >&3 2>/dev/null; exec 3>&-; } || true
# a client with the wrong token (a would-be second node)
"$BIN/dtrun" --nnodes 2 --node-rank 1 --master 127.0.0.1:$port --token-file "$WORK/wrong" --join-timeout 5 -n 1 true \
    >"$WORK/intruder.out" 2>"$WORK/intruder.err" && fail "the wrong-token client was accepted"
expect_grep "$WORK/intruder.err" "refused this process's job token"
wait $job || { cat "$WORK/out" "$WORK/err"; fail "the job failed"; }
expect_grep "$WORK/out" "coll_check: world 4: [0-9]+ checks, 0 mismatches"
n=$(grep -c "rendezvous store: refused a connection" "$WORK/err")
[ "$n" -ge 3 ] || { cat "$WORK/err"; fail "expected 3 refusals logged, saw $n"; }
echo ok
