/* The MPI backend's collectives: each the MPI call of the same name on the
 * communicator's MPI communicator, after the checks every backend makes
 * (coll.h: counts, buffers, dtype and op; then the communicator's queued
 * nonblocking collectives).
 *
 * Results: the float reductions run dtrain's own kernels as MPI operations
 * (mpi_world.c), so NaNs, f16/bf16 rounding and DT_AVG's division are
 * dtrain's, but the order in which MPI combines the ranks' contributions is
 * MPI's: float sums and products may differ from the native backend's in
 * the last bits (the conformance tests allow a relative 2^-20 x ranks for
 * f32, docs/launching.md).  Integer results and min/max are exact.  No
 * collective-mismatch check and no DT_TIMEOUT deadline: a collective waits
 * as MPI waits. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/half_convert.h"
#include "base/redop.h"
#include "base/status.h"
#include "comm/coll.h"
#include "comm/mpi/mpi_internal.h"

/* MPI counts are ints. */
static dt_status int_count(const char *op, size_t count, int *out)
{
    if (count > INT_MAX)
        return dt__fail(DT_ERR_INVALID, "%s: count %zu exceeds MPI's largest count (%d): split the call",
                        op, count, INT_MAX);
    *out = (int)count;
    return DT_OK;
}

static dt_status check_root(const char *op, int root, const dt_comm *c)
{
    if (root < 0 || root >= c->size)
        return dt__fail(DT_ERR_INVALID, "%s: root %d is outside the communicator of %d ranks", op, root, c->size);
    return DT_OK;
}

/* Run one MPI call (under the lock where MPI serialises threads). */
#define MPI_RUN(op, call) \
    do { \
        DT__MPI_LOCK(); \
        int rc_ = (call); \
        DT__MPI_UNLOCK(); \
        DT_CHECK(dt__mpi_error(rc_, op)); \
    } while (0)

dt_status dt__mpi_barrier(dt_comm *c)
{
    DT_CHECK(dt__comm_check(c, "barrier"));
    MPI_RUN("barrier", MPI_Barrier(dt__mpi_of(c)));
    return DT_OK;
}

dt_status dt__mpi_broadcast(void *buf, size_t count, dt_dtype t, int root, dt_comm *c)
{
    size_t bytes;
    int n = 0;
    DT_CHECK(dt__coll_bytes("broadcast", count, t, 1, &bytes));
    if (count && !buf)
        return dt__fail(DT_ERR_INVALID, "broadcast: buffer (buf) is NULL for %zu elements", count);
    DT_CHECK(check_root("broadcast", root, c));
    DT_CHECK(int_count("broadcast", count, &n));
    DT_CHECK(dt__comm_check(c, "broadcast"));
    if (!n)
        return DT_OK;
    MPI_RUN("broadcast", MPI_Bcast(buf, n, dt__mpi_type(t), root, dt__mpi_of(c)));
    return DT_OK;
}

static dt_status reducing(const char *op, size_t count, dt_dtype t, dt_redop r, size_t mult, const void *send,
                          size_t send_mult, const void *recv, size_t recv_mult, int *n)
{
    size_t bytes;
    DT_CHECK(dt__check_dtype_op(op, t, r));
    DT_CHECK(dt__coll_bytes(op, count, t, mult, &bytes));
    size_t es = dt_dtype_size(t);
    DT_CHECK(dt__coll_check_buffers(op, send, send_mult * count * es, recv, recv_mult * count * es));
    return int_count(op, count * mult, n);
}

dt_status dt__mpi_reduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, int root, dt_comm *c)
{
    int n = 0;
    DT_CHECK(reducing("reduce", count, t, op, 1, send, 1, c && c->rank == root ? recv : send, 1, &n));
    DT_CHECK(check_root("reduce", root, c));
    DT_CHECK(dt__comm_check(c, "reduce"));
    if (!n)
        return DT_OK;
    bool root_here = c->rank == root;
    const void *in = root_here && send == recv ? MPI_IN_PLACE : send;
    MPI_RUN("reduce", MPI_Reduce(in, root_here ? recv : NULL, n, dt__mpi_type(t), dt__mpi_op(t, op), root,
                                 dt__mpi_of(c)));
    if (root_here)
        dt__reduce_finish(recv, count, t, op, c->size);
    return DT_OK;
}

dt_status dt__mpi_allreduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, dt_comm *c)
{
    int n = 0;
    DT_CHECK(reducing("allreduce", count, t, op, 1, send, 1, recv, 1, &n));
    DT_CHECK(dt__comm_check(c, "allreduce"));
    if (!n)
        return DT_OK;
    MPI_RUN("allreduce", MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, n, dt__mpi_type(t),
                                       dt__mpi_op(t, op), dt__mpi_of(c)));
    dt__reduce_finish(recv, count, t, op, c->size);
    return DT_OK;
}

dt_status dt__mpi_reduce_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, dt_redop op,
                                 dt_comm *c)
{
    int n = 0, total = 0;
    size_t size = c ? (size_t)c->size : 1;
    DT_CHECK(reducing("reduce_scatter", recvcount, t, op, size, send, size, recv, send == recv ? size : 1, &total));
    DT_CHECK(int_count("reduce_scatter", recvcount, &n));
    DT_CHECK(dt__comm_check(c, "reduce_scatter"));
    if (!total)
        return DT_OK;
    MPI_RUN("reduce_scatter", MPI_Reduce_scatter_block(send == recv ? MPI_IN_PLACE : send, recv, n,
                                                       dt__mpi_type(t), dt__mpi_op(t, op), dt__mpi_of(c)));
    dt__reduce_finish(recv, recvcount, t, op, c->size);
    return DT_OK;
}

/* Checks of the moving collectives: `count` per block, `size` blocks. */
static dt_status moving(const char *op, size_t count, dt_dtype t, dt_comm *c, const void *send, size_t send_blocks,
                        const void *recv, size_t recv_blocks, int *n)
{
    size_t bytes;
    if (!c)
        return dt__fail(DT_ERR_INVALID, "%s: communicator is NULL", op);
    DT_CHECK(dt__coll_bytes(op, count, t, (size_t)c->size, &bytes));
    size_t es = dt_dtype_size(t);
    DT_CHECK(dt__coll_check_buffers(op, send, send_blocks * count * es, recv, recv_blocks * count * es));
    DT_CHECK(int_count(op, count * (size_t)c->size, n));
    return int_count(op, count, n);
}

dt_status dt__mpi_allgather(const void *send, void *recv, size_t sendcount, dt_dtype t, dt_comm *c)
{
    int n = 0;
    size_t size = c ? (size_t)c->size : 1;
    DT_CHECK(moving("allgather", sendcount, t, c, send, send == recv ? size : 1, recv, size, &n));
    DT_CHECK(dt__comm_check(c, "allgather"));
    if (!n)
        return DT_OK;
    MPI_Datatype d = dt__mpi_type(t);
    MPI_RUN("allgather", MPI_Allgather(send == recv ? MPI_IN_PLACE : send, n, d, recv, n, d, dt__mpi_of(c)));
    return DT_OK;
}

dt_status dt__mpi_gather(const void *send, void *recv, size_t sendcount, dt_dtype t, int root, dt_comm *c)
{
    int n = 0;
    size_t size = c ? (size_t)c->size : 1;
    bool root_here = c && c->rank == root;
    DT_CHECK(moving("gather", sendcount, t, c, send, root_here && send == recv ? size : 1, root_here ? recv : NULL,
                    root_here ? size : 0, &n));
    DT_CHECK(check_root("gather", root, c));
    DT_CHECK(dt__comm_check(c, "gather"));
    if (!n)
        return DT_OK;
    MPI_Datatype d = dt__mpi_type(t);
    MPI_RUN("gather", MPI_Gather(root_here && send == recv ? MPI_IN_PLACE : send, n, d, root_here ? recv : NULL, n,
                                 d, root, dt__mpi_of(c)));
    return DT_OK;
}

dt_status dt__mpi_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, int root, dt_comm *c)
{
    int n = 0;
    size_t size = c ? (size_t)c->size : 1;
    bool root_here = c && c->rank == root;
    DT_CHECK(moving("scatter", recvcount, t, c, root_here ? send : NULL, root_here ? size : 0, recv,
                    root_here && send == recv ? size : 1, &n));
    DT_CHECK(check_root("scatter", root, c));
    DT_CHECK(dt__comm_check(c, "scatter"));
    if (!n)
        return DT_OK;
    MPI_Datatype d = dt__mpi_type(t);
    MPI_RUN("scatter", MPI_Scatter(root_here ? send : NULL, n, d, root_here && send == recv ? MPI_IN_PLACE : recv,
                                   n, d, root, dt__mpi_of(c)));
    return DT_OK;
}

dt_status dt__mpi_alltoall(const void *send, void *recv, size_t count, dt_dtype t, dt_comm *c)
{
    int n = 0;
    size_t size = c ? (size_t)c->size : 1;
    DT_CHECK(moving("alltoall", count, t, c, send, size, recv, size, &n));
    DT_CHECK(dt__comm_check(c, "alltoall"));
    if (!n)
        return DT_OK;
    MPI_Datatype d = dt__mpi_type(t);
    MPI_RUN("alltoall", MPI_Alltoall(send == recv ? MPI_IN_PLACE : send, n, d, recv, n, d, dt__mpi_of(c)));
    return DT_OK;
}

/* f32 data with a half-precision wire: MPI has no half types, so the wire
 * stays f32 (no bytes saved) and the rounding is done here: each input is
 * rounded to `wire` once, the f32 sum is rounded once, as the native
 * backend's results are (docs/algorithms.md). */
dt_status dt__mpi_allreduce_half(const float *send, float *recv, size_t count, dt_dtype wire, dt_redop op,
                                 dt_comm *c)
{
    const char *name = "allreduce_half";
    if (wire != DT_F16 && wire != DT_BF16)
        return dt__fail(DT_ERR_INVALID, "%s: wire dtype must be f16 or bf16, not %s", name,
                        dt_dtype_name(wire) ? dt_dtype_name(wire) : "invalid");
    if (op != DT_SUM && op != DT_AVG)
        return dt__fail(DT_ERR_INVALID, "%s: op must be sum or avg", name);
    int n = 0;
    DT_CHECK(reducing(name, count, DT_F32, op, 1, send, 1, recv, 1, &n));
    DT_CHECK(dt__comm_check(c, name));
    if (!n)
        return DT_OK;
    bool bf16 = wire == DT_BF16;
    uint16_t *h = malloc(count * sizeof *h);
    if (!h)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    dt__to_half_n(h, send, count, bf16);
    dt__from_half_n(recv, h, count, bf16);
    DT__MPI_LOCK();
    int rc = MPI_Allreduce(MPI_IN_PLACE, recv, n, MPI_FLOAT, dt__mpi_op(DT_F32, DT_SUM), dt__mpi_of(c));
    DT__MPI_UNLOCK();
    if (rc == MPI_SUCCESS) {
        dt__reduce_finish(recv, count, DT_F32, op, c->size);
        dt__to_half_n(h, recv, count, bf16);
        dt__from_half_n(recv, h, count, bf16);
    }
    free(h);
    return dt__mpi_error(rc, name);
}
