"""The sparse text classifier's pieces against PyTorch, through libdtrain
loaded with ctypes.

1. EmbeddingBag (mean): forward and the table's gradient against
   torch.nn.EmbeddingBag(mode="mean") with ids + offsets, on random bags
   (empty ones and repeated ids included); the touched rows are the bags'
   unique ids.
2. textclf (EmbeddingBag + Linear) on fortunes batches: loss and every
   gradient for 5 Adagrad steps, and the weights after them, against a
   PyTorch model of the same shape from dtrain's initial weights with
   torch.optim.Adagrad.  dtrain's update goes through
   dt_params_optimizer_step, so the table is updated at the touched rows
   only (the rows-only path), torch's densely.
3. Adagrad alone against torch.optim.Adagrad with lr_decay, weight_decay and
   initial_accumulator_value set, and with its defaults.

    /usr/bin/python3 tests/textclf_torch_check.py build/lib/libdtrain.so
"""
import ctypes as C
import sys

import torch

lib = C.CDLL(sys.argv[1])
torch.set_num_threads(1)
torch.manual_seed(0)
F32P = C.POINTER(C.c_float)


class Tensor(C.Structure):
    _fields_ = [("data", F32P), ("ndim", C.c_int), ("shape", C.c_int64 * 4)]


class Key(C.Structure):
    _fields_ = [("seed", C.c_uint64), ("step", C.c_uint64), ("micro", C.c_uint32), ("group", C.c_uint32)]


class ArenaMark(C.Structure):
    _fields_ = [("chunk", C.c_void_p), ("used", C.c_size_t)]


class Ctx(C.Structure):  # dt_ctx, every field in order (the library reads and copies the whole struct)
    _fields_ = [("arena", C.c_void_p), ("params", C.c_void_p), ("key", Key), ("training", C.c_bool),
                ("saved", C.c_void_p), ("input", C.c_void_p), ("compute", C.c_int), ("ops", C.c_void_p),
                ("input_dev", C.c_void_p), ("row0", C.c_int64), ("reclaim", C.c_bool), ("keep", ArenaMark)]


FWD = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(Ctx), C.POINTER(Tensor), C.POINTER(Tensor))
BWD = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(Ctx), C.POINTER(Tensor), C.POINTER(Tensor), C.c_bool)


class Ops(C.Structure):
    _fields_ = [("kind", C.c_char_p), ("forward", FWD), ("backward", BWD), ("init", C.c_void_p),
                ("destroy", C.c_void_p)]


class Layer(C.Structure):
    _fields_ = [("ops", C.POINTER(Ops)), ("name", C.c_char * 64)]


class TextclfConfig(C.Structure):
    _fields_ = [("buckets", C.c_int64), ("dim", C.c_int64), ("classes", C.c_int64)]


class Fortunes(C.Structure):
    _fields_ = [("count", C.c_int64), ("classes", C.c_int), ("names", C.c_void_p), ("text", C.c_void_p),
                ("start", C.POINTER(C.c_int64)), ("label", C.POINTER(C.c_int32)),
                ("split", C.POINTER(C.c_int64) * 2), ("split_count", C.c_int64 * 2)]


class Adagrad(C.Structure):
    _fields_ = [("lr_decay", C.c_float), ("weight_decay", C.c_float), ("initial_accumulator_value", C.c_float),
                ("eps", C.c_float)]


for f in ("dt_params_values", "dt_params_grads", "dt_param_value", "dt_param_grad"):
    getattr(lib, f).restype = F32P
lib.dt_params_numel.restype = C.c_int64
lib.dt_model_params.restype = C.c_void_p
lib.dt_last_error.restype = C.c_char_p
lib.dt_param_touched_rows.restype = C.c_int64
lib.dt_params_optimizer_step.argtypes = [C.c_void_p, C.c_void_p, C.c_float, C.c_float, C.c_float, F32P]
lib.dt_optimizer_step.argtypes = [C.c_void_p, F32P, F32P, C.c_int64, C.c_float]
lib.dt_fortunes_batch.argtypes = [C.POINTER(Fortunes), C.c_int, C.POINTER(C.c_int64), C.c_int64, C.c_int64, C.c_int64,
                                  F32P, C.POINTER(C.c_int32)]
failures = []


def ok(status, what):
    if status != 0:
        sys.exit(f"{what}: {lib.dt_last_error().decode()}")


def rel(a, b):
    return (a - b).norm().item() / max(b.norm().item(), 1e-30)


def check(what, err, bar):
    print(f"{what}: relative difference {err:.2e} (bar {bar:g})", flush=True)
    if not err <= bar:
        failures.append(what)


def floats(ptr, n):
    return torch.tensor(ptr[:n], dtype=torch.float32)


def to_c(t):
    t = t.contiguous().float()
    return (C.c_float * t.numel())(*t.flatten().tolist())


def padded_to_torch(x, width):
    """dtrain's -1-padded bags [n, width] -> torch's ids and offsets."""
    ids, offsets = [], []
    for b in range(len(x) // width):
        offsets.append(len(ids))
        ids += [int(v) for v in x[b * width:(b + 1) * width] if v >= 0]
    return torch.tensor(ids, dtype=torch.long), torch.tensor(offsets, dtype=torch.long)


def touched(params, index):
    rows = C.POINTER(C.c_int64)()
    n = lib.dt_param_touched_rows(params, index, C.byref(rows))
    return [rows[i] for i in range(n)] if rows else None


# ---- 1. EmbeddingBag ----
ROWS, DIM, BAGS, WIDTH = 50, 7, 9, 12
params, layer, arena = C.c_void_p(), C.c_void_p(), C.c_void_p()
ok(lib.dt_params_create(C.byref(params)), "params")
ok(lib.dt_embedding_bag_create(params, b"bag", C.c_int64(ROWS), C.c_int64(DIM), C.byref(layer)), "embedding_bag")
ok(lib.dt_params_finalize(params), "finalize")
ok(lib.dt_arena_create(C.byref(arena)), "arena")
table = torch.randn(ROWS, DIM)
C.memmove(lib.dt_params_values(params), to_c(table), ROWS * DIM * 4)
bags = [torch.randint(0, ROWS, (int(k),)).tolist() for k in torch.randint(0, WIDTH + 1, (BAGS,))]
bags[3] = []                        # an empty bag
bags[5] = [7, 7, 7, 2]              # repeated ids
flat = [i for b in bags for i in b]
offs = []
for b in bags:
    offs.append(sum(len(c) for c in bags[:len(offs)]))
x = (C.c_float * (BAGS * WIDTH))()
ok(lib.dt_bags_from_offsets((C.c_int64 * len(flat))(*flat), C.c_int64(len(flat)), (C.c_int64 * BAGS)(*offs),
                            C.c_int64(BAGS), C.c_int64(WIDTH), x), "bags_from_offsets")
ops = Layer.from_address(layer.value).ops.contents
ctx = Ctx(arena=arena, params=params, training=True)
xin, y, dx = Tensor(x, 2, (C.c_int64 * 4)(BAGS, WIDTH)), Tensor(), Tensor()
ok(ops.forward(layer, C.byref(ctx), C.byref(xin), C.byref(y)), "bag forward")
ref = torch.nn.EmbeddingBag(ROWS, DIM, mode="mean")
ref.weight.data.copy_(table)
ids, offsets = torch.tensor(flat, dtype=torch.long), torch.tensor(offs, dtype=torch.long)
out = ref(ids, offsets)
check("EmbeddingBag forward", rel(floats(y.data, BAGS * DIM).view(BAGS, DIM), out.detach()), 1e-6)
dy = torch.randn(BAGS, DIM)
dy_c = to_c(dy)
ok(ops.backward(layer, C.byref(ctx), C.byref(Tensor(dy_c, 2, (C.c_int64 * 4)(BAGS, DIM))), C.byref(dx), False),
   "bag backward")
out.backward(dy)
check("EmbeddingBag table gradient", rel(floats(lib.dt_params_grads(params), ROWS * DIM).view(ROWS, DIM),
                                         ref.weight.grad), 1e-6)
if touched(params, 0) != sorted(set(flat)):
    failures.append("EmbeddingBag touched rows")
print(f"EmbeddingBag touched rows: {len(touched(params, 0))} = the bags' unique ids", flush=True)
lib.dt_arena_destroy(arena)
lib.dt_layer_destroy(layer)
lib.dt_params_destroy(params)

# ---- 2. textclf on fortunes batches, 5 Adagrad steps ----
BUCKETS, DIM, CLASSES, WIDTH, BATCH, STEPS, LR = 1 << 14, 16, 43, 64, 32, 5, 0.3
fortunes = Fortunes()
if lib.dt_fortunes_load(b"/usr/share/games/fortunes", C.byref(fortunes)) != 0:
    sys.exit(f"fortunes: {lib.dt_last_error().decode()} (scripts/setup.sh --test installs them)")
model, opt = C.c_void_p(), C.c_void_p()
ok(lib.dt_textclf_create(C.byref(TextclfConfig(BUCKETS, DIM, CLASSES)), C.byref(model)), "textclf")
lib.dt_model_init(model, C.c_uint64(7))
params = C.c_void_p(lib.dt_model_params(model))
numel = lib.dt_params_numel(params)
ok(lib.dt_adagrad_create(C.byref(Adagrad(0, 0, 0, 1e-10)), C.c_int64(numel), C.byref(opt)), "adagrad")
tm = torch.nn.ModuleDict({"embedding": torch.nn.EmbeddingBag(BUCKETS, DIM, mode="mean"),
                          "fc": torch.nn.Linear(DIM, CLASSES)})
with torch.no_grad():
    tm["embedding"].weight.copy_(floats(lib.dt_param_value(params, 0), BUCKETS * DIM).view(BUCKETS, DIM))
    tm["fc"].weight.copy_(floats(lib.dt_param_value(params, 1), CLASSES * DIM).view(CLASSES, DIM))
    tm["fc"].bias.copy_(floats(lib.dt_param_value(params, 2), CLASSES))
topt = torch.optim.Adagrad(tm.parameters(), lr=LR, eps=1e-10, foreach=False)
ok(lib.dt_arena_create(C.byref(arena)), "arena")
perm = torch.randperm(fortunes.split_count[0])
worst = {"loss": 0.0, "embedding.weight": 0.0, "fc.weight": 0.0, "fc.bias": 0.0}
for step in range(STEPS):
    idx = perm[step * BATCH:(step + 1) * BATCH].tolist()
    xb, yb = (C.c_float * (BATCH * WIDTH))(), (C.c_int32 * BATCH)()
    lib.dt_fortunes_batch(C.byref(fortunes), 0, (C.c_int64 * BATCH)(*idx), BATCH, BUCKETS, WIDTH, xb, yb)
    lib.dt_arena_reset(arena)
    lib.dt_params_zero_grads(params)
    ctx = Ctx(arena=arena, training=True)
    xin, out = Tensor(xb, 2, (C.c_int64 * 4)(BATCH, WIDTH)), Tensor()
    ok(lib.dt_model_forward(model, C.byref(ctx), C.byref(xin), C.byref(out)), "forward")
    lib.dt_arena_alloc.restype = F32P
    g = Tensor(lib.dt_arena_alloc(arena, C.c_int64(BATCH * CLASSES)), 2, (C.c_int64 * 4)(BATCH, CLASSES))
    loss = C.c_float()
    ok(lib.dt_model_loss(model, C.byref(out), yb, C.byref(loss), C.byref(g)), "loss")
    ok(lib.dt_model_backward(model, C.byref(ctx), C.byref(g)), "backward")
    ids, offsets = padded_to_torch(xb[:], WIDTH)
    if touched(params, 0) != sorted(set(ids.tolist())):
        failures.append(f"textclf step {step}: touched rows")
    topt.zero_grad()
    tloss = torch.nn.functional.cross_entropy(tm["fc"](tm["embedding"](ids, offsets)),
                                              torch.tensor(yb[:], dtype=torch.long))
    tloss.backward()
    worst["loss"] = max(worst["loss"], abs(loss.value - tloss.item()) / abs(tloss.item()))
    for i, (name, shape) in enumerate([("embedding.weight", (BUCKETS, DIM)), ("fc.weight", (CLASSES, DIM)),
                                       ("fc.bias", (CLASSES,))]):
        mod, attr = name.split(".")
        ours = floats(lib.dt_param_grad(params, i), shape[0] * (shape[1] if len(shape) > 1 else 1)).view(shape)
        worst[name] = max(worst[name], rel(ours, getattr(tm[mod], attr).grad))
    norm = C.c_float()
    ok(lib.dt_params_optimizer_step(params, opt, LR, 1.0, 0.0, C.byref(norm)), "update")
    topt.step()
    print(f"textclf step {step + 1}: loss dtrain {loss.value:.6f} torch {tloss.item():.6f}, "
          f"{len(touched(params, 0))} table rows touched", flush=True)
check(f"textclf loss over {STEPS} steps", worst["loss"], 1e-5)
for name in ("embedding.weight", "fc.weight", "fc.bias"):
    check(f"textclf gradient of {name} over {STEPS} steps", worst[name], 1e-5)
final = torch.cat([floats(lib.dt_params_values(params), numel)])
tfinal = torch.cat([tm["embedding"].weight.detach().flatten(), tm["fc"].weight.detach().flatten(),
                    tm["fc"].bias.detach()])
check(f"textclf weights after {STEPS} Adagrad steps (rows-only update against torch's dense one)",
      rel(final, tfinal), 1e-5)
lib.dt_arena_destroy(arena)
lib.dt_optimizer_destroy(opt)
lib.dt_model_destroy(model)
lib.dt_fortunes_free(C.byref(fortunes))

# ---- 3. Adagrad alone ----
N = 1000
p0 = torch.randn(N)
grads = [torch.randn(N) for _ in range(6)]
for cfg in (dict(lr_decay=0.05, weight_decay=0.01, initial_accumulator_value=0.1), dict()):
    full = dict(lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10)
    full.update(cfg)
    o = C.c_void_p()
    ok(lib.dt_adagrad_create(C.byref(Adagrad(full["lr_decay"], full["weight_decay"], full["initial_accumulator_value"],
                                             full["eps"])), C.c_int64(N), C.byref(o)), "adagrad")
    p = to_c(p0)
    for gr in grads:
        ok(lib.dt_optimizer_step(o, p, to_c(gr), N, 0.1), "adagrad step")
    lib.dt_optimizer_destroy(o)
    t = p0.clone().requires_grad_(True)
    topt = torch.optim.Adagrad([t], lr=0.1, foreach=False, **full)
    for gr in grads:
        t.grad = gr.clone()
        topt.step()
    ours = floats(p, N)
    err = ((ours - t.detach()).abs() / (1e-6 + 1e-5 * t.detach().abs())).max().item()
    check(f"Adagrad {cfg or 'defaults'} over 6 steps, in units of 1e-6 + 1e-5 |x|", err, 1.0)

if failures:
    sys.exit("differ from PyTorch: " + "; ".join(failures))
print("ok")
