#!/usr/bin/env bash
# dtrun --rank-table (docs/dtrun.md): two dtrun nodes on localhost, each
# given the same table and its --node-rank, run every collective as one
# 4-rank job (world size, ranks and master from the file); bad tables are
# refused naming the entry.
. "$(dirname "$0")/lib.sh"
port=$(free_port)
echo "rank-table-token-$$" >"$WORK/tok"
cat >"$WORK/good.json" <<JSON
{"version": "1.0", "server_count": "2", "master_port": $port,
 "server_list": [
  {"server_id": "127.0.0.1", "device": [{"device_id": "0", "rank_id": "0"}, {"device_id": "1", "rank_id": "1"}]},
  {"server_id": "127.0.0.1", "host_ip": "127.0.0.1", "device": [{"rank_id": 2}, {"rank_id": 3}]}]}
JSON
big=8192
"$BIN/dtrun" --rank-table "$WORK/good.json" --node-rank 1 --token-file "$WORK/tok" "$BIN/coll_check" --quick --big $big >"$WORK/n1" 2>&1 &
p1=$!
"$BIN/dtrun" --rank-table "$WORK/good.json" --node-rank 0 --token-file "$WORK/tok" "$BIN/coll_check" --quick --big $big >"$WORK/n0" 2>&1 ||
    { cat "$WORK/n0"; fail "node 0 failed"; }
wait $p1 || { cat "$WORK/n1"; fail "node 1 failed"; }
expect_grep "$WORK/n0" "^\[0\] coll_check: world 4: [0-9]+ checks, 0 mismatches"
echo "two nodes from the rank table: ok"

# bad NAME WORDS JSON [dtrun options]: refused (exit 2) with WORDS in the message.
bad() {
    local name=$1 words=$2 json=$3; shift 3
    printf '%s\n' "$json" >"$WORK/$name.json"
    "$BIN/dtrun" --rank-table "$WORK/$name.json" "$@" --token-file "$WORK/tok" true >"$WORK/$name.out" 2>&1
    local rc=$?
    [ $rc = 2 ] || { cat "$WORK/$name.out"; fail "$name: exit $rc, expected 2"; }
    expect_grep "$WORK/$name.out" "$words"
    echo "$name: $(cat "$WORK/$name.out")"
}
A='{"server_id": "127.0.0.1", "device": [{"rank_id": "0"}, {"rank_id": "1"}]}'
bad duplicate 'server_list\[1\] \(server_id "127.0.0.2"\) device\[0\]: duplicate rank_id 1' \
    "{\"server_list\": [$A, {\"server_id\": \"127.0.0.2\", \"device\": [{\"rank_id\": \"1\"}]}]}" --node-rank 0
bad gap 'server_list\[1\] \(server_id "127.0.0.2"\) device\[0\]: rank_id 3 leaves a gap: rank 2' \
    "{\"server_list\": [$A, {\"server_id\": \"127.0.0.2\", \"device\": [{\"rank_id\": \"3\"}]}]}" --node-rank 0
bad missing-rank 'server_list\[1\] \(server_id "127.0.0.2"\) device\[0\]: missing field "rank_id"' \
    "{\"server_list\": [$A, {\"server_id\": \"127.0.0.2\", \"device\": [{\"device_id\": \"0\"}]}]}" --node-rank 0
bad missing-server-id 'server_list\[1\]: missing field "server_id"' \
    "{\"server_list\": [$A, {\"device\": [{\"rank_id\": \"2\"}]}]}" --node-rank 0
bad missing-list 'missing field "server_list"' '{"version": "1.0"}'
bad no-ranks 'server_list\[1\] \(server_id "127.0.0.2"\): a host with no ranks' \
    "{\"server_list\": [$A, {\"server_id\": \"127.0.0.2\", \"device\": []}]}" --node-rank 0
bad unknown-host 'unknown host: no server_id or host_ip is this host' \
    '{"server_list": [{"server_id": "203.0.113.1", "device": [{"rank_id": "0"}]}, {"server_id": "203.0.113.2", "device": [{"rank_id": "1"}]}]}'
bad count '"server_count" is 3 but "server_list" has 1 servers' "{\"server_count\": 3, \"server_list\": [$A]}"
bad node-rank '--node-rank 5: the table has 1 servers' "{\"server_list\": [$A]}" --node-rank 5
bad nproc '-n 3, but the rank table gives node 0 2 ranks' "{\"server_list\": [$A]}" -n 3
echo ok
