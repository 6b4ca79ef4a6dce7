#!/usr/bin/env bash
# Weight-decay parameter groups (dt_decay_groups + dt_optimizer_set_groups)
# against torch.optim.AdamW and SGD with the same param_groups, through
# libdtrain loaded with ctypes (tests/optim_groups_check.py).
. "$(dirname "$0")/lib.sh"
LIB=$(dirname "$BIN")/lib/libdtrain.so
/usr/bin/python3 -c "import torch" 2>/dev/null || fail "/usr/bin/python3 cannot import torch (scripts/setup.sh installs python3-torch)"
if ldd "$LIB" | grep -qE 'lib(a|t)san'; then
    echo "the sanitizer build's libdtrain cannot be loaded into Python; the plain build runs this test"
    exit 77
fi
/usr/bin/python3 tests/optim_groups_check.py "$LIB" || fail "parameter groups differ from PyTorch"
