/* The public operations of dtrain/comm.h: the checks no backend judges
 * differently, then the communicator's backend (backend.h). */
#include "base/status.h"
#include "comm/backend.h"
#include "comm/comm_internal.h"

/* A NULL communicator is refused here, with the message every backend gives. */
#define REFUSE_NULL(c, op) \
    do { \
        if (!(c)) \
            return dt__fail(DT_ERR_INVALID, "%s: communicator is NULL", op); \
    } while (0)

dt_status dt_barrier(dt_comm *c)
{
    REFUSE_NULL(c, "barrier");
    return c->backend->barrier(c);
}

dt_status dt_broadcast(void *buf, size_t count, dt_dtype t, int root, dt_comm *c)
{
    REFUSE_NULL(c, "broadcast");
    return c->backend->broadcast(buf, count, t, root, c);
}

dt_status dt_reduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, int root, dt_comm *c)
{
    REFUSE_NULL(c, "reduce");
    return c->backend->reduce(send, recv, count, t, op, root, c);
}

dt_status dt_allreduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, dt_comm *c)
{
    REFUSE_NULL(c, "allreduce");
    return c->backend->allreduce(send, recv, count, t, op, c);
}

dt_status dt_reduce_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, dt_redop op, dt_comm *c)
{
    REFUSE_NULL(c, "reduce_scatter");
    return c->backend->reduce_scatter(send, recv, recvcount, t, op, c);
}

dt_status dt_allgather(const void *send, void *recv, size_t sendcount, dt_dtype t, dt_comm *c)
{
    REFUSE_NULL(c, "allgather");
    return c->backend->allgather(send, recv, sendcount, t, c);
}

dt_status dt_gather(const void *send, void *recv, size_t sendcount, dt_dtype t, int root, dt_comm *c)
{
    REFUSE_NULL(c, "gather");
    return c->backend->gather(send, recv, sendcount, t, root, c);
}

dt_status dt_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, int root, dt_comm *c)
{
    REFUSE_NULL(c, "scatter");
    return c->backend->scatter(send, recv, recvcount, t, root, c);
}

dt_status dt_alltoall(const void *send, void *recv, size_t count, dt_dtype t, dt_comm *c)
{
    REFUSE_NULL(c, "alltoall");
    return c->backend->alltoall(send, recv, count, t, c);
}

dt_status dt_allreduce_half(const float *send, float *recv, size_t count, dt_dtype wire, dt_redop op, dt_comm *c)
{
    REFUSE_NULL(c, "allreduce_half");
    return c->backend->allreduce_half(send, recv, count, wire, op, c);
}

dt_status dt_isend(const void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c, dt_request **req)
{
    if (!req)
        return dt__fail(DT_ERR_INVALID, "isend: request pointer (req) is NULL");
    *req = NULL;
    REFUSE_NULL(c, "send");
    return c->backend->isend(buf, count, t, peer, tag, c, req);
}

dt_status dt_irecv(void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c, dt_request **req)
{
    if (!req)
        return dt__fail(DT_ERR_INVALID, "irecv: request pointer (req) is NULL");
    *req = NULL;
    REFUSE_NULL(c, "recv");
    return c->backend->irecv(buf, count, t, peer, tag, c, req);
}

dt_status dt_wait(dt_request *r, size_t *received)
{
    if (!r)
        return dt__fail(DT_ERR_INVALID, "dt_wait: request is NULL");
    if (r->job) /* a nonblocking collective: the progress thread's */
        return dt__job_wait(r);
    return r->comm->backend->wait(r, received);
}

dt_status dt_test(dt_request *r, int *done, size_t *received)
{
    if (!r || !done)
        return dt__fail(DT_ERR_INVALID, "dt_test: %s is NULL", r ? "done" : "request (req)");
    *done = 0;
    if (r->job)
        return dt__job_test(r, done);
    return r->comm->backend->test(r, done, received);
}

dt_status dt_cancel(dt_request *r)
{
    if (!r)
        return dt__fail(DT_ERR_INVALID, "dt_cancel: request is NULL");
    if (r->job)
        return dt__fail(DT_ERR_INVALID, "dt_cancel: a nonblocking collective cannot be cancelled (wait for it)");
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
