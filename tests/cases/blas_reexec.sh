#!/usr/bin/env bash
# dtrain re-executes itself with OPENBLAS_CORETYPE set where OpenBLAS would
# pick slower kernels than the CPU allows (docs/engine.md).  Issue 43: the
# re-executed process was named "exe" (it ran /proc/self/exe), so ps, pgrep
# dtrain, killall dtrain and the netns tests did not find it; and a user's
# OPENBLAS_CORETYPE equal to the core OpenBLAS reported was replaced.
# DT_BLAS_REEXEC_FORCE=1 takes the re-execution path on every CPU (with the
# core OpenBLAS picked where nothing is to gain: the same kernels), so:
#   1. the re-executed process (same pid: exec) is named dtrain in
#      /proc/PID/comm, ps -o comm and pgrep -x dtrain; its argv is the one
#      given (argv[0] too); OPENBLAS_CORETYPE is in its initial environment
#      and its start line names it;
#   2. its losses equal, to the bit, those of a run given that
#      OPENBLAS_CORETYPE by the user (no re-execution, the same kernels);
#   3. a user's OPENBLAS_CORETYPE stands, also one equal to the core name
#      OpenBLAS reports for it (dtrain and dtrun's ranks);
#   4. DT_BLAS_REEXEC=0 turns it off (dtrain and dtrun's ranks); a value
#      other than 0 or 1 is refused naming it.
. "$(dirname "$0")/lib.sh"
T=$(cd "$BIN" && pwd)/dtrain
unset OPENBLAS_CORETYPE DT_BLAS_REEXEC DT_BLAS_REEXEC_FORCE
RUN=(train --config configs/mlp.json --set 'mlp_sizes=[784,32,10]' --set batch_size=32 --set threads=1
     --set eval_batches=2)
# core_of LOG: the OPENBLAS_CORETYPE dtrain's start line reports ("-": unset)
core_of() { sed -nE 's/.*blas: core [^,]*, OpenBLAS threads [0-9]+, OPENBLAS_CORETYPE ([^,]+), config .*/\1/p' "$1" | head -n 1; }

# 1. the re-executed process: its name, its argv, its environment
log=$WORK/forced.log
DT_BLAS_REEXEC_FORCE=1 bash -c 'exec -a dtrain-argv0 "$@"' sh "$T" "${RUN[@]}" --set steps=100000000 \
    --set log_interval=1000 --set "metrics_file=$WORK/a b.jsonl" >"$log" 2>&1 &
pid=$!
for _ in $(seq 300); do
    grep -q "step 1000/" "$log" && break
    kill -0 $pid 2>/dev/null || { cat "$log"; fail "the forced run ended by itself"; }
    sleep 0.1
done
grep -q "step 1000/" "$log" || { kill $pid; cat "$log"; fail "the forced run did not reach step 1000 in 30 s"; }
comm=$(cat /proc/$pid/comm) ps_comm=$(ps -o comm= -p $pid) found=$(pgrep -x dtrain | grep -cx $pid)
argv=$(tr '\0' '|' </proc/$pid/cmdline)
env_core=$(tr '\0' '\n' </proc/$pid/environ | sed -n 's/^OPENBLAS_CORETYPE=//p')
kill $pid; wait $pid 2>/dev/null
echo "re-executed pid $pid: comm '$comm', ps -o comm '$ps_comm', OPENBLAS_CORETYPE '$env_core', argv $argv"
[ -n "$env_core" ] || { cat "$log"; fail "DT_BLAS_REEXEC_FORCE=1: dtrain did not re-execute itself (no OPENBLAS_CORETYPE in its environment)"; }
[ "$comm" = dtrain ] || fail "the re-executed process is named '$comm' in /proc/$pid/comm, not dtrain"
[ "$ps_comm" = dtrain ] || fail "ps -o comm shows '$ps_comm' for the re-executed process, not dtrain"
[ "$found" = 1 ] || fail "pgrep -x dtrain does not find the re-executed process $pid"
want="dtrain-argv0|$(printf '%s|' "${RUN[@]}" --set steps=100000000 --set log_interval=1000 --set "metrics_file=$WORK/a b.jsonl")"
[ "$argv" = "$want" ] || fail "argv changed by the re-execution: $argv, expected $want"
[ "$(core_of "$log")" = "$env_core" ] || { cat "$log"; fail "the start line names OPENBLAS_CORETYPE $(core_of "$log"), the environment $env_core"; }

# 2. the same results as the user giving that core (no re-execution)
DT_BLAS_REEXEC_FORCE=1 "$T" "${RUN[@]}" --set steps=30 --set log_interval=1 --set "metrics_file=$WORK/forced.jsonl" >"$WORK/f.log" 2>&1 ||
    { cat "$WORK/f.log"; fail "forced run"; }
OPENBLAS_CORETYPE=$env_core "$T" "${RUN[@]}" --set steps=30 --set log_interval=1 --set "metrics_file=$WORK/user.jsonl" >"$WORK/u.log" 2>&1 ||
    { cat "$WORK/u.log"; fail "run with OPENBLAS_CORETYPE=$env_core"; }
[ "$(core_of "$WORK/f.log")" = "$env_core" ] && [ "$(core_of "$WORK/u.log")" = "$env_core" ] ||
    fail "OPENBLAS_CORETYPE: forced run $(core_of "$WORK/f.log"), user's $(core_of "$WORK/u.log"), expected $env_core"
python3 - "$WORK/forced.jsonl" "$WORK/user.jsonl" <<'PY' || fail "the re-executed run's losses differ from the run without re-execution"
import json, sys
def losses(path):
    return [(r.get("step"), r.get("loss"), r.get("grad_norm"), r.get("eval_loss"))
            for r in map(json.loads, open(path)) if "loss" in r or "eval_loss" in r]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) >= 30 and a == b, f"{a[:3]} ... against {b[:3]} ..."
print(f"{len(a)} records equal to the bit")
PY

# 3. the user's OPENBLAS_CORETYPE stands, also the name OpenBLAS reports for
# that core (Haswell on any AVX2 CPU; else the core OpenBLAS picked itself)
user=$env_core
grep -qw avx2 /proc/cpuinfo && user=Haswell
for forced in 0 1; do
    DT_BLAS_REEXEC_FORCE=$forced OPENBLAS_CORETYPE=$user "$T" "${RUN[@]}" --set steps=2 >"$WORK/kept.log" 2>&1 ||
        { cat "$WORK/kept.log"; fail "OPENBLAS_CORETYPE=$user"; }
    [ "$(core_of "$WORK/kept.log")" = "$user" ] ||
        { cat "$WORK/kept.log"; fail "DT_BLAS_REEXEC_FORCE=$forced: OPENBLAS_CORETYPE=$user became $(core_of "$WORK/kept.log")"; }
    DT_BLAS_REEXEC_FORCE=$forced OPENBLAS_CORETYPE=$user "$BIN/dtrun" -n 1 "$T" "${RUN[@]}" --set steps=2 >"$WORK/kept.log" 2>&1 ||
        { cat "$WORK/kept.log"; fail "dtrun with OPENBLAS_CORETYPE=$user"; }
    [ "$(core_of "$WORK/kept.log")" = "$user" ] ||
        { cat "$WORK/kept.log"; fail "dtrun, DT_BLAS_REEXEC_FORCE=$forced: OPENBLAS_CORETYPE=$user became $(core_of "$WORK/kept.log")"; }
done
echo "OPENBLAS_CORETYPE=$user kept by dtrain and by dtrun's ranks"
# dtrun sets the forced core for its ranks, which then need no re-execution
DT_BLAS_REEXEC_FORCE=1 "$BIN/dtrun" -n 1 "$T" "${RUN[@]}" --set steps=2 >"$WORK/dtrun.log" 2>&1 ||
    { cat "$WORK/dtrun.log"; fail "dtrun, DT_BLAS_REEXEC_FORCE=1"; }
[ "$(core_of "$WORK/dtrun.log")" = "$env_core" ] || { cat "$WORK/dtrun.log"; fail "dtrun did not set OPENBLAS_CORETYPE=$env_core for its rank"; }

# 4. the off switch, also where the re-execution is forced
for launcher in "" "$BIN/dtrun -n 1"; do
    DT_BLAS_REEXEC=0 DT_BLAS_REEXEC_FORCE=1 $launcher "$T" "${RUN[@]}" --set steps=2 >"$WORK/off.log" 2>&1 ||
        { cat "$WORK/off.log"; fail "${launcher:-dtrain}: DT_BLAS_REEXEC=0"; }
    [ "$(core_of "$WORK/off.log")" = - ] ||
        { cat "$WORK/off.log"; fail "${launcher:-dtrain}: DT_BLAS_REEXEC=0 still set OPENBLAS_CORETYPE $(core_of "$WORK/off.log")"; }
done
echo "DT_BLAS_REEXEC=0: OPENBLAS_CORETYPE left unset by dtrain and dtrun"
for launcher in "" "$BIN/dtrun -n 1"; do
    DT_BLAS_REEXEC=yes $launcher "$T" "${RUN[@]}" --set steps=2 >"$WORK/bad.log" 2>&1 && fail "${launcher:-dtrain} accepted DT_BLAS_REEXEC=yes"
    expect_grep "$WORK/bad.log" "DT_BLAS_REEXEC: 'yes' is not an integer"
done
echo "ok"
