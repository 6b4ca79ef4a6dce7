# Helpers for the shell test cases (sourced).  BIN and LOGS come from run_tests.sh.
set -u
BIN=${BIN:-build/bin}
WORK=$(mktemp -d /tmp/dtrain-case.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_grep() { grep -qE -- "$2" "$1" || { echo "--- $1:"; cat "$1"; fail "expected /$2/ in $1"; }; }
expect_no_grep() { ! grep -qE -- "$2" "$1" || { echo "--- $1:"; cat "$1"; fail "did not expect /$2/ in $1"; }; }
now() { python3 -c "import time; print(time.time())"; }
elapsed() { python3 -c "import time; print(time.time() - $1)"; }
less_than() { python3 -c "import sys; sys.exit(0 if float('$1') < float('$2') else 1)"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
