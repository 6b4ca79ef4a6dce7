#!/usr/bin/env bash
# dtrain's recompute key (issue 30): a gpt with dropout 0.1 trained with
# recompute=off, blocks and all, on one rank and on 2 data-parallel ranks:
# every logged loss and the checkpoint's tensor files (weights and AdamW's
# moments) equal to the bit, and the activation memory the trainer reports
# lower with recomputation; a value outside off/blocks/all is refused.
. "$(dirname "$0")/lib.sh"
args=(--config configs/gpt-mini.json --set layers=2 --set dim=64 --set context=32 --set steps=12
      --set batch_size=4 --set dropout=0.1 --set log_interval=2 --set eval_interval=12 --set eval_batches=1
      --set threads=1 --set checkpoint_interval=12)
for n in 1 2; do
    for r in off blocks all; do
        par "$WORK/$n-$r" "$BIN/dtrun" -n $n "$BIN/dtrain" train "${args[@]}" --set recompute=$r \
            --set checkpoint_dir="$WORK/ck-$n-$r" --set metrics_file="$WORK/$n-$r.jsonl"
    done
done
par_wait
for n in 1 2; do
    for r in off blocks all; do
        par_ok "$WORK/$n-$r" || { cat "$WORK/$n-$r"; fail "$n rank(s), recompute=$r failed"; }
    done
    for r in blocks all; do
        for f in model optim_m optim_v; do
            cmp "$WORK/ck-$n-off/step-00000012/$f.safetensors" "$WORK/ck-$n-$r/step-00000012/$f.safetensors" ||
                fail "$n rank(s): recompute=$r: $f.safetensors differs from recompute=off"
        done
        python3 - "$WORK/$n-off.jsonl" "$WORK/$n-$r.jsonl" "$n rank(s), recompute=$r" <<'PY' || fail "$n rank(s): recompute=$r: the losses differ"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
keys = ("loss", "eval_loss", "grad_norm")
pairs = [(x[k], y[k]) for x, y in zip(a, b) for k in keys if k in x]
assert len(a) == len(b) and pairs, f"{len(a)} against {len(b)} records"
assert all(x == y for x, y in pairs), [p for p in pairs if p[0] != p[1]][:3]
print(f"{sys.argv[3]}: {len(pairs)} logged losses and norms equal to recompute=off")
PY
        mib() { sed -nE 's/^(\[0\] )?activation memory: at most ([0-9.]+) MiB.*/\2/p' "$1" | tail -1; }
        off=$(mib "$WORK/$n-off") on=$(mib "$WORK/$n-$r")
        less_than "$on" "$off" || { cat "$WORK/$n-$r"; fail "$n rank(s): recompute=$r holds $on MiB, off $off MiB"; }
        echo "$n rank(s): recompute=$r: checkpoint bitwise equal, activations $on MiB against $off MiB"
    done
done
"$BIN/dtrain" train "${args[@]}" --set recompute=some >"$WORK/bad" 2>&1 && fail "recompute=some accepted"
expect_grep "$WORK/bad" "key 'recompute'"
echo ok
