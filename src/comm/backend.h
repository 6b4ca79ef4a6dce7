/* The backend ops table: how a communicator's operations run.
 *
 * Every public call of dtrain/comm.h checks the arguments no backend can
 * judge differently (a NULL communicator or request), then calls its
 * communicator's table.  Today's code is the native backend (native.c): the
 * algorithms of src/comm over the engine of src/transport.  Another backend
 * (MPI: one MPI communicator per dt_comm, each operation the MPI call of
 * the same name; NCCL: an NCCL communicator and a stream per dt_comm, on
 * device buffers only) provides a table of its own and is chosen where a communicator is
 * made; what stays common is the layer above the table: argument checks,
 * nonblocking collectives on the communicator's progress thread
 * (nonblocking.c, which runs the blocking entries below), the communicator's
 * options and life cycle.
 *
 * Each entry has the public call's signature and contract (dtrain/comm.h):
 * the same validation, results and failure behaviour. */
#ifndef DT_COMM_BACKEND_H
#define DT_COMM_BACKEND_H

#include <stdbool.h>

#include "comm/launch_env.h"
#include "dtrain/comm.h"

typedef struct dt__backend {
    const char *name;
    dt_status (*barrier)(dt_comm *c);
    dt_status (*broadcast)(void *buf, size_t count, dt_dtype t, int root, dt_comm *c);
    dt_status (*reduce)(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, int root, dt_comm *c);
    dt_status (*allreduce)(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, dt_comm *c);
    dt_status (*reduce_scatter)(const void *send, void *recv, size_t recvcount, dt_dtype t, dt_redop op,
                                dt_comm *c);
    dt_status (*allgather)(const void *send, void *recv, size_t sendcount, dt_dtype t, dt_comm *c);
    dt_status (*gather)(const void *send, void *recv, size_t sendcount, dt_dtype t, int root, dt_comm *c);
    dt_status (*scatter)(const void *send, void *recv, size_t recvcount, dt_dtype t, int root, dt_comm *c);
    dt_status (*alltoall)(const void *send, void *recv, size_t count, dt_dtype t, dt_comm *c);
    dt_status (*allreduce_half)(const float *send, float *recv, size_t count, dt_dtype wire, dt_redop op,
                                dt_comm *c);
    /* Point to point: the request is the backend's (a nonblocking
     * collective's request never reaches wait and test here). */
    dt_status (*isend)(const void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c, dt_request **req);
    dt_status (*irecv)(void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c, dt_request **req);
    dt_status (*wait)(dt_request *req, size_t *received);
    dt_status (*test)(dt_request *req, int *done, size_t *received);
    /* Withdraw an unmatched receive (frees the request) or refuse. */
    dt_status (*cancel)(dt_request *req);
    /* One of n point-to-point requests of one job (NULL entries skipped). */
    dt_status (*waitany)(dt_request **reqs, int n, int *index, size_t *received);
    /* Life cycle.  NULL in the native table, whose life cycle is comm.c's
     * and split.c's own (the engine, store, hierarchy and arena).  A
     * backend with its own: world_init fills c (rank, size, its private
     * state in c->impl) from the launch environment instead of the
     * engine; split makes a child of c (dt_comm_split's contract);
     * comm_free releases c->impl (the world's last: the library); abort
     * is dt_comm_abort. */
    dt_status (*world_init)(dt_comm *c, const dt__launch_env *env);
    dt_status (*split)(dt_comm *c, int color, int key, dt_comm **out);
    dt_status (*comm_free)(dt_comm *c, bool world);
    dt_status (*abort)(dt_comm *c, const char *reason);
    /* Device buffers (base/devmem.h, docs/gpu.md): what the public layer
     * (api.c, stage.c) does with a buffer that a registered device owns.
     * DT__DEVBUF_PASS (0: a table that does not say) hands it over as is,
     * for a backend that takes device memory itself (NCCL);
     * DT__DEVBUF_STAGE copies it through host memory around the backend's
     * host algorithm (native); DT__DEVBUF_REFUSE refuses the call naming
     * the buffer (MPI: whether the MPI library reads device memory is not
     * known here, and a host read of it would crash). */
    int device_buffers;
} dt__backend;

enum { DT__DEVBUF_PASS = 0, DT__DEVBUF_STAGE = 1, DT__DEVBUF_REFUSE = 2 };

/* The native backend (native.c) and its entries, one file per collective. */
extern const dt__backend dt__native_backend;
dt_status dt__native_barrier(dt_comm *c);
dt_status dt__native_broadcast(void *buf, size_t count, dt_dtype t, int root, dt_comm *c);
dt_status dt__native_reduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, int root,
                            dt_comm *c);
dt_status dt__native_allreduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, dt_comm *c);
dt_status dt__native_reduce_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, dt_redop op,
                                    dt_comm *c);
dt_status dt__native_allgather(const void *send, void *recv, size_t sendcount, dt_dtype t, dt_comm *c);
dt_status dt__native_gather(const void *send, void *recv, size_t sendcount, dt_dtype t, int root, dt_comm *c);
dt_status dt__native_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, int root, dt_comm *c);
dt_status dt__native_alltoall(const void *send, void *recv, size_t count, dt_dtype t, dt_comm *c);
dt_status dt__native_allreduce_half(const float *send, float *recv, size_t count, dt_dtype wire, dt_redop op,
                                    dt_comm *c);
dt_status dt__native_isend(const void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c,
                           dt_request **req);
dt_status dt__native_irecv(void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c, dt_request **req);
dt_status dt__native_wait(dt_request *req, size_t *received);
dt_status dt__native_test(dt_request *req, int *done, size_t *received);
dt_status dt__native_waitany(dt_request **reqs, int n, int *index, size_t *received);
dt_status dt__native_cancel(dt_request *req);

#ifdef DT_HAVE_MPI
/* The MPI backend (src/comm/mpi/, DT_BACKEND=mpi): every operation the MPI
 * call of the same name on one MPI communicator per dt_comm. */
extern const dt__backend dt__mpi_backend;
#endif

#ifdef DT_HAVE_NCCL
/* The NCCL backend (src/comm/nccl/, DT_BACKEND=nccl): one NCCL communicator
 * and one CUDA stream per dt_comm, device buffers only.  It lives in the CUDA
 * module (src/cuda/module.h); the library reaches it through the getter. */
extern const dt__backend dt__nccl_backend;
#endif
/* The NCCL backend, the CUDA module loaded for it; NULL with the error set
 * naming why (no module in this build, or it cannot be loaded, or it has
 * no NCCL). */
const dt__backend *dt__nccl_backend_get(void);
/* An NCCL communicator over host's members, with id `id`
 * (dt_comm_attach_device).  Collective over host. */
dt_status dt__nccl_comm_over(dt_comm *host, uint32_t id, dt_comm **out);

/* The table named by DT_BACKEND ("native", the default, "mpi" in a build
 * with MPI, "nccl" in a build with NCCL); NULL with the
 * error set when this build has no such backend. */
const dt__backend *dt__backend_from_env(void);

#endif
