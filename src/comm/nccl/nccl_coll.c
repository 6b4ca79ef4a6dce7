/* The NCCL backend's collectives: each the NCCL call of the same name on
 * the communicator's stream (gather, scatter and alltoall as grouped
 * ncclSend/ncclRecv, barrier as a one-element allreduce), after the checks
 * every backend makes (coll.h: counts, buffers, dtype and op), the device
 * buffer check (nccl_types.c) and the communicator's queued nonblocking
 * collectives.  The call returns when its work on the stream completed,
 * polled up to DT_TIMEOUT (nccl_wait.c).
 *
 * Results: NCCL's own algorithms and reduction order, so float sums may
 * differ from the native backend's in the last bits; integer results and
 * min/max are exact.  No collective-mismatch check (NCCL has none): a
 * mismatch ends by the deadline and aborts the communicator. */
#include <stdint.h>
#include <string.h>

#include "base/clock.h"
#include "base/status.h"
#include "comm/coll.h"
#include "comm/nccl/nccl_internal.h"

/* NCCL's reduction op for a call on c.  At world size 1 an average is the
 * input itself: NCCL's one-rank kernel for it (PreMulSum) leaves the tail
 * of some counts unwritten (65537 f64 on an H200: the last element; its
 * blocks take nElts / blocks rounded down to 16 bytes each), where its sum
 * is a plain copy. */
static ncclRedOp_t op_for(dt_redop op, const dt_comm *c)
{
    return op == DT_AVG && c->size == 1 ? ncclSum : dt__nccl_op(op);
}

static dt_status check_root(const char *op, int root, const dt_comm *c)
{
    if (root < 0 || root >= c->size)
        return dt__fail(DT_ERR_INVALID, "%s: root %d is outside the communicator of %d ranks", op, root, c->size);
    return DT_OK;
}

/* The start of every collective: queued nonblocking ones first, then a
 * usable communicator on this thread's device. */
static dt_status open_call(dt_comm *c, const char *op)
{
    DT_CHECK(dt__comm_check(c, op));
    return dt__nccl_begin(c, op);
}

/* Settle what was issued and wait for the stream. */
static dt_status close_call(dt_comm *c, ncclResult_t r, const char *op, int64_t deadline)
{
    DT_CHECK(dt__nccl_settle(c, r, op, deadline));
    return dt__nccl_finish(c, op, deadline);
}

/* A copy on c's stream (a rank's own block of gather, scatter, alltoall). */
static dt_status copy(dt_comm *c, void *dst, const void *src, size_t bytes, const char *op)
{
    if (!bytes || dst == src)
        return DT_OK;
    dt_status s = dt__nccl_cuda_error(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                                      dt__nccl_of(c)->stream), op);
    return s == DT_OK ? s : dt__nccl_break(c, s);
}

dt_status dt__nccl_barrier(dt_comm *c)
{
    DT_CHECK(open_call(c, "barrier"));
    dt__nccl_comm *n = dt__nccl_of(c);
    int64_t deadline = dt__deadline_after(c->timeout_s);
    return close_call(c, ncclAllReduce(n->flag, n->flag, 1, ncclFloat32, ncclSum, n->comm, n->stream), "barrier",
                      deadline);
}

dt_status dt__nccl_broadcast(void *buf, size_t count, dt_dtype t, int root, dt_comm *c)
{
    size_t bytes;
    DT_CHECK(dt__coll_bytes("broadcast", count, t, 1, &bytes));
    DT_CHECK(dt__nccl_check_type("broadcast", t));
    if (count && !buf)
        return dt__fail(DT_ERR_INVALID, "broadcast: buffer (buf) is NULL for %zu elements", count);
    DT_CHECK(open_call(c, "broadcast"));
    DT_CHECK(check_root("broadcast", root, c));
    DT_CHECK(dt__nccl_check_buffer(c, "broadcast", "buffer", buf, bytes));
    if (!count)
        return DT_OK;
    dt__nccl_comm *n = dt__nccl_of(c);
    ncclDataType_t nt;
    dt__nccl_type(t, &nt);
    int64_t deadline = dt__deadline_after(c->timeout_s);
    return close_call(c, ncclBroadcast(buf, buf, count, nt, root, n->comm, n->stream), "broadcast", deadline);
}

/* Checks of the reducing collectives: `mult` blocks of `count`. */
static dt_status reducing(const char *op, size_t count, dt_dtype t, dt_redop r, size_t mult, const void *send,
                          size_t send_mult, const void *recv, size_t recv_mult)
{
    size_t bytes;
    DT_CHECK(dt__check_dtype_op(op, t, r));
    DT_CHECK(dt__nccl_check_type(op, t));
    DT_CHECK(dt__coll_bytes(op, count, t, mult, &bytes));
    size_t es = dt_dtype_size(t);
    return dt__coll_check_buffers(op, send, send_mult * count * es, recv, recv_mult * count * es);
}

dt_status dt__nccl_reduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, int root,
                          dt_comm *c)
{
    bool root_here = c && c->rank == root;
    DT_CHECK(reducing("reduce", count, t, op, 1, send, 1, root_here ? recv : send, 1));
    DT_CHECK(open_call(c, "reduce"));
    DT_CHECK(check_root("reduce", root, c));
    size_t bytes = count * dt_dtype_size(t);
    DT_CHECK(dt__nccl_check_buffer(c, "reduce", "send buffer", send, bytes));
    if (root_here)
        DT_CHECK(dt__nccl_check_buffer(c, "reduce", "receive buffer", recv, bytes));
    if (!count)
        return DT_OK;
    dt__nccl_comm *n = dt__nccl_of(c);
    ncclDataType_t nt;
    dt__nccl_type(t, &nt);
    int64_t deadline = dt__deadline_after(c->timeout_s);
    /* recv is ignored off the root, where it may be NULL: NCCL gets send there. */
    return close_call(c, ncclReduce(send, root_here ? recv : (void *)send, count, nt, op_for(op, c), root,
                                    n->comm, n->stream),
                      "reduce", deadline);
}

dt_status dt__nccl_allreduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, dt_comm *c)
{
    DT_CHECK(reducing("allreduce", count, t, op, 1, send, 1, recv, 1));
    DT_CHECK(open_call(c, "allreduce"));
    size_t bytes = count * dt_dtype_size(t);
    DT_CHECK(dt__nccl_check_buffer(c, "allreduce", "send buffer", send, bytes));
    DT_CHECK(dt__nccl_check_buffer(c, "allreduce", "receive buffer", recv, bytes));
    if (!count)
        return DT_OK;
    dt__nccl_comm *n = dt__nccl_of(c);
    ncclDataType_t nt;
    dt__nccl_type(t, &nt);
    int64_t deadline = dt__deadline_after(c->timeout_s);
    return close_call(c, ncclAllReduce(send, recv, count, nt, op_for(op, c), n->comm, n->stream), "allreduce",
                      deadline);
}

dt_status dt__nccl_reduce_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, dt_redop op,
                                  dt_comm *c)
{
    const char *name = "reduce_scatter";
    size_t size = c ? (size_t)c->size : 1;
    bool in_place = send == recv;
    DT_CHECK(reducing(name, recvcount, t, op, size, send, size, recv, in_place ? size : 1));
    DT_CHECK(open_call(c, name));
    size_t es = dt_dtype_size(t), block = recvcount * es;
    DT_CHECK(dt__nccl_check_buffer(c, name, "send buffer", send, size * block));
    DT_CHECK(dt__nccl_check_buffer(c, name, "receive buffer", recv, in_place ? size * block : block));
    if (!recvcount)
        return DT_OK;
    dt__nccl_comm *n = dt__nccl_of(c);
    ncclDataType_t nt;
    dt__nccl_type(t, &nt);
    int64_t deadline = dt__deadline_after(c->timeout_s);
    /* dtrain's in place leaves the result at the start of recv; NCCL's at
     * this rank's block: run NCCL's, then move the block. */
    char *out = in_place ? (char *)recv + (size_t)c->rank * block : recv;
    ncclResult_t r = ncclReduceScatter(send, out, recvcount, nt, op_for(op, c), n->comm, n->stream);
    DT_CHECK(dt__nccl_settle(c, r, name, deadline));
    DT_CHECK(copy(c, recv, out, block, name));
    return dt__nccl_finish(c, name, deadline);
}

dt_status dt__nccl_allgather(const void *send, void *recv, size_t sendcount, dt_dtype t, dt_comm *c)
{
    const char *name = "allgather";
    size_t bytes, size = c ? (size_t)c->size : 1;
    bool in_place = send == recv;
    if (!c)
        return dt__fail(DT_ERR_INVALID, "%s: communicator is NULL", name);
    DT_CHECK(dt__coll_bytes(name, sendcount, t, size, &bytes));
    DT_CHECK(dt__nccl_check_type(name, t));
    size_t block = sendcount * dt_dtype_size(t);
    DT_CHECK(dt__coll_check_buffers(name, send, in_place ? size * block : block, recv, size * block));
    DT_CHECK(open_call(c, name));
    DT_CHECK(dt__nccl_check_buffer(c, name, "send buffer", send, block));
    DT_CHECK(dt__nccl_check_buffer(c, name, "receive buffer", recv, size * block));
    if (!sendcount)
        return DT_OK;
    dt__nccl_comm *n = dt__nccl_of(c);
    ncclDataType_t nt;
    dt__nccl_type(t, &nt);
    int64_t deadline = dt__deadline_after(c->timeout_s);
    /* In place: this rank's input is already its block of recv, which is
     * what NCCL's in place names. */
    const char *in = in_place ? (const char *)recv + (size_t)c->rank * block : send;
    return close_call(c, ncclAllGather(in, recv, sendcount, nt, n->comm, n->stream), name, deadline);
}

/* Checks of gather and scatter: the root's side holds size blocks. */
static dt_status rooted(const char *name, size_t count, dt_dtype t, int root, dt_comm *c, const void *one,
                        const void *all, bool in_place)
{
    size_t bytes, size = c ? (size_t)c->size : 1;
    if (!c)
        return dt__fail(DT_ERR_INVALID, "%s: communicator is NULL", name);
    DT_CHECK(dt__coll_bytes(name, count, t, size, &bytes));
    DT_CHECK(dt__nccl_check_type(name, t));
    size_t block = count * dt_dtype_size(t);
    bool root_here = c->rank == root;
    DT_CHECK(dt__coll_check_buffers(name, one, in_place ? size * block : block, root_here ? all : NULL,
                                    root_here ? size * block : 0));
    DT_CHECK(open_call(c, name));
    DT_CHECK(check_root(name, root, c));
    DT_CHECK(dt__nccl_check_buffer(c, name, !strcmp(name, "gather") ? "send buffer" : "receive buffer", one, block));
    if (root_here)
        DT_CHECK(dt__nccl_check_buffer(c, name, !strcmp(name, "gather") ? "receive buffer" : "send buffer", all,
                                       size * block));
    return DT_OK;
}

dt_status dt__nccl_gather(const void *send, void *recv, size_t sendcount, dt_dtype t, int root, dt_comm *c)
{
    const char *name = "gather";
    bool root_here = c && c->rank == root, in_place = root_here && send == recv;
    DT_CHECK(rooted(name, sendcount, t, root, c, send, recv, in_place));
    if (!sendcount)
        return DT_OK;
    dt__nccl_comm *n = dt__nccl_of(c);
    size_t block = sendcount * dt_dtype_size(t);
    int64_t deadline = dt__deadline_after(c->timeout_s);
    ncclResult_t r;
    if (root_here) {
        /* in place, the root's input is already its block */
        DT_CHECK(copy(c, (char *)recv + (size_t)root * block, send, in_place ? 0 : block, name));
        r = ncclGroupStart();
        for (int p = 0; p < c->size && r == ncclSuccess; p++)
            if (p != root)
                r = ncclRecv((char *)recv + (size_t)p * block, block, ncclUint8, p, n->comm, n->stream);
        ncclResult_t end = ncclGroupEnd();
        r = r != ncclSuccess ? r : end;
    } else {
        r = ncclSend(send, block, ncclUint8, root, n->comm, n->stream);
    }
    return close_call(c, r, name, deadline);
}

dt_status dt__nccl_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, int root, dt_comm *c)
{
    const char *name = "scatter";
    bool root_here = c && c->rank == root, in_place = root_here && send == recv;
    DT_CHECK(rooted(name, recvcount, t, root, c, recv, send, in_place));
    if (!recvcount)
        return DT_OK;
    dt__nccl_comm *n = dt__nccl_of(c);
    size_t block = recvcount * dt_dtype_size(t);
    int64_t deadline = dt__deadline_after(c->timeout_s);
    ncclResult_t r;
    if (root_here) {
        DT_CHECK(copy(c, recv, (const char *)send + (size_t)root * block, in_place ? 0 : block, name));
        r = ncclGroupStart();
        for (int p = 0; p < c->size && r == ncclSuccess; p++)
            if (p != root)
                r = ncclSend((const char *)send + (size_t)p * block, block, ncclUint8, p, n->comm, n->stream);
        ncclResult_t end = ncclGroupEnd();
        r = r != ncclSuccess ? r : end;
    } else {
        r = ncclRecv(recv, block, ncclUint8, root, n->comm, n->stream);
    }
    return close_call(c, r, name, deadline);
}

dt_status dt__nccl_alltoall(const void *send, void *recv, size_t count, dt_dtype t, dt_comm *c)
{
    const char *name = "alltoall";
    size_t bytes, size = c ? (size_t)c->size : 1;
    if (!c)
        return dt__fail(DT_ERR_INVALID, "%s: communicator is NULL", name);
    DT_CHECK(dt__coll_bytes(name, count, t, size, &bytes));
    DT_CHECK(dt__nccl_check_type(name, t));
    size_t block = count * dt_dtype_size(t);
    DT_CHECK(dt__coll_check_buffers(name, send, size * block, recv, size * block));
    DT_CHECK(open_call(c, name));
    DT_CHECK(dt__nccl_check_buffer(c, name, "send buffer", send, size * block));
    DT_CHECK(dt__nccl_check_buffer(c, name, "receive buffer", recv, size * block));
    if (!count)
        return DT_OK;
    dt__nccl_comm *n = dt__nccl_of(c);
    int64_t deadline = dt__deadline_after(c->timeout_s);
    /* In place: the blocks sent are read while others arrive in the same
     * buffer, so the input is first copied aside (stream-ordered memory). */
    void *stage = NULL;
    if (send == recv) {
        dt_status s = dt__nccl_cuda_error(cudaMallocAsync(&stage, size * block, n->stream), name);
        if (s == DT_OK)
            s = copy(c, stage, send, size * block, name);
        if (s != DT_OK)
            return s;
        send = stage;
    }
    int me = c->rank;
    dt_status s = copy(c, (char *)recv + (size_t)me * block, (const char *)send + (size_t)me * block, block, name);
    ncclResult_t r = ncclSuccess;
    if (s == DT_OK && c->size > 1) {
        r = ncclGroupStart();
        for (int p = 0; p < c->size && r == ncclSuccess; p++) {
            if (p == me)
                continue;
            r = ncclSend((const char *)send + (size_t)p * block, block, ncclUint8, p, n->comm, n->stream);
            if (r == ncclSuccess)
                r = ncclRecv((char *)recv + (size_t)p * block, block, ncclUint8, p, n->comm, n->stream);
        }
        ncclResult_t end = ncclGroupEnd();
        r = r != ncclSuccess ? r : end;
    }
    if (s == DT_OK)
        s = dt__nccl_settle(c, r, name, deadline);
    if (stage && !n->broken) /* freed in stream order, after the sends read it */
        s = s != DT_OK ? s : dt__nccl_cuda_error(cudaFreeAsync(stage, n->stream), name);
    DT_CHECK(s);
    return dt__nccl_finish(c, name, deadline);
}

/* f32 data with a half-precision wire: the rounding to the wire type needs
 * a kernel, which the communication layer does not own (it knows no
 * tensors); refused by name rather than run with another rounding. */
dt_status dt__nccl_allreduce_half(const float *send, float *recv, size_t count, dt_dtype wire, dt_redop op,
                                  dt_comm *c)
{
    (void)send;
    (void)recv;
    (void)count;
    (void)wire;
    (void)op;
    DT_CHECK(dt__comm_usable(c, "allreduce_half"));
    return dt__fail(DT_ERR_INVALID, "allreduce_half: DT_BACKEND=nccl has no half-precision wire for f32 data: "
                                    "allreduce the gradients as bf16 or f32 (or use the native backend)");
}
