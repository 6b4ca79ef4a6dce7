/* The trainer's device lines: the run (dt_strategy_create) moved the model
 * and the optimizer to the device; the start line names it, with its
 * memory, and the end line says the most its allocator held.  One rank per
 * GPU process; several ranks on one host share GPUs by DT_LOCAL_RANK
 * (dt_device_open).  Several ranks: what carries the device's buffers
 * (DT_DEVICE_BACKEND, dtrain_device_comm): NCCL attached to the job's
 * communicator when every rank has a GPU of its own (the job's host
 * traffic stays on the native backend), else the job's communicator, which
 * reads them between the ranks of one host by IPC (DT_DEVICE_IPC) and
 * stages them through host memory otherwise; the start line says which and
 * why. */
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

/* What dtrain_device_comm chose, for the start line: "" for one rank. */
static char comm_note[320];

/* Every rank of job: its host has at least as many GPUs as ranks, and this
 * build has NCCL (one collective; the same answer on every rank). */
static bool gpus_of_their_own(dt_comm *job, int *gpus)
{
    *gpus = dt_device_count("cuda");
    int32_t mine = dt_comm_backend_built("nccl") && *gpus >= dt_comm_local_size(job), all = 0;
    return dt_allreduce(&mine, &all, 1, DT_I32, DT_MIN, job) == DT_OK && all;
}

int dtrain_device_comm(const dtrain_config *c, dt_comm *job, bool nccl_asked)
{
    int world = dt_comm_size(job), local = dt_comm_local_size(job), gpus = 0;
    comm_note[0] = 0;
    if (!strcmp(c->device, "cpu") || world <= 1)
        return 0;
    const char *env = getenv("DT_DEVICE_BACKEND");
    const char *want = nccl_asked ? "nccl" : env && *env ? env : "auto";
    if (strcmp(want, "auto") && strcmp(want, "nccl") && strcmp(want, "native") && strcmp(want, "none")) {
        fprintf(stderr, "dtrain: DT_DEVICE_BACKEND='%s': expected auto, nccl, native or none\n", want);
        return 2;
    }
    bool cuda = !strncmp(c->device, "cuda", 4);
    const char *job_backend = dt_comm_device_backend(job);
    if (strcmp(job_backend, "native")) { /* MPI: it refuses device buffers itself, naming them */
        snprintf(comm_note, sizeof comm_note, "; communication: the %s backend (DT_BACKEND=%s)", job_backend,
                 job_backend);
        return 0;
    }
    if (!strcmp(want, "auto"))
        want = cuda && gpus_of_their_own(job, &gpus) ? "nccl" : "none";
    if (!strcmp(want, "none")) {
        snprintf(comm_note, sizeof comm_note,
                 "; communication: the native backend, device buffers %s (%d rank%s on this host%s%s)",
                 local == world && ipc_on(c->device) ? "read by IPC between this host's ranks"
                                                     : "staged through host memory",
                 local, local == 1 ? "" : "s",
                 !cuda ? "" : !dt_comm_backend_built("nccl") ? "; this build has no NCCL"
                 : env && !strcmp(env, "none") ? "; DT_DEVICE_BACKEND=none"
                 : "; NCCL when every rank has a GPU of its own",
                 cuda && local > gpus && gpus > 0 ? ", sharing the GPUs" : "");
        return 0;
    }
    if (dt_comm_attach_device(job, want) != DT_OK) {
        fprintf(stderr, "dtrain: rank %d: device buffers on %s%s: %s\n", dt_comm_rank(job), want,
                nccl_asked ? " (DT_BACKEND=nccl)" : "", dt_last_error());
        return 1;
    }
    if (!strcmp(want, "nccl"))
        snprintf(comm_note, sizeof comm_note, "; communication: NCCL for the device's buffers (every rank has a GPU "
                 "of its own%s), the native backend for the host's", nccl_asked ? ", DT_BACKEND=nccl" : "");
    else
        snprintf(comm_note, sizeof comm_note, "; communication: device buffers on a native communicator of their "
                 "own, %s (DT_DEVICE_BACKEND=native)",
                 local == world && ipc_on(c->device) ? "read by IPC between this host's ranks"
                                                     : "staged through host memory");
    return 0;
}

void dtrain_device_line(const dtrain_config *c)
{
    const dt_device *dev = NULL;
    char what[384] = "";
    const char *comm = comm_note;
    size_t total = 0, free_b = 0;
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
    dt_device_profile_print(stdout, 30); /* DT_KERNEL_PROFILE=1 */
}
