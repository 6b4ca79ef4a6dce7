#!/usr/bin/env bash
# dtrun --monitor's metrics endpoint (docs/observability.md): a 2-rank
# training served on 127.0.0.1 (port 0: dtrun picks one and prints it).
# /metrics is scraped while it runs and again once it finished (dtrun keeps
# serving the final state with --monitor-linger); each scrape is parsed by a
# strict Prometheus text-format parser (tests/cases/obs_prom.py), and its
# step, loss, evaluation and checkpoint agree with the metrics file; both
# ranks report step times and bytes sent.  Then the server's strictness: 404,
# 405, 431, HEAD, no path outside the four; /timeline serves the --timeline
# file once dtrun merged it; and DT_MONITOR_DIR is removed.
. "$(dirname "$0")/lib.sh"
python3 tests/cases/obs_prom.py selftest || fail "the parser's self-test"
mkdir -p "$WORK/tmp"
steps=300 # 60 under the sanitizers (DT_TEST_QUICK), whose ranks take 10 times longer a step
[ "${DT_TEST_QUICK:-0}" = 1 ] && steps=60
TMPDIR=$WORK/tmp "$BIN/dtrun" -n 2 --monitor 127.0.0.1:0 --monitor-linger 60 --timeline "$WORK/tl.json" "$BIN/dtrain" train \
    --config configs/gpt-mini.json --set layers=2 --set dim=64 --set context=32 --set threads=1 --set steps=$steps \
    --set log_interval=5 --set eval_interval=$((steps / 3)) --set eval_batches=1 --set metrics_file="$WORK/m.jsonl" \
    --set checkpoint_dir="$WORK/ck" --set checkpoint_interval=$((steps / 3)) >"$WORK/out" 2>"$WORK/err" &
job=$!
for _ in $(seq 300); do grep -q "dashboard at" "$WORK/err" && break; sleep 0.1; done
url=$(grep -o 'http://127.0.0.1:[0-9]*/' "$WORK/err" | head -1)
[ -n "$url" ] || { kill $job; cat "$WORK/err"; fail "dtrun did not say where the monitor is"; }

check() { # WHEN: scrape, parse strictly, compare with the metrics file
    python3 - "$url" "$WORK/m.jsonl" "$1" "$steps" <<'PY' || return 1
import json, subprocess, sys
url, mfile, when, steps = sys.argv[1:]
steps = int(steps)
out = subprocess.run([sys.executable, "tests/cases/obs_prom.py", "parse", url + "metrics"], capture_output=True, text=True)
if out.returncode:
    sys.exit(out.stderr)
samples = json.loads(out.stdout)
def one(name, **labels):
    got = [v for n, l, v in samples if n == name and all(l.get(k) == w for k, w in labels.items())]
    return got[0] if got else None
recs = [json.loads(l) for l in open(mfile)]
train = {r["step"]: r for r in recs if "loss" in r}
evals = [r for r in recs if "eval_loss" in r]
state = [l["state"] for n, l, v in samples if n == "dtrun_job_state" and v == 1]
step = one("dtrain_step", rank="0")
if step is None:
    sys.exit(f"{when}: no dtrain_step yet")
step = int(step)
if step not in train:
    sys.exit(f"{when}: /metrics says step {step}, which the metrics file does not have (it has {sorted(train)[-3:]})")
loss = one("dtrain_loss", rank="0")
if abs(loss - train[step]["loss"]) > 1e-6 * abs(loss):
    sys.exit(f"{when}: loss at step {step}: /metrics {loss}, metrics file {train[step]['loss']}")
for r in (0, 1):
    for name in ("dtrain_step_seconds", "dtrain_compute_seconds", "dtrain_comm_seconds",
                 "dtrain_exposed_comm_seconds", "dtrain_bytes_sent_total", "dtrain_tokens_per_second"):
        v = one(name, rank=str(r))
        if v is None or v < 0 or (name in ("dtrain_step_seconds", "dtrain_bytes_sent_total") and v <= 0):
            sys.exit(f"{when}: {name} of rank {r}: {v}")
    host = [l["host"] for n, l, v in samples if n == "dtrain_step" and l["rank"] == str(r)]
    if not host or not host[0]:
        sys.exit(f"{when}: rank {r} has no host label")
if one("dtrun_restarts_total") != 0:
    sys.exit(f"{when}: dtrun_restarts_total {one('dtrun_restarts_total')}")
if when == "final":
    last = max(train)
    if state != ["finished"] or step != steps or last != steps:
        sys.exit(f"final: state {state}, step {step}, last step in the file {last}")
    if abs(one("dtrain_eval_loss") - evals[-1]["eval_loss"]) > 1e-6 or one("dtrain_eval_step") != evals[-1]["step"]:
        sys.exit(f"final: eval loss {one('dtrain_eval_loss')} at {one('dtrain_eval_step')}, file {evals[-1]}")
    if one("dtrain_last_checkpoint_step") != steps:
        sys.exit(f"final: last checkpoint step {one('dtrain_last_checkpoint_step')}")
elif state != ["running"] and state != ["finished"]:
    sys.exit(f"{when}: state {state}")
print(f"{when}: {len(samples)} samples, state {state[0]}, step {step}, loss {loss} as in the metrics file")
PY
}
ok=0
for _ in $(seq 100); do # during the run: the first scrape with a step
    if check running 2>"$WORK/why"; then ok=1; break; fi
    kill -0 $job 2>/dev/null || break
    sleep 0.2
done
[ $ok = 1 ] || { cat "$WORK/why" "$WORK/err"; kill $job; fail "no valid scrape while training"; }
for _ in $(seq 1800); do grep -q "serving the final state" "$WORK/err" && break; sleep 0.1; done
expect_grep "$WORK/err" "serving the final state"
check final || { kill $job; fail "the final scrape"; }

# the server's rules
python3 - "$url" <<'PY' || { kill $job; fail "the HTTP rules"; }
import socket, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
def ask(raw):
    s = socket.create_connection((u.hostname, u.port), timeout=10)
    s.sendall(raw)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    return data.decode("utf-8", "replace")
def status(resp):
    return int(resp.split(" ", 2)[1])
cases = [(b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404), (b"GET /../../etc/passwd HTTP/1.1\r\n\r\n", 404),
         (b"GET /metrics/../metrics HTTP/1.1\r\n\r\n", 404), (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405),
         (b"DELETE / HTTP/1.1\r\n\r\n", 405), (b"GET / HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n", 431),
         (b"garbage\r\n\r\n", 400), (b"GET /api/state HTTP/1.1\r\n\r\n", 200)]
for raw, want in cases:
    r = ask(raw)
    if status(r) != want:
        sys.exit(f"{raw[:40]!r}: {r[:80]!r}, expected {want}")
r = ask(b"HEAD / HTTP/1.1\r\n\r\n")
head, _, body = r.partition("\r\n\r\n")
if status(r) != 200 or body or "Content-Length: 0" in head or "text/html" not in head:
    sys.exit(f"HEAD /: {head!r} {body[:40]!r}")
r = ask(b"GET /timeline HTTP/1.1\r\n\r\n")
head, _, body = r.partition("\r\n\r\n")
if status(r) != 200 or "attachment" not in head or '"traceEvents"' not in body[:100]:
    sys.exit(f"/timeline: {head!r}")
if '"timeline":true' not in ask(b"GET /api/state HTTP/1.1\r\n\r\n"):
    sys.exit("/api/state does not offer the timeline")
r = ask(b"GET / HTTP/1.1\r\n\r\n")
if "<svg" not in r or "api/state" not in r:
    sys.exit("GET / is not the dashboard")
print("HTTP rules ok")
PY
kill -INT $job
wait $job
rc=$?
[ $rc = 0 ] || { cat "$WORK/err"; fail "dtrun exited $rc after the linger"; }
[ -z "$(ls -A "$WORK/tmp")" ] || fail "DT_MONITOR_DIR was left behind: $(ls "$WORK/tmp")"
echo "ok"
