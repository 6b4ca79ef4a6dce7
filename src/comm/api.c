/* The public operations of dtrain/comm.h: the checks no backend judges
 * differently, then the communicator's backend (backend.h). */
#include "base/devmem.h"
#include "base/status.h"
#include "base/trace.h"
#include "comm/backend.h"
#include "comm/coll.h"
#include "comm/ipc.h"
#include "comm/comm_internal.h"
#include "comm/stage.h"
#include "comm/stall.h"

/* A NULL communicator is refused here, with the message every backend gives. */
#define REFUSE_NULL(c, op) \
    do { \
        if (!(c)) \
            return dt__fail(DT_ERR_INVALID, "%s: communicator is NULL", op); \
    } while (0)

/* Every public collective between these two: the stall inspector's count
 * (stall.c) and, with a timeline, a span naming the communicator, its
 * ranks, the algorithm and the bytes of the call's buffer. */
static int64_t enter(dt_comm *c, const char *op, size_t bytes)
{
    dt__stall_enter(c, op, bytes);
    int64_t t0 = dt__trace_begin();
    if (t0)
        dt__coll_last_alg = -1;
    return t0;
}

static dt_status leave(dt_comm *c, const char *op, size_t bytes, int64_t t0, dt_status s)
{
    dt__stall_leave(c);
    if (t0)
        dt__trace_end("comm", op, t0, "\"comm\":%u,\"ranks\":%d,\"algorithm\":\"%s\",\"bytes\":%zu%s", c->id,
                      c->size, dt__coll_alg_name(dt__coll_last_alg), bytes, s != DT_OK ? ",\"failed\":true" : "");
    return s;
}

/* A process that opened a device (base/devmem.h) may pass device buffers:
 * they go through stage.h, which stages, refuses or passes them by the
 * backend; otherwise the backend's entry at once. */
#define DEV(c, entry, ...) (dt__devmem_active() ? dt__stage_##entry(__VA_ARGS__) : (c)->backend->entry(__VA_ARGS__))
/* The same for the four that ranks of one host may run by IPC (ipc.h),
 * which stage where it does not apply. */
#define DEVIPC(c, entry, ...) (dt__devmem_active() ? dt__ipc_##entry(__VA_ARGS__) : (c)->backend->entry(__VA_ARGS__))

/* A call whose buffer is device memory on a communicator with a companion
 * for device buffers (device_comm.c) runs on the companion instead: the
 * public call again, so its checks, trace and backend are the companion's. */
#define ROUTE(c, a, b, call) \
    do { \
        dt_comm *d_ = dt__comm_device_route(c, a, b); \
        if (d_) \
            return call; \
    } while (0)

#define TRACED(c, op, bytes, call) \
    do { \
        size_t bytes_ = (bytes); \
        int64_t t0_ = enter(c, op, bytes_); \
        return leave(c, op, bytes_, t0_, (call)); \
    } while (0)

dt_status dt_barrier(dt_comm *c)
{
    REFUSE_NULL(c, "barrier");
    TRACED(c, "barrier", 0, c->backend->barrier(c));
}

dt_status dt_broadcast(void *buf, size_t count, dt_dtype t, int root, dt_comm *c)
{
    REFUSE_NULL(c, "broadcast");
    ROUTE(c, buf, NULL, dt_broadcast(buf, count, t, root, d_));
    TRACED(c, "broadcast", count * dt_dtype_size(t), DEVIPC(c, broadcast, buf, count, t, root, c));
}

dt_status dt_reduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, int root, dt_comm *c)
{
    REFUSE_NULL(c, "reduce");
    ROUTE(c, send, recv, dt_reduce(send, recv, count, t, op, root, d_));
    TRACED(c, "reduce", count * dt_dtype_size(t), DEV(c, reduce, send, recv, count, t, op, root, c));
}

dt_status dt_allreduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, dt_comm *c)
{
    REFUSE_NULL(c, "allreduce");
    ROUTE(c, send, recv, dt_allreduce(send, recv, count, t, op, d_));
    TRACED(c, "allreduce", count * dt_dtype_size(t), DEVIPC(c, allreduce, send, recv, count, t, op, c));
}

dt_status dt_reduce_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, dt_redop op, dt_comm *c)
{
    REFUSE_NULL(c, "reduce_scatter");
    ROUTE(c, send, recv, dt_reduce_scatter(send, recv, recvcount, t, op, d_));
    TRACED(c, "reduce_scatter", recvcount * dt_dtype_size(t) * (size_t)c->size,
           DEVIPC(c, reduce_scatter, send, recv, recvcount, t, op, c));
}

dt_status dt_allgather(const void *send, void *recv, size_t sendcount, dt_dtype t, dt_comm *c)
{
    REFUSE_NULL(c, "allgather");
    ROUTE(c, send, recv, dt_allgather(send, recv, sendcount, t, d_));
    TRACED(c, "allgather", sendcount * dt_dtype_size(t) * (size_t)c->size,
           DEVIPC(c, allgather, send, recv, sendcount, t, c));
}

dt_status dt_gather(const void *send, void *recv, size_t sendcount, dt_dtype t, int root, dt_comm *c)
{
    REFUSE_NULL(c, "gather");
    ROUTE(c, send, recv, dt_gather(send, recv, sendcount, t, root, d_));
    TRACED(c, "gather", sendcount * dt_dtype_size(t) * (size_t)c->size,
           DEV(c, gather, send, recv, sendcount, t, root, c));
}

dt_status dt_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, int root, dt_comm *c)
{
    REFUSE_NULL(c, "scatter");
    ROUTE(c, send, recv, dt_scatter(send, recv, recvcount, t, root, d_));
    TRACED(c, "scatter", recvcount * dt_dtype_size(t) * (size_t)c->size,
           DEV(c, scatter, send, recv, recvcount, t, root, c));
}

dt_status dt_alltoall(const void *send, void *recv, size_t count, dt_dtype t, dt_comm *c)
{
    REFUSE_NULL(c, "alltoall");
    ROUTE(c, send, recv, dt_alltoall(send, recv, count, t, d_));
    TRACED(c, "alltoall", count * dt_dtype_size(t) * (size_t)c->size, DEV(c, alltoall, send, recv, count, t, c));
}

dt_status dt_allreduce_half(const float *send, float *recv, size_t count, dt_dtype wire, dt_redop op, dt_comm *c)
{
    REFUSE_NULL(c, "allreduce_half");
    ROUTE(c, send, recv, dt_allreduce_half(send, recv, count, wire, op, d_));
    TRACED(c, "allreduce_half", count * sizeof(float), DEV(c, allreduce_half, send, recv, count, wire, op, c));
}

dt_status dt_isend(const void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c, dt_request **req)
{
    if (!req)
        return dt__fail(DT_ERR_INVALID, "isend: request pointer (req) is NULL");
    *req = NULL;
    REFUSE_NULL(c, "send");
    ROUTE(c, buf, NULL, dt_isend(buf, count, t, peer, tag, d_, req));
    return DEV(c, isend, buf, count, t, peer, tag, c, req);
}

dt_status dt_irecv(void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c, dt_request **req)
{
    if (!req)
        return dt__fail(DT_ERR_INVALID, "irecv: request pointer (req) is NULL");
    *req = NULL;
    REFUSE_NULL(c, "recv");
    ROUTE(c, buf, NULL, dt_irecv(buf, count, t, peer, tag, d_, req));
    return DEV(c, irecv, buf, count, t, peer, tag, c, req);
}

dt_status dt_wait(dt_request *r, size_t *received)
{
    if (!r)
        return dt__fail(DT_ERR_INVALID, "dt_wait: request is NULL");
    if (r->job) /* a nonblocking collective: the progress thread's */
        return dt__job_wait(r);
    if (r->stage) /* a device buffer's host copy */
        return dt__stage_wait(r, received);
    return r->comm->backend->wait(r, received);
}

dt_status dt_test(dt_request *r, int *done, size_t *received)
{
    if (!r || !done)
        return dt__fail(DT_ERR_INVALID, "dt_test: %s is NULL", r ? "done" : "request (req)");
    *done = 0;
    if (r->job)
        return dt__job_test(r, done);
    if (r->stage)
        return dt__stage_test(r, done, received);
    return r->comm->backend->test(r, done, received);
}

dt_status dt_cancel(dt_request *r)
{
    if (!r)
        return dt__fail(DT_ERR_INVALID, "dt_cancel: request is NULL");
    if (r->job)
        return dt__fail(DT_ERR_INVALID, "dt_cancel: a nonblocking collective cannot be cancelled (wait for it)");
    if (r->stage)
        return dt__stage_cancel(r);
    return r->comm->backend->cancel(r);
}

dt_status dt_waitany(dt_request **reqs, int n, int *index, size_t *received)
{
    if (!reqs || !index || n < 0 || n > 1024)
        return dt__fail(DT_ERR_INVALID, "dt_waitany: %s", !reqs ? "reqs is NULL" : !index ? "index is NULL"
                                                                                 : "n must be 0..1024");
    const dt__world *w = NULL;
    for (int i = 0; i < n; i++) {
        if (!reqs[i])
            continue;
        if (reqs[i]->job)
            return dt__fail(DT_ERR_INVALID, "dt_waitany: request %d is a nonblocking collective (point to point only)", i);
        if (w && reqs[i]->comm->world != w)
            return dt__fail(DT_ERR_INVALID, "dt_waitany: request %d belongs to another job", i);
        w = reqs[i]->comm->world;
    }
    if (!w) {
        *index = -1;
        return DT_OK;
    }
    for (int i = 0; i < n; i++)
        if (reqs[i] && reqs[i]->stage)
            return dt__stage_waitany(reqs, n, index, received);
    for (int i = 0; i < n; i++)
        if (reqs[i])
            return reqs[i]->comm->backend->waitany(reqs, n, index, received);
    return DT_OK;
}

dt_status dt_send(const void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c)
{
    dt_request *r;
    DT_CHECK(dt_isend(buf, count, t, peer, tag, c, &r));
    return dt_wait(r, NULL);
}

dt_status dt_recv(void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c, size_t *received)
{
    dt_request *r;
    DT_CHECK(dt_irecv(buf, count, t, peer, tag, c, &r));
    return dt_wait(r, received);
}
