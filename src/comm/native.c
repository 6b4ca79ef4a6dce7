/* The native backend's table: src/comm's algorithms over src/transport. */
#include <string.h>

#include "base/env.h"
#include "base/status.h"
#include "comm/backend.h"

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
    dt__fail(DT_ERR_INVALID, "DT_BACKEND='%s': expected native or mpi", name);
#else
    if (!strcmp(name, "mpi"))
        dt__fail(DT_ERR_INVALID, "DT_BACKEND='mpi': this build has no MPI backend: install libopenmpi-dev and "
                                 "rebuild (expected native)");
    else
        dt__fail(DT_ERR_INVALID, "DT_BACKEND='%s': this build has the native backend only (expected native)", name);
#endif
    return NULL;
}
