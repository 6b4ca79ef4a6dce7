#!/usr/bin/env bash
# The sparse text classifier against PyTorch (tests/textclf_torch_check.py,
# libdtrain through ctypes): EmbeddingBag (mean) forward and gradient against
# torch.nn.EmbeddingBag, textclf's loss and gradients over 5 Adagrad steps
# on fortunes batches (dtrain updating the touched rows only) and Adagrad
# against torch.optim.Adagrad.
. "$(dirname "$0")/lib.sh"
LIB=$(dirname "$BIN")/lib/libdtrain.so
/usr/bin/python3 -c "import torch" 2>/dev/null || fail "/usr/bin/python3 cannot import torch (scripts/setup.sh installs python3-torch)"
if ldd "$LIB" | grep -qE 'lib(a|t)san'; then
    echo "the sanitizer build's libdtrain cannot be loaded into Python; the plain build runs this test"
    exit 77
fi
/usr/bin/python3 tests/textclf_torch_check.py "$LIB" || fail "the text classifier differs from PyTorch"
