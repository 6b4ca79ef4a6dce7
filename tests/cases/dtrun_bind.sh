#!/usr/bin/env bash
# --bind auto gives each local rank its own CPUs when there are enough (within
# the CPUs dtrun may use); too few CPUs, one rank, or --bind none: no binding.
. "$(dirname "$0")/lib.sh"
show='echo "$DT_LOCAL_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)"'
cpus() { taskset -c "$1" "$BIN/dtrun" --no-prefix "${@:2}" sh -c "$show" | sort; }
[ "$(cpus 0,1 -n 2)" = $'0 0\n1 1' ] || fail "-n 2 on CPUs 0,1 was not bound one CPU each: $(cpus 0,1 -n 2)"
[ "$(cpus 1 -n 1)" = "0 1" ] || fail "one rank changed its CPUs"
[ "$(cpus 0,1 -n 3)" = $'0 0-1\n1 0-1\n2 0-1' ] || fail "3 ranks on 2 CPUs were bound: $(cpus 0,1 -n 3)"
[ "$(cpus 0,1 --bind none -n 2)" = $'0 0-1\n1 0-1' ] || fail "--bind none bound the ranks"
[ "$(cpus 1 -n 2)" = $'0 1\n1 1' ] || fail "2 ranks on 1 allowed CPU: $(cpus 1 -n 2)"
"$BIN/dtrun" --bind cores -n 2 true 2>"$WORK/err"; [ $? = 2 ] || fail "--bind cores accepted"
expect_grep "$WORK/err" "--bind 'cores': expected auto or none"
echo ok
