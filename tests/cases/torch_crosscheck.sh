#!/usr/bin/env bash
# dtrain against PyTorch (python3-torch from Debian, /usr/bin/python3): the same
# mlp and gpt-mini from dtrain's exported weights give the same loss and
# gradients (relative 1e-4) and the same losses over 20 AdamW steps (1e-3).
. "$(dirname "$0")/lib.sh"
/usr/bin/python3 -c "import torch" 2>/dev/null || fail "/usr/bin/python3 cannot import torch (scripts/setup.sh installs python3-torch)"
for model in mlp gpt-mini; do
    mkdir -p "$WORK/$model"
    "$BIN/torch_ref" $model "$WORK/$model" || fail "torch_ref $model"
    /usr/bin/python3 tests/torch_crosscheck.py $model "$WORK/$model" || fail "$model differs from PyTorch"
done
echo ok
