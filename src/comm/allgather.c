/* Allgather: every rank to every rank in one step for the smallest messages
 * across hosts, recursive doubling (log2 n steps) for small ones on a power
 * of two ranks; otherwise the pipelined ring's allgather phase. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "comm/coll.h"
#include "comm/colltrace.h"

static dt_status recursive_doubling(dt__coll *k, uint8_t *recv, size_t bytes)
{
    int r = k->c->rank;
    dt__req rq[2];
    for (int mask = 1, step = 0; mask < k->c->size; mask <<= 1, step++) {
        int partner = r ^ mask;
        size_t mine = (size_t)(r & ~(mask - 1)), theirs = (size_t)(partner & ~(mask - 1));
        DT_CHECK(dt__coll_recv(k, &rq[0], partner, (uint32_t)step, recv + theirs * bytes, (size_t)mask * bytes));
        DT_CHECK(dt__coll_send(k, &rq[1], partner, (uint32_t)step, recv + mine * bytes, (size_t)mask * bytes));
        DT_CHECK(dt__coll_wait(k, rq, 2));
    }
    return DT_OK;
}

dt_status dt__native_allgather(const void *send, void *recv, size_t sendcount, dt_dtype t, dt_comm *c)
{
    if (!c)
        return dt__fail(DT_ERR_INVALID, "allgather: communicator is NULL");
    size_t bytes, n = (size_t)c->size;
    DT_CHECK(dt__coll_bytes("allgather", sendcount, t, n, &bytes));
    DT_CHECK(dt__coll_check_buffers("allgather", send, bytes, recv, n * bytes));
    dt__coll k;
    DT_CHECK(dt__coll_begin(&k, c, "allgather"));
    DT_CHECK(dt__coll_trace(&k, sendcount, t, -1, -1));
    if (bytes == 0)
        return DT_OK;
    uint8_t *out = recv;
    if (send != recv)
        memcpy(out + (size_t)c->rank * bytes, send, bytes);
    if (n == 1)
        return DT_OK;
    if (dt__hier_use(c, n * bytes))
        return dt__coll_error(&k, dt__hier_allgather(c, recv, sendcount, t));
    dt__alg alg = dt__coll_pick(c, DT__COLL_ALLGATHER, n * bytes);
    if (alg == DT__ALG_SHM)
        return dt__shm_allgather(&k, recv, bytes);
    if (alg == DT__ALG_DIRECT)
        return dt__coll_error(&k, dt__direct_allgather(&k, out, bytes));
    bool pow2 = (n & (n - 1)) == 0;
    if (!pow2 || alg == DT__ALG_RING) {
        size_t *off = malloc(2 * n * sizeof *off);
        if (!off)
            return dt__coll_error(&k, dt__fail(DT_ERR_NOMEM, "out of memory"));
        for (size_t b = 0; b < n; b++) {
            off[b] = b * sendcount;
            off[n + b] = sendcount;
        }
        dt_status s = dt__ring_run(&k, recv, off, off + n, t, DT_SUM, DT_RING_AG);
        free(off);
        return s;
    }
    return dt__coll_error(&k, recursive_doubling(&k, out, bytes));
}
