/* Gather and scatter: the root posts one receive (send) per rank at once, so
 * all transfers proceed concurrently and the root's link is the bottleneck. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "comm/coll.h"
#include "comm/colltrace.h"

static dt_status check_root(const char *op, dt_comm *c, int root, dt_dtype t)
{
    if (!c)
        return dt__fail(DT_ERR_INVALID, "%s: communicator is NULL", op);
    if (!dt_dtype_size(t))
        return dt__fail(DT_ERR_INVALID, "%s: invalid dtype %d", op, (int)t);
    if (root < 0 || root >= c->size)
        return dt__fail(DT_ERR_INVALID, "%s: root %d outside the communicator of %d ranks", op, root, c->size);
    return DT_OK;
}

/* Root side: one request per other rank on block b of buf. */
static dt_status root_all(dt__coll *k, bool is_send, uint8_t *buf, size_t bytes)
{
    int n = k->c->size;
    dt__req *rq = calloc((size_t)n, sizeof *rq);
    if (!rq)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    dt_status s = DT_OK;
    int nreq = 0;
    for (int b = 0; s == DT_OK && b < n; b++) {
        if (b == k->c->rank)
            continue;
        s = is_send ? dt__coll_send(k, &rq[nreq++], b, 0, buf + (size_t)b * bytes, bytes)
                    : dt__coll_recv(k, &rq[nreq++], b, 0, buf + (size_t)b * bytes, bytes);
    }
    if (s == DT_OK)
        s = dt__coll_wait(k, rq, (size_t)nreq);
    s = dt__coll_error(k, s);
    free(rq);
    return s;
}

static dt_status leaf(dt__coll *k, bool is_send, void *buf, size_t bytes, int root)
{
    dt__req rq;
    dt_status s = is_send ? dt__coll_send(k, &rq, root, 0, buf, bytes) : dt__coll_recv(k, &rq, root, 0, buf, bytes);
    if (s == DT_OK)
        s = dt__coll_wait(k, &rq, 1);
    return dt__coll_error(k, s);
}

dt_status dt__native_gather(const void *send, void *recv, size_t sendcount, dt_dtype t, int root, dt_comm *c)
{
    DT_CHECK(check_root("gather", c, root, t));
    size_t bytes;
    DT_CHECK(dt__coll_bytes("gather", sendcount, t, (size_t)c->size, &bytes));
    bool is_root = c->rank == root;
    DT_CHECK(dt__coll_check_buffers("gather", send, bytes, is_root ? recv : send,
                                    is_root ? (size_t)c->size * bytes : bytes));
    dt__coll k;
    DT_CHECK(dt__coll_begin(&k, c, "gather"));
    DT_CHECK(dt__coll_trace(&k, sendcount, t, -1, root));
    DT_CHECK(dt__coll_agree(&k));
    if (bytes == 0)
        return DT_OK;
    if (!is_root)
        return leaf(&k, true, (void *)send, bytes, root);
    if (send != recv)
        memcpy((uint8_t *)recv + (size_t)root * bytes, send, bytes);
    return root_all(&k, false, recv, bytes);
}

dt_status dt__native_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, int root, dt_comm *c)
{
    DT_CHECK(check_root("scatter", c, root, t));
    size_t bytes;
    DT_CHECK(dt__coll_bytes("scatter", recvcount, t, (size_t)c->size, &bytes));
    bool is_root = c->rank == root;
    DT_CHECK(dt__coll_check_buffers("scatter", is_root ? send : recv, is_root ? (size_t)c->size * bytes : bytes,
                                    recv, bytes));
    dt__coll k;
    DT_CHECK(dt__coll_begin(&k, c, "scatter"));
    DT_CHECK(dt__coll_trace(&k, recvcount, t, -1, root));
    DT_CHECK(dt__coll_agree(&k));
    if (bytes == 0)
        return DT_OK;
    if (!is_root)
        return leaf(&k, false, recv, bytes, root);
    if (send != recv)
        memcpy(recv, (const uint8_t *)send + (size_t)root * bytes, bytes);
    return root_all(&k, true, (uint8_t *)send, bytes);
}
