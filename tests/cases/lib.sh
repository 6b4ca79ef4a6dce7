# Helpers for the shell test cases (sourced).  BIN and LOGS come from run_tests.sh.
set -u
BIN=${BIN:-build/bin}
WORK=$(mktemp -d /tmp/dtrain-case.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_grep() { grep -qE -- "$2" "$1" || { echo "--- $1:"; cat "$1"; fail "expected /$2/ in $1"; }; }
expect_no_grep() { ! grep -qE -- "$2" "$1" || { echo "--- $1:"; cat "$1"; fail "did not expect /$2/ in $1"; }; }
# Wall-clock seconds (the same clock as the test programs' CLOCK_REALTIME
# stamps).  date and awk, not python: a python start-up takes 30 ms idle and
# far more on a loaded machine, and it would count in every measured time.
now() { date +%s.%N; }
elapsed() { awk -v t0="$1" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.3f\n", t1 - t0 }'; }
# less_than A B: A < B as numbers; false (like a failed float()) when either is not a number.
less_than() {
    awk -v a="$1" -v b="$2" 'BEGIN {
        num = "^[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$"
        exit !(a ~ num && b ~ num && a + 0 < b + 0) }'
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
