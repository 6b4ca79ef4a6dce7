#!/usr/bin/env bash
# dtrun --monitor on a non-loopback address (docs/observability.md): refused
# without --monitor-allow-remote, and without a token the user knows; with
# both, every request without the job token (or with a wrong one) gets 401,
# and one with it (Authorization: Bearer, or ?token= for a browser) gets the
# page and valid metrics.  Loopback needs no token.
. "$(dirname "$0")/lib.sh"
"$BIN/dtrun" -n 1 --monitor 0.0.0.0:0 true >"$WORK/out" 2>&1 && fail "--monitor 0.0.0.0 was accepted"
expect_grep "$WORK/out" "--monitor '0.0.0.0:0' is not a loopback address: anyone who reaches it would see the job.*--monitor-allow-remote"
"$BIN/dtrun" -n 1 --monitor 192.0.2.1:9 true >"$WORK/out" 2>&1 && fail "--monitor 192.0.2.1 was accepted"
expect_grep "$WORK/out" "is not a loopback address"
env -u DT_JOB_TOKEN "$BIN/dtrun" -n 1 --monitor 0.0.0.0:0 --monitor-allow-remote true >"$WORK/out" 2>&1 &&
    fail "--monitor-allow-remote without a token was accepted"
expect_grep "$WORK/out" "needs a job token you know: --token-file FILE or DT_JOB_TOKEN"
"$BIN/dtrun" -n 1 --monitor nonsense true >"$WORK/out" 2>&1 && fail "--monitor nonsense was accepted"
expect_grep "$WORK/out" "is not ADDR:PORT"
"$BIN/dtrun" -n 1 --monitor-linger 5 true >"$WORK/out" 2>&1 && fail "--monitor-linger alone was accepted"
expect_grep "$WORK/out" "go with --monitor ADDR:PORT"

echo "s3cret-token-$$" >"$WORK/tok"
"$BIN/dtrun" -n 1 --monitor 0.0.0.0:0 --monitor-allow-remote --monitor-linger 60 --token-file "$WORK/tok" true \
    >"$WORK/out" 2>"$WORK/err" &
job=$!
for _ in $(seq 300); do grep -q "serving the final state" "$WORK/err" && break; sleep 0.1; done
expect_grep "$WORK/err" "requests need the job token"
port=$(grep -o 'http://0.0.0.0:[0-9]*/' "$WORK/err" | head -1 | grep -o '[0-9]*/$' | tr -d /)
[ -n "$port" ] || { kill $job; cat "$WORK/err"; fail "no port"; }
python3 - "$port" "$(cat "$WORK/tok")" <<'PY' || { kill $job; fail "the token checks"; }
import subprocess, sys, urllib.error, urllib.request
port, token = sys.argv[1:]
base = f"http://127.0.0.1:{port}"
def get(path, auth=None):
    req = urllib.request.Request(base + path)
    if auth:
        req.add_header("Authorization", auth)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
for path in ("/", "/metrics", "/api/state", "/timeline", "/nope"):
    for auth in (None, "Bearer wrong", "Bearer " + token[:-1], "Bearer " + token + "x", "Basic " + token):
        code, body = get(path, auth)
        if code != 401 or "job token" not in body:
            sys.exit(f"{path} with {auth!r}: {code} {body[:60]!r}, expected 401")
    code, _ = get(path + "?token=wrong")
    if code != 401:
        sys.exit(f"{path}?token=wrong: {code}")
code, body = get("/", "Bearer " + token)
if code != 200 or "<svg" not in body:
    sys.exit(f"/ with the token: {code}")
code, body = get("/api/state?token=" + token)
if code != 200 or '"state":"finished"' not in body:
    sys.exit(f"/api/state?token=: {code} {body[:80]}")
out = subprocess.run([sys.executable, "tests/cases/obs_prom.py", "parse", base + "/metrics", token],
                     capture_output=True, text=True)
if out.returncode:
    sys.exit("metrics with the token: " + out.stderr)
print("401 without the token, 200 with it")
PY
kill -INT $job
wait $job || fail "dtrun exited $? after the linger"
echo ok
