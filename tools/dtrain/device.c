/* The trainer's device lines: the run (dt_strategy_create) moved the model
 * and the optimizer to the device; the start line names it, with its
 * memory, and the end line says the most its allocator held.  One rank per
 * GPU process; several ranks on one host share GPUs by DT_LOCAL_RANK
 * (dt_device_open).  Several ranks: the line also says which communication
 * backend carries the device's buffers, and why.  The trainer leaves
 * DT_BACKEND alone: the native backend (the default) reads device buffers
 * between the ranks of one host by IPC and stages them through host memory
 * otherwise, and works when ranks share a GPU; NCCL, which
 * refuses two ranks on one GPU, is chosen by DT_BACKEND=nccl (docs/gpu.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_cli.h"

/* Whether the native backend reads device buffers between the ranks of one
 * host by IPC (DT_DEVICE_IPC, src/comm/ipc.h): cuda unless 0, emu when 1. */
static bool ipc_on(const char *device)
{
    const char *v = getenv("DT_DEVICE_IPC");
    if (v && !strcmp(v, "0"))
        return false;
    if (!strcmp(device, "emu"))
        return v && !strcmp(v, "1");
    return !strncmp(device, "cuda", 4);
}

/* "" for one rank; else "; communication: ..." naming the backend and why. */
static void backend_note(const char *device, char *buf, size_t n)
{
    const char *world = getenv("DT_WORLD_SIZE"), *local = getenv("DT_LOCAL_WORLD_SIZE"), *b = getenv("DT_BACKEND");
    buf[0] = 0;
    if (!world || atoi(world) <= 1)
        return;
    bool one_host = local && atoi(local) == atoi(world);
    if (b && strcmp(b, "native"))
        snprintf(buf, n, "; communication: the %s backend (DT_BACKEND=%s)", b, b);
    else
        snprintf(buf, n, "; communication: the native backend, device buffers %s (%s rank%s "
                 "on this host%s; DT_BACKEND=nccl when every rank has a GPU of its own)",
                 one_host && ipc_on(device) ? "read by IPC between this host's ranks" : "staged through host memory",
                 local ? local : "?", local && atoi(local) == 1 ? "" : "s",
                 local && atoi(local) > 1 ? " may share a GPU" : "");
}

void dtrain_device_line(const dtrain_config *c)
{
    const dt_device *dev = NULL;
    char what[384] = "", comm[256];
    size_t total = 0, free_b = 0;
    backend_note(c->device, comm, sizeof comm);
    if (dt_device_open(c->device, &dev) != DT_OK || dt_device_describe(dev, what, sizeof what) != DT_OK)
        snprintf(what, sizeof what, "%s", c->device);
    else if (dt_device_memory(dev, &total, &free_b, NULL) == DT_OK) /* what the run starts with */
        snprintf(what + strlen(what), sizeof what - strlen(what), ", %s%.1f GiB free of %.1f GiB",
                 !strcmp(c->device, "emu") ? "host memory " : "", (double)free_b / 1073741824.0,
                 (double)total / 1073741824.0);
    const char *products = !strcmp(c->precision, "bf16") ? "bf16 (f32 sums)" : c->tf32 ? "TF32" : "f32";
    if (!strcmp(c->device, "emu"))
        dtrain_progress_line("device: %s; matrix products %s%s\n", what, products, comm);
    else
        dtrain_progress_line("device: %s (%s); matrix products %s on cuBLASLt, attention, LayerNorm, GELU, dropout, "
                             "cross-entropy and %s as dtrain's CUDA kernels%s\n",
                             what, c->device, products, c->optimizer, comm);
}

void dtrain_device_end_line(const dtrain_config *c)
{
    const dt_device *dev = NULL;
    size_t total = 0, free_b = 0, peak = 0;
    if (dt_device_open(c->device, &dev) != DT_OK || dt_device_is_host(dev) ||
        dt_device_memory(dev, &total, &free_b, &peak) != DT_OK)
        return;
    printf("device memory: at most %.1f MiB allocated at once on %s (the allocator's peak: weights, gradients, "
           "optimizer state, activations, batches), %.1f GiB free of %.1f GiB at the end\n",
           (double)peak / 1048576.0, c->device, (double)free_b / 1073741824.0, (double)total / 1073741824.0);
}
