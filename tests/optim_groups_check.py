"""Parameter groups against torch.optim.AdamW and SGD.

libdtrain (through ctypes) builds a GPT's parameter registry, derives the
weight-decay groups from its names (dt_decay_groups: no decay on biases,
LayerNorm weights and the wte/wpe embeddings) and runs 5 optimizer steps on
random gradients; PyTorch runs its optimizer with param_groups made by the
same rule written here from nanoGPT's, from the same values and gradients.
The parameters must agree to float rounding (1e-6 + 1e-5 |x|), and the no-decay tensors must
differ from a run that decays everything (the groups have an effect).

    /usr/bin/python3 tests/optim_groups_check.py build/lib/libdtrain.so
"""
import ctypes as C
import sys

import torch

lib = C.CDLL(sys.argv[1])


class TpGroup(C.Structure):  # dt_tp_group: zeroed (size 0) means no tensor parallelism
    _fields_ = [("rank", C.c_int), ("size", C.c_int), ("user", C.c_void_p)] + \
               [(name, C.c_void_p) for name in ("allreduce_sum", "allreduce_sum_f64", "allreduce_max_f64",
                                                "allgather", "reduce_scatter_sum", "iallreduce_sum",
                                                "iallgather", "ireduce_scatter_sum", "wait")]


class GptConfig(C.Structure):
    _fields_ = [("vocab", C.c_int64), ("context", C.c_int64), ("layers", C.c_int64), ("heads", C.c_int64),
                ("dim", C.c_int64), ("dropout", C.c_float), ("tp", TpGroup),
                ("sequence_parallel", C.c_bool)]


class ParamInfo(C.Structure):
    _fields_ = [("name", C.c_char * 96), ("offset", C.c_int64), ("numel", C.c_int64), ("ndim", C.c_int),
                ("shape", C.c_int64 * 4), ("parts", C.c_int), ("part", C.c_int), ("split_dim", C.c_int),
                ("groups", C.c_int), ("whole", C.c_int64 * 4), ("tp_partial", C.c_bool)]


class Group(C.Structure):
    _fields_ = [("offset", C.c_int64), ("numel", C.c_int64), ("weight_decay", C.c_float)]


class AdamW(C.Structure):
    _fields_ = [("beta1", C.c_float), ("beta2", C.c_float), ("eps", C.c_float), ("weight_decay", C.c_float)]


class Sgd(C.Structure):
    _fields_ = [("momentum", C.c_float), ("weight_decay", C.c_float), ("nesterov", C.c_bool)]


lib.dt_params_info.restype = C.POINTER(ParamInfo)
lib.dt_model_params.restype = C.c_void_p
lib.dt_params_numel.restype = C.c_int64
lib.dt_params_values.restype = C.POINTER(C.c_float)
lib.dt_last_error.restype = C.c_char_p
lib.dt_decay_groups.argtypes = [C.c_void_p, C.c_char_p, C.c_float, C.c_int64, C.c_int64,
                                C.POINTER(C.POINTER(Group)), C.POINTER(C.c_int)]
lib.dt_optimizer_step.argtypes = [C.c_void_p, C.POINTER(C.c_float), C.POINTER(C.c_float), C.c_int64, C.c_float]


def ok(status, what):
    if status != 0:
        sys.exit(f"{what}: {lib.dt_last_error().decode()}")


model = C.c_void_p()
ok(lib.dt_gpt_create(C.byref(GptConfig(17, 8, 2, 2, 16, 0.0)), C.byref(model)), "gpt_create")
lib.dt_model_init(model, C.c_uint64(1))
params = C.c_void_p(lib.dt_model_params(model))
numel = lib.dt_params_numel(params)
infos = [lib.dt_params_info(params, i).contents for i in range(lib.dt_params_count(params))]
flat0 = torch.tensor(lib.dt_params_values(params)[:numel])
torch.manual_seed(0)
grads = [torch.randn(numel) for _ in range(5)]


def dtrain_run(kind, wd, patterns):
    cfg = AdamW(0.9, 0.95, 1e-8, wd) if kind == "adamw" else Sgd(0.9, wd, False)
    opt = C.c_void_p()
    ok((lib.dt_adamw_create if kind == "adamw" else lib.dt_sgd_create)(C.byref(cfg), C.c_int64(numel), C.byref(opt)),
       "optimizer")
    if patterns is not None:
        groups, n = C.POINTER(Group)(), C.c_int()
        ok(lib.dt_decay_groups(params, patterns, wd, 0, numel, C.byref(groups), C.byref(n)), "decay_groups")
        ok(lib.dt_optimizer_set_groups(opt, groups, n), "set_groups")
    p = (C.c_float * numel)(*flat0.tolist())
    for g in grads:
        gb = (C.c_float * numel)(*g.tolist())
        ok(lib.dt_optimizer_step(opt, p, gb, numel, C.c_float(0.05)), "step")
    lib.dt_optimizer_destroy(opt)
    return torch.tensor(p[:])


def no_decay(info):  # nanoGPT's rule, plus its embeddings
    name = info.name.decode()
    return info.ndim < 2 or "wte" in name or "wpe" in name


def torch_run(kind, wd):
    tensors = [flat0[i.offset:i.offset + i.numel].clone().requires_grad_(True) for i in infos]
    decay = [t for t, i in zip(tensors, infos) if not no_decay(i)]
    plain = [t for t, i in zip(tensors, infos) if no_decay(i)]
    groups = [{"params": decay, "weight_decay": wd}, {"params": plain, "weight_decay": 0.0}]
    if kind == "adamw":
        opt = torch.optim.AdamW(groups, lr=0.05, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    else:
        opt = torch.optim.SGD(groups, lr=0.05, momentum=0.9, foreach=False)
    for g in grads:
        for t, i in zip(tensors, infos):
            t.grad = g[i.offset:i.offset + i.numel].clone()
        opt.step()
    return torch.cat([t.detach() for t in tensors])


failed = False
for kind in ("adamw", "sgd"):
    ours, ref = dtrain_run(kind, 0.1, b"*wte*,*wpe*"), torch_run(kind, 0.1)
    err = ((ours - ref).abs() / (1e-6 + 1e-5 * ref.abs())).max().item()  # <= 1: within float rounding
    everything = dtrain_run(kind, 0.1, None)
    nd = [i for i in infos if no_decay(i)]
    changed = sum(int(not torch.equal(everything[i.offset:i.offset + i.numel], ours[i.offset:i.offset + i.numel]))
                  for i in nd)
    print(f"{kind}: {len(infos)} tensors, {len(nd)} without decay; difference to torch {err:.2f} of the tolerance (1e-6 + 1e-5 |x|); "
          f"{changed} of {len(nd)} no-decay tensors differ from decaying everything", flush=True)
    if not err <= 1 or changed != len(nd):
        failed = True
lib.dt_model_destroy(model)
sys.exit("parameter groups differ from PyTorch" if failed else 0)
