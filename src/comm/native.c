/* The native backend's table: src/comm's algorithms over src/transport. */
#include <string.h>

#include "base/env.h"
#include "base/status.h"
#include "comm/backend.h"

/* The backends this build has, for the messages. */
#if defined DT_HAVE_MPI && defined DT_NCCL_IN_MODULE
#define BUILT_NAMES "native, mpi or nccl"
#elif defined DT_HAVE_MPI
#define BUILT_NAMES "native or mpi"
#elif defined DT_NCCL_IN_MODULE
#define BUILT_NAMES "native or nccl"
#else
#define BUILT_NAMES "native"
#endif

const dt__backend dt__native_backend = {
    .name = "native",
    .barrier = dt__native_barrier,
    .broadcast = dt__native_broadcast,
    .reduce = dt__native_reduce,
    .allreduce = dt__native_allreduce,
    .reduce_scatter = dt__native_reduce_scatter,
    .allgather = dt__native_allgather,
    .gather = dt__native_gather,
    .scatter = dt__native_scatter,
    .alltoall = dt__native_alltoall,
    .allreduce_half = dt__native_allreduce_half,
    .isend = dt__native_isend,
    .irecv = dt__native_irecv,
    .wait = dt__native_wait,
    .test = dt__native_test,
    .waitany = dt__native_waitany,
    .cancel = dt__native_cancel,
    .device_buffers = DT__DEVBUF_STAGE, /* through host memory (stage.c) */
};

const dt__backend *dt__backend_from_env(void)
{
    const char *name = dt__env_str("DT_BACKEND");
    if (!name || !strcmp(name, "native"))
        return &dt__native_backend;
#ifdef DT_HAVE_MPI
    if (!strcmp(name, "mpi"))
        return &dt__mpi_backend;
#else
    if (!strcmp(name, "mpi")) {
        dt__fail(DT_ERR_INVALID, "DT_BACKEND='mpi': this build has no MPI backend: install libopenmpi-dev and "
                                 "rebuild (expected %s)", BUILT_NAMES);
        return NULL;
    }
#endif
#ifdef DT_NCCL_IN_MODULE
    if (!strcmp(name, "nccl"))
        return dt__nccl_backend_get(); /* (the CUDA module loaded now) */
#else
    if (!strcmp(name, "nccl")) {
        dt__fail(DT_ERR_INVALID, "DT_BACKEND='nccl': this build has no NCCL backend: build with the CUDA toolkit "
                                 "and NCCL (libnccl-dev; cmake -DDT_CUDA=ON, docs/gpu.md) (expected %s)", BUILT_NAMES);
        return NULL;
    }
#endif
#if defined DT_HAVE_MPI || defined DT_NCCL_IN_MODULE
    dt__fail(DT_ERR_INVALID, "DT_BACKEND='%s': expected %s", name, BUILT_NAMES);
#else
    dt__fail(DT_ERR_INVALID, "DT_BACKEND='%s': this build has the native backend only (expected native)", name);
#endif
    return NULL;
}

bool dt_comm_backend_built(const char *name)
{
    if (!name)
        return false;
#ifdef DT_HAVE_MPI
    if (!strcmp(name, "mpi"))
        return true;
#endif
#ifdef DT_NCCL_IN_MODULE
    if (!strcmp(name, "nccl"))
        return true;
#endif
    return !strcmp(name, "native");
}
