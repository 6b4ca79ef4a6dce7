"""The textclf model in PyTorch: nn.EmbeddingBag(mode="mean") + nn.Linear,
torch.optim.Adagrad, on the fortunes examples with dtrain's features (read
through libdtrain with ctypes: dt_fortunes_load and dt_fortunes_batch, so
the hashing is dtrain's own), for the speed comparison in bench/RESULTS.md.

    torch_textclf.py LIBDTRAIN THREADS STEPS BATCH LR dense|sparse [BUCKETS DIM WIDTH]

dense: EmbeddingBag's default dense gradient (every step updates the whole
table); sparse: sparse=True, whose gradient and Adagrad update cover the
batch's rows.  Features of every example are computed before the clock
starts (dtrain computes them on its prefetch thread while training).
Prints "examples/s R held-out accuracy A" (R over the steps after the first
10, A after all of them on the whole held-out split).
"""
import ctypes as C
import sys
import time

import torch

lib_path, threads, steps, batch, lr, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), \
    float(sys.argv[5]), sys.argv[6]
buckets, dim, width = (int(v) for v in sys.argv[7:10]) if len(sys.argv) > 7 else (1 << 20, 32, 256)
torch.set_num_threads(threads)
torch.manual_seed(1)
lib = C.CDLL(lib_path)
lib.dt_last_error.restype = C.c_char_p


class Fortunes(C.Structure):
    _fields_ = [("count", C.c_int64), ("classes", C.c_int), ("names", C.c_void_p), ("text", C.c_void_p),
                ("start", C.POINTER(C.c_int64)), ("label", C.POINTER(C.c_int32)),
                ("split", C.POINTER(C.c_int64) * 2), ("split_count", C.c_int64 * 2)]


f = Fortunes()
if lib.dt_fortunes_load(b"/usr/share/games/fortunes", C.byref(f)) != 0:
    sys.exit(lib.dt_last_error().decode())


def features(split):
    n = f.split_count[split]
    x, y = (C.c_float * (n * width))(), (C.c_int32 * n)()
    lib.dt_fortunes_batch(C.byref(f), split, (C.c_int64 * n)(*range(n)), C.c_int64(n), C.c_int64(buckets),
                          C.c_int64(width), x, y)
    xt = torch.frombuffer(x, dtype=torch.float32).view(n, width).long()
    return xt, torch.frombuffer(y, dtype=torch.int32).long()


def bags(x):  # -1-padded rows -> ids and offsets
    mask = x >= 0
    return x[mask], torch.cat([torch.zeros(1, dtype=torch.long), mask.sum(1).cumsum(0)[:-1]])


train_x, train_y = features(0)
test_x, test_y = features(1)
emb = torch.nn.EmbeddingBag(buckets, dim, mode="mean", sparse=(mode == "sparse"))
fc = torch.nn.Linear(dim, f.classes)
with torch.no_grad():
    emb.weight.uniform_(-1.0 / dim, 1.0 / dim)  # dtrain's (fastText's) initialisation
opt = torch.optim.Adagrad(list(emb.parameters()) + list(fc.parameters()), lr=lr, eps=1e-10)
perm, at = torch.randperm(len(train_y)), 0
t0 = None
for step in range(steps):
    if step == 10:
        t0 = time.perf_counter()
    if at + batch > len(perm):
        perm, at = torch.randperm(len(train_y)), 0
    idx = perm[at:at + batch]
    at += batch
    ids, offsets = bags(train_x[idx])
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(fc(emb(ids, offsets)), train_y[idx])
    loss.backward()
    opt.step()
rate = (steps - 10) * batch / (time.perf_counter() - t0)
with torch.no_grad():
    ids, offsets = bags(test_x)
    acc = (fc(emb(ids, offsets)).argmax(1) == test_y).float().mean().item()
print(f"examples/s {rate:.1f} held-out accuracy {100 * acc:.2f} loss {loss.item():.4f}")
lib.dt_fortunes_free(C.byref(f))
