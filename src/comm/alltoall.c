/* Alltoall over messages (a communicator on one host uses its shared arena
 * unless DT_SHM_COLL=off).  Rank r sends to r+i and receives from r-i in step i.
 * Small pieces go all at once; large ones (DT__ALG_RING, docs/algorithms.md)
 * pairwise, step i+1 once step i is done, so that each link carries one flow
 * each way. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "comm/coll.h"
#include "comm/colltrace.h"

/* Every receive is posted first, so that nothing waits in an unexpected
 * buffer; then the sends, step i to rank r+i.  Pairwise, step i's send goes
 * once step i-1's send and receive are done.  rq: 2(n-1) requests, step i's
 * receive at rq[2(i-1)] and its send after it. */
static dt_status exchange(dt__coll *k, const uint8_t *src, uint8_t *dst, size_t bytes, dt__req *rq, bool pairwise)
{
    int n = k->c->size, r = k->c->rank;
    memcpy(dst + (size_t)r * bytes, src + (size_t)r * bytes, bytes);
    for (int i = 1; i < n; i++) {
        int from = (r - i + n) % n;
        DT_CHECK(dt__coll_recv(k, &rq[2 * (i - 1)], from, 0, dst + (size_t)from * bytes, bytes));
    }
    for (int i = 1; i < n; i++) {
        if (pairwise && i > 1)
            DT_CHECK(dt__coll_wait(k, &rq[2 * (i - 2)], 2));
        int to = (r + i) % n;
        DT_CHECK(dt__coll_send(k, &rq[2 * (i - 1) + 1], to, 0, src + (size_t)to * bytes, bytes));
    }
    int first = pairwise && n > 2 ? n - 2 : 0; /* the first step not waited for yet */
    return dt__coll_wait(k, &rq[2 * first], 2 * (size_t)(n - 1 - first));
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
    dt__alg alg = dt__coll_pick(c, DT__COLL_ALLTOALL, n * bytes);
    if (alg == DT__ALG_SHM)
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
    dt_status s = rq ? exchange(&k, src, recv, bytes, rq, alg == DT__ALG_RING) : dt__fail(DT_ERR_NOMEM, "out of memory");
    s = dt__coll_error(&k, s);
    free(rq);
    return s;
}
