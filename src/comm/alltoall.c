/* Alltoall: every receive is posted first, then the sends in pairwise order
 * (rank r sends to r+1, r+2, ...), so no message waits in an unexpected
 * buffer and every link is busy. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "comm/coll.h"
#include "comm/colltrace.h"

static dt_status exchange(dt__coll *k, const uint8_t *src, uint8_t *dst, size_t bytes, dt__req *rq)
{
    int n = k->c->size, r = k->c->rank, nreq = 0;
    for (int i = 1; i < n; i++) {
        int from = (r - i + n) % n;
        DT_CHECK(dt__coll_recv(k, &rq[nreq++], from, 0, dst + (size_t)from * bytes, bytes));
    }
    for (int i = 1; i < n; i++) {
        int to = (r + i) % n;
        DT_CHECK(dt__coll_send(k, &rq[nreq++], to, 0, src + (size_t)to * bytes, bytes));
    }
    memcpy(dst + (size_t)r * bytes, src + (size_t)r * bytes, bytes);
    return dt__coll_wait(k, rq, (size_t)nreq);
}

dt_status dt_alltoall(const void *send, void *recv, size_t count, dt_dtype t, dt_comm *c)
{
    size_t es = dt_dtype_size(t);
    if (!es || !c)
        return dt__fail(DT_ERR_INVALID, "alltoall: invalid dtype or NULL communicator");
    size_t n = (size_t)c->size, bytes = count * es;
    DT_CHECK(dt__coll_check_buffers("alltoall", send, n * bytes, recv, n * bytes));
    dt__coll k;
    DT_CHECK(dt__coll_begin(&k, c, "alltoall"));
    DT_CHECK(dt__coll_trace(&k, count, t, -1, -1));
    if (bytes == 0)
        return DT_OK;
    if (dt__coll_pick(c, DT__COLL_ALLTOALL, n * bytes) == DT__ALG_SHM)
        return dt__shm_alltoall(&k, send, recv, bytes);
    const uint8_t *src = send;
    uint8_t *copy = NULL;
    if (send == recv) {
        copy = dt__comm_scratch(c, DT__SCRATCH_WORK, n * bytes);
        if (!copy)
            return dt__coll_error(&k, dt__fail(DT_ERR_NOMEM, "out of memory"));
        memcpy(copy, send, n * bytes);
        src = copy;
    }
    dt__req *rq = calloc(2 * n, sizeof *rq);
    dt_status s = rq ? exchange(&k, src, recv, bytes, rq) : dt__fail(DT_ERR_NOMEM, "out of memory");
    s = dt__coll_error(&k, s);
    free(rq);
    return s;
}
