#!/usr/bin/env bash
# Bad command lines are refused with exit 2 and a message naming the problem.
. "$(dirname "$0")/lib.sh"
check() { # expected-pattern args...
    local want=$1; shift
    "$BIN/dtrun" "$@" >"$WORK/out" 2>"$WORK/err" && fail "dtrun $* succeeded"
    [ $? = 2 ] || fail "dtrun $* did not exit 2"
    expect_grep "$WORK/err" "$want"
}
check "-n N is required" true
check "-n: 'zero' is not an integer" -n zero true
check "-n: '0' is not an integer in 1..1024" -n 0 true
check "no PROGRAM given" -n 2
check "--master ADDR:PORT is required" --nnodes 2 -n 1 true
check "--master 'nohost' is not ADDR:PORT" --master nohost -n 1 true
check "--node-rank must be below --nnodes" --nnodes 2 --node-rank 2 --master 127.0.0.1:1 -n 1 true
check "--servers 2 leaves no worker among the job's 2 ranks" --servers 2 -n 2 true
check "--master '\[::1\]:29500': IPv6 addresses are not supported" --master '[::1]:29500' -n 1 true
check "cannot read the job token file /nonexistent \(--token-file\): No such file" --token-file /nonexistent -n 1 true
mkfifo "$WORK/tok.fifo"
check "$WORK/tok.fifo is a FIFO, not a regular file" --token-file "$WORK/tok.fifo" -n 1 true
check "--timeline /nonexistent/dir/t.json: its directory /nonexistent/dir does not exist" \
    --timeline /nonexistent/dir/t.json -n 1 true
# --token-file goes through the library's reader (dt_read_token_file, as
# DT_TOKEN_FILE does): an empty first line, a token longer than 255 bytes
# (it was cut short in silence) are refused naming the file; 255 bytes and a
# CRLF line end are accepted; a file others can read is used with a warning.
: >"$WORK/tok.empty"
printf '\nsecond line\n' >"$WORK/tok.blank"
head -c 256 /dev/zero | tr '\0' k >"$WORK/tok.long"; echo >>"$WORK/tok.long"
head -c 255 /dev/zero | tr '\0' k >"$WORK/tok.255"; printf '\r\n' >>"$WORK/tok.255"
chmod 600 "$WORK"/tok.*
check "job token file $WORK/tok.empty \(--token-file\) is empty" --token-file "$WORK/tok.empty" -n 1 true
check "job token file $WORK/tok.blank \(--token-file\) is empty" --token-file "$WORK/tok.blank" -n 1 true
check "job token file $WORK/tok.long \(--token-file\): the token is longer than 255 bytes" --token-file "$WORK/tok.long" -n 1 true
"$BIN/dtrun" --token-file "$WORK/tok.255" -n 1 sh -c '[ ${#DT_JOB_TOKEN} = 255 ]' 2>"$WORK/err" ||
    { cat "$WORK/err"; fail "a 255-byte token (CRLF) was not passed on whole"; }
expect_no_grep "$WORK/err" "WARN"
echo "readable-token" >"$WORK/tok.open"; chmod 644 "$WORK/tok.open"
"$BIN/dtrun" --token-file "$WORK/tok.open" -n 1 sh -c '[ "$DT_JOB_TOKEN" = readable-token ]' 2>"$WORK/err" ||
    { cat "$WORK/err"; fail "a token file others can read was refused"; }
expect_grep "$WORK/err" "WARN job token file $WORK/tok.open \(--token-file\) can be read by other users \(mode 644\): chmod 600 it"
env -u DT_JOB_TOKEN "$BIN/dtrun" --nnodes 2 --master 127.0.0.1:1 -n 1 true 2>"$WORK/err"
expect_grep "$WORK/err" "needs the same token on every node"
"$BIN/dtrun" --help >"$WORK/out" || fail "--help failed"
expect_grep "$WORK/out" "--join-timeout"
"$BIN/dtbench" --help >"$WORK/out" || fail "dtbench --help failed"
expect_grep "$WORK/out" "busbw"
"$BIN/dtbench" nosuchop >"$WORK/out" 2>"$WORK/err"; [ $? = 2 ] || fail "dtbench accepted a bad op"
expect_grep "$WORK/err" "unknown OP 'nosuchop'"
"$BIN/dtbench" allreduce -t -1 >"$WORK/out" 2>"$WORK/err"; [ $? = 2 ] || fail "dtbench accepted -t -1"
expect_grep "$WORK/err" "minimum time must be 0 to 3600 seconds, got '-1'"
# -t: a short size gets more calls than -n, every rank the same (else the job would hang or fail)
"$BIN/dtrun" -n 2 "$BIN/dtbench" allreduce -b 8 -e 8 -n 3 -w 0 -t 0.05 >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "dtbench -t failed"; }
calls=$(awk '$1 == "[0]" && $2 == 8 { print $15 }' "$WORK/out")
[ -n "$calls" ] && [ "$calls" -gt 3 ] || { cat "$WORK/out"; fail "dtbench -t 0.05 timed $calls calls of an 8-byte allreduce, expected more than -n 3"; }
us=$(awk '$1 == "[0]" && $2 == 8 { print $7 }' "$WORK/out")
less_than 0.045 "$(python3 -c "print($calls * $us / 1e6)")" || { cat "$WORK/out"; fail "dtbench -t 0.05: $calls calls of $us us do not fill 0.05 s"; }

# a bad DT_DEBUG or DT_THREADS is refused by dtrun and by any program joining a job (dt_comm_init_env)
DT_DEBUG=bogus "$BIN/dtrun" -n 1 true >"$WORK/out" 2>"$WORK/err"
[ $? = 2 ] || fail "dtrun accepted DT_DEBUG=bogus"
expect_grep "$WORK/err" "DT_DEBUG.*bogus"
DT_THREADS=abc "$BIN/dtbench" allreduce -b 8 -e 8 >"$WORK/out" 2>"$WORK/err"
[ $? != 0 ] || fail "dtbench accepted DT_THREADS=abc"
expect_grep "$WORK/err" "DT_THREADS.*abc"
echo ok
