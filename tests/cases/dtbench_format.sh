#!/usr/bin/env bash
# dtbench, dtrun and dtrain print the version of CMakeLists.txt's project();
# dtbench's errors name the bad argument (no stray ''); under
# `dtrun --no-prefix` its rows are bare and in nccl-tests' layout: size count
# type redop root, then time algbw busbw #wrong out of place and in place,
# and the run ends with "# Avg bus bandwidth : X", their mean; the same with
# --device emu (buffers in device memory, staged or by IPC).
. "$(dirname "$0")/lib.sh"
version=$(sed -n 's/^project(dtrain VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
[ -n "$version" ] || fail "no version in CMakeLists.txt's project()"
for tool in dtbench dtrun dtrain; do
    "$BIN/$tool" --version >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "$tool --version failed"; }
    [ "$(cat "$WORK/out")" = "$tool $version" ] || fail "$tool --version printed '$(cat "$WORK/out")', expected '$tool $version'"
done

bad() { # expected-message ARGS...: exit 2, the message, no empty quotes
    local want=$1; shift
    "$BIN/dtbench" "$@" >"$WORK/out" 2>"$WORK/err"; local rc=$?
    [ $rc = 2 ] || { cat "$WORK/err"; fail "dtbench $* exited $rc, expected 2"; }
    expect_grep "$WORK/err" "$want"
    expect_no_grep "$WORK/err" "''"
}
bad "invalid option '-x'" -x allreduce
bad "invalid option '--bogus'" --bogus allreduce
bad "missing the value of option '-b'" allreduce -b
bad "missing OP" 
bad "smallest size \(-b\) is larger than the largest \(-e\)" allreduce -b 1M -e 8
bad "smallest size \(-b\) must be at least 1 byte" allreduce -b 0 -e 0
# a step factor near 1: each size once (it printed size 8 without end)
timeout 30 "$BIN/dtbench" allreduce -b 8 -e 64 -f 1.0000001 -n 1 -w 0 >"$WORK/near1" 2>&1 ||
    { tail "$WORK/near1"; fail "a step factor of 1.0000001 did not end"; }
[ "$(grep -cE '^ +[0-9]+ +[0-9]+ +f32' "$WORK/near1")" = 15 ] || { cat "$WORK/near1"; fail "expected the 15 sizes 8..64"; }
"$BIN/dtrun" -n 1 "$BIN/dtbench" allreduce --device nonsense >"$WORK/out" 2>&1 && fail "dtbench --device nonsense ran"
expect_grep "$WORK/out" "dtbench: --device nonsense: .*nonsense"

# The ops' jobs run 3 at a time (lib.sh's par; nothing here checks a time
# beyond "more than 0"), stdout and stderr apart.
ops="allreduce reduce_scatter allgather alltoall broadcast gather scatter reduce sendrecv"
for op in $ops; do
    par "$WORK/$op.all" sh -c '"$1" -n 3 --no-prefix "$2" "$3" -b 8 -e 96K -f 32 -n 2 -w 1 -r 1 >"$4" 2>"$4.err"' \
        sh "$BIN/dtrun" "$BIN/dtbench" $op "$WORK/$op"
done
# --device emu: the buffers in the test device's memory (the host cannot
# dereference it), staged, and by IPC where DT_DEVICE_IPC=1 takes it: the
# same layout, every result checked.
devops="allreduce reduce_scatter allgather alltoall broadcast sendrecv"
for op in $devops; do
    ipc=$([ "$op" = allreduce ] || [ "$op" = allgather ] && echo 1 || echo 0)
    par "$WORK/dev-$op.all" sh -c 'DT_DEVICE_IPC=$5 "$1" -n 3 --no-prefix "$2" "$3" -b 8 -e 96K -f 32 -n 2 -w 1 -r 1 --device emu >"$4" 2>"$4.err"' \
        sh "$BIN/dtrun" "$BIN/dtbench" $op "$WORK/dev-$op" "$ipc"
done
# --json carries the in-place figures too.
par "$WORK/json.all" sh -c '"$1" -n 2 --no-prefix "$2" allgather -b 64 -e 64 -n 2 -w 0 --json >"$3"' sh "$BIN/dtrun" "$BIN/dtbench" "$WORK/json"
par_wait
for op in $devops; do
    par_ok "$WORK/dev-$op.all" || { cat "$WORK/dev-$op" "$WORK/dev-$op.err"; fail "dtbench $op --device emu failed"; }
    expect_grep "$WORK/dev-$op" "^# dtbench .* buffers emu$"
    cp "$WORK/dev-$op" "$WORK/$op.dev" # checked with the host runs below
done
for op in $ops $(for o in $devops; do echo "$o.dev"; done); do
    [ -f "$WORK/$op.all" ] && { par_ok "$WORK/$op.all" || { cat "$WORK/$op" "$WORK/$op.err"; fail "dtbench $op failed"; }; }
    expect_no_grep "$WORK/$op" '^\['
    expect_grep "$WORK/$op" "^# +out-of-place +in-place"
    expect_grep "$WORK/$op" "^# +size +count +type +redop +root +time +algbw +busbw +#wrong +time +algbw +busbw +#wrong +iters"
    # The rows and the last line, read as an nccl-tests parser would.
    python3 - "$WORK/$op" "${op%.dev}" <<'PY' || { cat "$WORK/$op"; fail "dtbench $op: rows not in nccl-tests' layout"; }
import re, sys
lines = open(sys.argv[1]).read().splitlines()
op = sys.argv[2]
rows = [l.split() for l in lines if l.strip() and not l.startswith("#")]
assert len(rows) == 3, rows                                  # 8, 256, 8192 ... up to 96K by 32
bws = []
for f in rows:
    assert len(f) == 14, f
    int(f[0]), int(f[1])
    assert f[4] == ("1" if op in ("broadcast", "reduce", "gather", "scatter") else "-1"), f
    assert float(f[5]) > 0 and f[8] == "0", f                # out of place: time, #wrong
    bws.append(float(f[7]))
    if op == "sendrecv":
        assert f[9:13] == ["N/A"] * 4, f
    else:
        assert float(f[9]) > 0 and f[12] == "0", f           # in place
        bws.append(float(f[11]))
    assert int(f[13]) >= 2, f
m = re.fullmatch(r"# Avg bus bandwidth +: ([0-9.]+)", lines[-1])
assert m, lines[-1]
assert abs(float(m.group(1)) - sum(bws) / len(bws)) < 0.002, (m.group(1), bws)
PY
done
par_ok "$WORK/json.all" || { cat "$WORK/json.all"; fail "dtbench --json failed"; }
python3 -c "
import json, sys
j = json.loads(open(sys.argv[1]).read())
assert j['wrong'] == 0 and j['wrong_inplace'] == 0 and j['time_us_inplace'] > 0, j
" "$WORK/json" || { cat "$WORK/json"; fail "dtbench --json lacks the in-place figures"; }
echo ok
