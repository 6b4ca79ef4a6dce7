#!/usr/bin/env bash
# scripts/dtrain_to_torch.py: a freshly trained tiny gpt and mlp checkpoint load
# into PyTorch modules with strict=True (the gpt's lm_head tied to wte), the
# safetensors __metadata__ carries the model config, step and dtrain version,
# and the gpt's logits agree with dtrain's: the same held-out loss as
# `dtrain eval` (within 2e-4, dtrain prints 4 decimals) and the same 24 greedy
# bytes as `dtrain generate --temperature 0`.
. "$(dirname "$0")/lib.sh"
T="$BIN/dtrain"
PY=/usr/bin/python3
$PY -c "import torch" 2>/dev/null || fail "/usr/bin/python3 cannot import torch (scripts/setup.sh installs python3-torch)"
f=/usr/share/games/fortunes/computers # prose (not ascii art), so greedy bytes are not all spaces
[ -f "$f" ] || f=$(ls /usr/share/games/fortunes/* | grep -v '\.' | head -n 1)
head -c 60000 "$f" >"$WORK/text.txt"
"$T" train --config configs/gpt-mini.json --set layers=2 --set dim=32 --set heads=2 --set context=16 \
    --set batch_size=8 --set steps=100 --set lr=0.01 --set log_interval=10 --set eval_batches=2 --set threads=1 \
    --set data_path="$WORK/text.txt" --set checkpoint_dir="$WORK/gpt" >"$WORK/train.out" 2>&1 || { cat "$WORK/train.out"; fail "gpt training"; }
$PY scripts/dtrain_to_torch.py "$WORK/gpt" --eval-text "$WORK/text.txt" --greedy "The " 24 >"$WORK/torch.out" 2>&1 ||
    { cat "$WORK/torch.out"; fail "dtrain_to_torch.py could not load the gpt checkpoint"; }
cat "$WORK/torch.out"
expect_grep "$WORK/torch.out" "loaded .*/step-00000100 \(step 100, dtrain [0-9.]+\): gpt with [0-9]+ parameters, load_state_dict\(strict=True\) ok"
"$T" eval "$WORK/gpt" >"$WORK/eval.out" 2>&1 || { cat "$WORK/eval.out"; fail "dtrain eval"; }
"$T" generate "$WORK/gpt" --prompt "The " --tokens 24 --temperature 0 >"$WORK/gen.out" 2>/dev/null || fail "dtrain generate"
ours=$(sed -n 's/^eval: \([0-9]*\) tokens, loss \([0-9.]*\),.*/\1 \2/p' "$WORK/eval.out")
theirs=$(sed -n 's/^eval: \([0-9]*\) tokens, loss \([0-9.]*\)$/\1 \2/p' "$WORK/torch.out")
[ -n "$ours" ] && [ -n "$theirs" ] || { cat "$WORK/eval.out"; fail "no eval line to compare"; }
python3 -c "
a, b = '$ours'.split(), '$theirs'.split()
assert a[0] == b[0], f'dtrain scored {a[0]} tokens, torch {b[0]}'
assert abs(float(a[1]) - float(b[1])) < 2e-4, f'held-out loss: dtrain {a[1]}, torch {b[1]}'
print(f'held-out loss over {a[0]} tokens: dtrain {a[1]}, torch {b[1]}')" || fail "the losses differ"
[ "greedy: $(head -c 28 "$WORK/gen.out" | tail -c 24)" = "$(grep -a '^greedy: ' "$WORK/torch.out")" ] ||
    { cat "$WORK/gen.out"; fail "greedy bytes differ between dtrain and torch"; }
# the metadata
$PY - "$WORK/gpt" <<'PY' || fail "safetensors __metadata__"
import glob, json, struct, sys
path = sorted(glob.glob(sys.argv[1] + "/step-*/model.safetensors"))[-1]
raw = open(path, "rb").read()
meta = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])["__metadata__"]
assert all(isinstance(v, str) for v in meta.values()), meta
model = json.loads(meta["model"])
assert model == {"model": "gpt", "vocab": 256, "context": 16, "layers": 2, "heads": 2, "dim": 32}, model
assert meta["step"] == "100" and meta["dtrain_version"] and meta["format"] == "pt", meta
print("metadata:", meta)
PY
# the mlp
"$T" train --config configs/mlp.json --set 'mlp_sizes=[784,32,16,10]' --set steps=5 --set eval_batches=1 --set threads=1 \
    --set checkpoint_dir="$WORK/mlp" >/dev/null 2>&1 || fail "mlp training"
$PY scripts/dtrain_to_torch.py "$WORK/mlp/step-00000005" --save "$WORK/mlp.pt" >"$WORK/mlp.out" 2>&1 || { cat "$WORK/mlp.out"; fail "mlp load"; }
expect_grep "$WORK/mlp.out" "mlp with 25818 parameters, load_state_dict\(strict=True\) ok"
[ -s "$WORK/mlp.pt" ] || fail "--save wrote nothing"
echo ok
