#!/usr/bin/env bash
# dtrain plan and layout=auto (issue 47).  `dtrain plan` on a small gpt-mini
# for 4 ranks: the layouts it prints each run (the top three trained for 2
# steps on 4 ranks with their --set words: dt_layout_check and the model
# accept them), each says it fits, and under a memory limit each printed
# memory is within it; the profile is cached (the second plan reads it).
# `dtrain train --set layout=auto` on 2 ranks: the start line names the
# chosen layout and the prediction, the end line the measured step time
# beside it, and their ratio is not absurd (within [0.2, 5]: the machine is
# noisy, the ratio is recorded in the log).  Bad arguments are named: -n 0,
# an unknown --model, a missing --links file, --hardware without --model,
# --machines that do not divide --nodes or with --hardware; a projection's
# hosts from the hardware file's devices_per_node; 2 namespace
# hosts of a 1-core machine (`--machines 1`) take turns on its core;
# tp=4 with 6 heads is refused by --layout and never printed by the search.
. "$(dirname "$0")/lib.sh"
export XDG_CACHE_HOME="$WORK/cache"
small=(--config configs/gpt-mini.json --set layers=2 --set dim=128 --set context=64 --set batch_size=8
       --set threads=1)

"$BIN/dtrain" plan "${small[@]}" -n 4 --top 3 >"$WORK/plan" 2>&1 || { cat "$WORK/plan"; fail "dtrain plan failed"; }
cat "$WORK/plan"
expect_grep "$WORK/plan" "plan: profiling [0-9]+ blocks of gpt"
expect_grep "$WORK/plan" "^plan: gpt on 4 ranks .* layouts considered"
expect_grep "$WORK/plan" "^ 1\. "
expect_grep "$WORK/plan" "predicted [0-9.]+ s/step = compute"
expect_no_grep "$WORK/plan" "does not fit"
n=$(grep -cE '^    (--set |\(the default layout\))' "$WORK/plan")
[ "$n" -ge 1 ] || fail "no layout printed"
i=0
while read -r sets; do # each line pasted as printed: "--set a=1 --set b=2"
    i=$((i + 1))
    args=()
    [ "$sets" = "(the default layout)" ] || read -r -a args <<<"$sets"
    "$BIN/dtrun" -n 4 "$BIN/dtrain" train "${small[@]}" --set steps=2 --set log_interval=1 --set eval_batches=1 \
        "${args[@]}" >"$WORK/run$i" 2>&1 || { cat "$WORK/run$i"; fail "layout $i ($sets) did not run on 4 ranks"; }
    expect_grep "$WORK/run$i" "step 2/2"
done < <(sed -nE 's/^    (--set .*|\(the default layout\))$/\1/p' "$WORK/plan")
echo "the $i printed layouts ran on 4 ranks"

# the cache: the second plan reads the profile the first wrote
"$BIN/dtrain" plan "${small[@]}" -n 4 --top 2 >"$WORK/plan2" 2>&1 || { cat "$WORK/plan2"; fail "second plan failed"; }
expect_grep "$WORK/plan2" "plan: the profile of this model from .*/cache/dtrain/plan-[0-9a-f]+\.json"
expect_no_grep "$WORK/plan2" "profiling"

# the profile's activations against the trainer's measured peak, one process (the forward's records alone,
# what the profiler first took, were 44% under), and its fit of a cost per micro-batch is in the cache
"$BIN/dtrain" plan "${small[@]}" -n 1 --layout "" >"$WORK/one" 2>&1 || { cat "$WORK/one"; fail "plan -n 1 failed"; }
"$BIN/dtrain" train "${small[@]}" --set steps=2 --set eval_batches=1 >"$WORK/one.run" 2>&1 ||
    { cat "$WORK/one.run"; fail "one process did not train"; }
pred=$(sed -n 's/.*activations \([0-9.]*\)).*/\1/p' "$WORK/one")
meas=$(sed -n 's/^activation memory: at most \([0-9.]*\) MiB.*/\1/p' "$WORK/one.run")
echo "activations: predicted $pred MiB, measured $meas MiB"
awk -v p="$pred" -v m="$meas" 'BEGIN { exit !(p > 0 && m > 0 && p / m > 0.85 && p / m < 1.15) }' ||
    fail "predicted activations $pred MiB are not within 15% of the measured $meas MiB"
grep -q '"bwd_fixed_s"' "$XDG_CACHE_HOME"/dtrain/plan-*.json || fail "the cached profile has no bwd_fixed_s"

# a memory limit: what is printed fits it
"$BIN/dtrain" plan "${small[@]}" -n 4 --top 20 --memory-limit 40MiB >"$WORK/lim" 2>&1 ||
    { cat "$WORK/lim"; fail "plan with a memory limit failed"; }
awk '/^    memory / { m = $2 + 0; if (m > 40) { print "over the limit: " $0; bad = 1 } }
     END { exit bad }' "$WORK/lim" || fail "a printed layout is over the 40 MiB limit"
expect_no_grep "$WORK/lim" "does not fit"

# --json: one object with the best and the rejected
"$BIN/dtrain" plan "${small[@]}" -n 4 --json >"$WORK/json" 2>"$WORK/json.err" || { cat "$WORK/json.err"; fail "--json failed"; }
python3 - "$WORK/json" <<'PY' || fail "--json is not one object with best and rejected"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["best"] and all(b["step_s"] > 0 for b in o["best"]) and "rejected" in o, o
PY

# layout=auto on 2 ranks: the choice, the prediction, measured against it
"$BIN/dtrun" -n 2 "$BIN/dtrain" train "${small[@]}" --set steps=12 --set log_interval=4 --set eval_batches=1 \
    --set layout=auto >"$WORK/auto" 2>&1 || { cat "$WORK/auto"; fail "layout=auto failed"; }
expect_grep "$WORK/auto" "layout auto: .* \(--set .*\) for 2 ranks: predicted [0-9.]+ s/step"
expect_grep "$WORK/auto" "layout auto: measured [0-9.]+ s/step .* predicted [0-9.]+: measured / predicted [0-9.]+"
ratio=$(sed -n 's/.*measured \/ predicted \([0-9.]*\).*/\1/p' "$WORK/auto" | tail -n 1)
grep "layout auto" "$WORK/auto"
echo "layout=auto: measured / predicted $ratio"
less_than 0.2 "$ratio" && less_than "$ratio" 5 || fail "measured / predicted $ratio is outside [0.2, 5]"

"$BIN/dtrun" -n 2 "$BIN/dtrain" train "${small[@]}" --set steps=2 --set layout=auto --set servers=1 >"$WORK/ps" 2>&1 &&
    { cat "$WORK/ps"; fail "layout=auto with a parameter server ran"; }
expect_grep "$WORK/ps" "layout.*auto plans layouts without parameter servers"

# bad arguments, each named
bad() { # expected-regex args...
    local want=$1; shift
    "$BIN/dtrain" plan "$@" >"$WORK/bad" 2>&1 && { cat "$WORK/bad"; fail "dtrain plan $* succeeded"; }
    expect_grep "$WORK/bad" "$want"
}
bad "-n '0' must be an integer >= 1" "${small[@]}" -n 0
bad "-n N .* is required" "${small[@]}"
bad "--links $WORK/none.json" "${small[@]}" -n 4 --links "$WORK/none.json"

bad "--model gpt3-999b" -n 8 --hardware bench/plan/hardware/a100-dgx.json --model gpt3-999b
bad "--hardware and --model go together" -n 8 --model gpt3-175b
# a projection's hosts are the file's: devices_per_node (8) ranks each, unless --nodes says otherwise
hw=(--hardware bench/plan/hardware/a100-dgx.json --model gpt3-1.3b --top 1)
"$BIN/dtrain" plan "${hw[@]}" -n 32 >"$WORK/hw" 2>&1 || { cat "$WORK/hw"; fail "the 32-rank projection failed"; }
expect_grep "$WORK/hw" "on 32 ranks \(4 hosts\)"
"$BIN/dtrain" plan "${hw[@]}" -n 4 >"$WORK/hw" 2>&1 || { cat "$WORK/hw"; fail "the 4-rank projection failed"; }
expect_grep "$WORK/hw" "on 4 ranks \(1 host\)"
bad "-n 20 ranks do not fill hosts of 8 devices" "${hw[@]}" -n 20
bad "--nodes 1 puts 16 ranks on a host of .*, which has 8 devices" "${hw[@]}" -n 16 --nodes 1
# a layout the planner's blocks cannot refuse but the model can: tp 4 with 6 heads
h6=(--config configs/gpt-mini.json --set layers=2 --set dim=96 --set heads=6 --set context=64 --set batch_size=8
    --set threads=1)
bad "tp 4: does not divide heads \(6\)" "${h6[@]}" -n 4 --layout tp=4
"$BIN/dtrain" plan "${h6[@]}" -n 4 --top 50 >"$WORK/h6" 2>&1 || { cat "$WORK/h6"; fail "plan with 6 heads failed"; }
expect_no_grep "$WORK/h6" "^    --set .*tp=4"
bad "--nodes 4 hosts do not fill --machines 3" "${small[@]}" -n 4 --nodes 4 --machines 3
bad "--machines describes hosts of this machine" -n 8 --nodes 2 --machines 1 --hardware bench/plan/hardware/a100-dgx.json \
    --model gpt3-1.3b
# hosts that are namespaces of one machine (forced to 1 core): their 2 ranks take turns on it, so the default
# layout's compute doubles against a core each.  Both from the same profile (core_share: compute over its time
# with a core per thread; two plans' profiles differ by the machine's noise); a host of its own shares nothing.
field() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
own=$(taskset -c 0 "$BIN/dtrain" plan "${small[@]}" -n 2 --nodes 2 --layout "zero_stage=0" --json | field core_share)
taskset -c 0 "$BIN/dtrain" plan "${small[@]}" -n 2 --nodes 2 --machines 1 --layout "zero_stage=0" --json >"$WORK/shared.json" ||
    fail "plan --machines 1 --layout --json failed"
share=$(field core_share <"$WORK/shared.json")
taskset -c 0 "$BIN/dtrain" plan "${small[@]}" -n 2 --nodes 2 --machines 1 --top 1 >"$WORK/machine" 2>&1 ||
    { cat "$WORK/machine"; fail "plan --machines 1 failed"; }
expect_grep "$WORK/machine" "plan: 2 ranks x 1 thread share this machine's 1 cores: they take turns"
python3 -c "import sys; sys.exit(0 if float('$own') == 1 else 1)" || fail "2 hosts on 2 machines: core_share $own, not 1"
python3 -c "import sys; sys.exit(0 if 1.8 < float('$share') < 4 else 1)" ||
    fail "2 namespace hosts on 1 core: compute x $share against a core each (expected 2x, more with the contention measured)"
echo "2 hosts on 1 core: compute x $share of a core each ($(field compute_s <"$WORK/shared.json") s); 2 machines x $own"
"$BIN/dtrain" plan --help | grep -q -- "--memory-limit" || fail "dtrain plan --help does not list --memory-limit"
"$BIN/dtrain" plan --help | grep -q -- "--machines" || fail "dtrain plan --help does not list --machines"
echo "ok"
