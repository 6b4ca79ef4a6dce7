# Helpers for the shell test cases (sourced).  BIN and LOGS come from run_tests.sh.
set -u
BIN=${BIN:-build/bin}
WORK=$(mktemp -d /tmp/dtrain-case.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_grep() { grep -qE -- "$2" "$1" || { echo "--- $1:"; cat "$1"; fail "expected /$2/ in $1"; }; }
expect_no_grep() { ! grep -qE -- "$2" "$1" || { echo "--- $1:"; cat "$1"; fail "did not expect /$2/ in $1"; }; }
# Wall-clock seconds (the same clock as the test programs' CLOCK_REALTIME
# stamps).  date and awk, not python: a python start-up takes 0.1 s on a
# loaded 2-core machine (1 to 2 s through pyenv's shim), and it counted in
# every time measured.
now() { date +%s.%N; }
elapsed() { awk -v t0="$1" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.3f\n", t1 - t0 }'; }
# less_than A B: A < B as numbers; false (like a failed float()) when either is not a number.
less_than() {
    awk -v a="$1" -v b="$2" 'BEGIN {
        num = "^[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$"
        exit !(a ~ num && b ~ num && a + 0 < b + 0) }'
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Independent jobs side by side (a dtrun job mostly waits: start-up, rendezvous,
# teardown).  par FILE CMD...: runs CMD in the background, stdout and stderr
# in FILE and its exit status in FILE.rc, once fewer than PAR_JOBS of them run
# (3; 2 under DT_TEST_QUICK, the sanitizer builds, whose ranks need more CPU).
# par_wait: waits for them all.  Only for scripts with no other background jobs.
PAR_JOBS=${PAR_JOBS:-3}
[ "${QUICK:-${DT_TEST_QUICK:-0}}" = 1 ] && PAR_JOBS=2
par() {
    local out=$1; shift
    while [ "$(jobs -rp | wc -l)" -ge "$PAR_JOBS" ]; do wait -n; done
    { "$@" >"$out" 2>&1; echo $? >"$out.rc"; } &
}
par_wait() { wait; }
par_ok() { [ "$(cat "$1.rc" 2>/dev/null)" = 0 ]; } # par_ok FILE: its command exited 0
# rank_pid JOB RANK: the pid of rank RANK among the children of dtrun JOB
# (found by DT_RANK in their environment); empty when there is none.
rank_pid() {
    local p
    for p in $(pgrep -P "$1"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "DT_RANK=$2" && { echo "$p"; return; }
    done
}
# kill_rank_in_training RANK LOG CMD...: run CMD (a dtrun training job that
# logs "step 5/" early) in the background with its output in LOG; once step 5
# is logged kill -9 rank RANK (found by DT_RANK among dtrun's children), and
# expect the job to fail within 15 s with dtrun naming that rank.
kill_rank_in_training() {
    local rank=$1 log=$2 job victim="" p killed took
    shift 2
    "$@" >"$log" 2>&1 &
    job=$!
    for _ in $(seq 300); do grep -q "step 5/" "$log" && break; sleep 0.1; done
    victim=$(rank_pid $job "$rank")
    [ -n "$victim" ] || { kill $job; cat "$log"; fail "did not find rank $rank among dtrun's children"; }
    killed=$(now)
    kill -9 "$victim"
    wait $job && fail "the job exited 0 after rank $rank died"
    took=$(elapsed "$killed")
    less_than "$took" 15 || fail "the job took $took s to stop"
    expect_grep "$log" "dtrun: rank $rank \(pid $victim\) was killed by signal 9"
    echo "rank $rank killed: the job stopped $took s later"
}
# compare_losses A.jsonl B.jsonl WHAT [FIRST_STEP=1] [KEYS="loss eval_loss"]:
# every KEYS value B's metrics file logged from FIRST_STEP on is in A's too,
# within 1e-5 relative (prints the worst); fails naming WHAT otherwise.
compare_losses() {
    python3 - "$1" "$2" "$3" "${4:-1}" ${5:-loss eval_loss} <<'PY' || fail "$3: the losses differ"
import json, sys
keys = sys.argv[5:]
a = {(r["step"], k): r[k] for r in map(json.loads, open(sys.argv[1])) for k in keys if k in r}
b = {(r["step"], k): r[k] for r in map(json.loads, open(sys.argv[2])) for k in keys if k in r}
ks = [k for k in b if k[0] >= int(sys.argv[4])]
assert ks and all(k in a for k in ks), f"records {sorted(b)} against {sorted(a)}"
worst = max(abs(a[k] - b[k]) / abs(a[k]) for k in ks)
print(f"{sys.argv[3]}: {len(ks)} losses, within {worst:.2g}")
sys.exit(0 if worst <= 1e-5 else 1)
PY
}
