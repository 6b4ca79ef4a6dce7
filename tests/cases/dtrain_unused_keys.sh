#!/usr/bin/env bash
# Issue 43: keys that do nothing in the chosen layout are no longer accepted
# in silence (docs/dtrain.md, "Keys that do nothing").
#   1. a key that would change what is trained, given (--set or the file) at
#      a value other than its default where it does nothing, is refused with
#      exit 2 naming the key, its value and what it needs: sync and staleness
#      without servers, staleness without ssp, pipeline_schedule without
#      pp > 1, virtual_stages without interleaved, momentum and nesterov
#      without sgd, beta1/beta2/eps without adamw, Adagrad's keys without
#      adagrad, min_lr without cosine, dropout on a model without dropout;
#      under dtrun too; and a --set on a resumed checkpoint's configuration;
#   2. the others (outputs, resources, speed, another model's sizes), and a
#      refusable key given at its default, are warned about in one line each
#      (once, by rank 0, under dtrun -n 2) and the run trains;
#   3. a resumed checkpoint (whose configuration holds every key) and every
#      file in configs/ run without any warning.
. "$(dirname "$0")/lib.sh"
T="$BIN/dtrain"
MLP=(--config configs/mlp.json --set 'mlp_sizes=[784,16,10]' --set batch_size=32 --set steps=2
     --set eval_batches=1 --set threads=1)
GPT=(--config configs/gpt-mini.json --set layers=1 --set dim=32 --set heads=2 --set context=16 --set batch_size=2
     --set steps=2 --set eval_batches=1 --set threads=1)
# refused NEEDS KEY VALUE ARGS...: exit 2, naming KEY = VALUE and NEEDS
refused() {
    local needs=$1 key=$2 value=$3; shift 3
    "$T" train "$@" >"$WORK/out" 2>&1
    local rc=$?
    [ $rc = 2 ] || { cat "$WORK/out"; fail "$key = $value ($*): exit $rc, expected 2"; }
    expect_grep "$WORK/out" "^dtrain: configuration: key '$key' = $value is only used with $needs[^:]*: refused"
    expect_no_grep "$WORK/out" "step [0-9]+/"
}

# 1. refused
refused "servers > 0" sync '"asp"' "${MLP[@]}" --set sync=asp
refused "servers > 0" sync '"ssp"' "${MLP[@]}" --set sync=ssp
refused "sync ssp and servers > 0" staleness 5 "${MLP[@]}" --set staleness=5
refused "sync ssp and servers > 0" staleness 5 "${MLP[@]}" --set servers=1 --set staleness=5
refused "pp > 1" pipeline_schedule '"gpipe"' "${GPT[@]}" --set pipeline_schedule=gpipe
refused "pipeline_schedule interleaved and pp > 1" virtual_stages 4 "${GPT[@]}" --set pp=2 --set virtual_stages=4
refused "optimizer sgd" momentum 0.5 "${GPT[@]}" --set momentum=0.5
refused "optimizer sgd and momentum > 0" nesterov true "${GPT[@]}" --set nesterov=true
refused "optimizer sgd and momentum > 0" nesterov true "${MLP[@]}" --set momentum=0 --set nesterov=true
refused "optimizer adamw" beta1 0.8 "${MLP[@]}" --set beta1=0.8
refused "optimizer adamw" eps 1e-06 "${MLP[@]}" --set optimizer=adagrad --set eps=1e-6
refused "optimizer adagrad" lr_decay 0.1 "${GPT[@]}" --set lr_decay=0.1
refused "optimizer adagrad" initial_accumulator_value 0.5 "${MLP[@]}" --set initial_accumulator_value=0.5
refused "schedule cosine" min_lr 0.0001 "${GPT[@]}" --set schedule=constant
refused "model gpt" dropout 0.1 "${MLP[@]}" --set dropout=0.1
# in the file, not by --set
printf '{"model": "mlp", "mlp_sizes": [784, 16, 10], "steps": 2, "sync": "asp"}\n' >"$WORK/asp.json"
refused "servers > 0" sync '"asp"' --config "$WORK/asp.json"
# every rank refuses before joining (no rank trains, dtrun fails)
"$BIN/dtrun" -n 2 "$T" train "${MLP[@]}" --set sync=asp >"$WORK/two" 2>&1 && { cat "$WORK/two"; fail "dtrun -n 2 with sync=asp succeeded"; }
expect_grep "$WORK/two" "^\[[01]\] dtrain: configuration: key 'sync' = \"asp\" is only used with servers > 0"
expect_no_grep "$WORK/two" "step [0-9]+/"
echo "refused: sync, staleness, pipeline_schedule, virtual_stages, momentum, nesterov, beta1, eps, lr_decay," \
     "initial_accumulator_value, min_lr, dropout (--set, the file, dtrun -n 2)"

# 2. warned about, once each, and the run trains
warns=(offload_dir ps_clock_log checkpoint_interval checkpoint_initial conv1_channels vocab tf32 straggler_ms
       no_decay sync momentum)
"$BIN/dtrun" -n 2 "$T" train "${MLP[@]}" --set optimizer=adamw --set lr=0.001 --set offload_dir=/var/tmp \
    --set ps_clock_log="$WORK/clock" --set checkpoint_interval=5 --set checkpoint_initial=true \
    --set conv1_channels=16 --set vocab=512 --set tf32=true --set straggler_ms=5 --set no_decay=none \
    --set sync=bsp --set momentum=0.9 >"$WORK/warn" 2>&1 || { cat "$WORK/warn"; fail "the run with leftover keys failed"; }
expect_grep "$WORK/warn" "step 2/2"
for key in "${warns[@]}"; do
    n=$(grep -c "dtrain: warning: key '$key' = .* is only used with .*: it does nothing here" "$WORK/warn")
    [ "$n" = 1 ] || { cat "$WORK/warn"; fail "key $key: $n warning lines, expected 1"; }
done
expect_grep "$WORK/warn" "^\[0\] dtrain: warning: key 'sync' = \"bsp\" is only used with servers > 0"
expect_grep "$WORK/warn" "^\[0\] dtrain: warning: key 'conv1_channels' = 16 is only used with model cnn"
expect_grep "$WORK/warn" "^\[0\] dtrain: warning: key 'offload_dir' = \"/var/tmp\" is only used with offload disk"
[ -e "$WORK/clock" ] && fail "ps_clock_log was written without servers"
# bucket_mb does nothing under ZeRO (no allreduce buckets)
"$T" train "${MLP[@]}" --set zero_stage=1 --set bucket_mb=1 >"$WORK/zero" 2>&1 || { cat "$WORK/zero"; fail "zero_stage 1"; }
expect_grep "$WORK/zero" "dtrain: warning: key 'bucket_mb' = 1 is only used with data parallelism by allreduce"
echo "warned about once each: ${warns[*]} bucket_mb"

# 3. no warning: a resumed checkpoint (its configuration holds every key,
# momentum with adamw among them), a --set on it refused as in the file
"$T" train "${MLP[@]}" --set optimizer=adamw --set lr=0.001 --set checkpoint_dir="$WORK/ck" >"$WORK/ck.out" 2>&1 ||
    { cat "$WORK/ck.out"; fail "the run to resume"; }
"$T" train --resume "$WORK/ck" --set steps=4 >"$WORK/res" 2>&1 || { cat "$WORK/res"; fail "resume"; }
expect_grep "$WORK/res" "step 4/4"
expect_no_grep "$WORK/res" "[Ww]arn"
refused "optimizer sgd" momentum 0.5 --resume "$WORK/ck" --set steps=4 --set momentum=0.5
for f in configs/*.json; do
    extra=(--set steps=1 --set eval_batches=1 --set log_interval=1)
    case $f in *gpt*|*demo*) extra+=(--set batch_size=2) ;; esac
    "$T" train --config "$f" "${extra[@]}" >"$WORK/cfg" 2>&1 || { cat "$WORK/cfg"; fail "$f"; }
    expect_no_grep "$WORK/cfg" "[Ww]arn"
    echo "$f: trains, no warning"
done
echo ok
