/* Direct (one-step) allgather and reduce-scatter for small messages across
 * hosts: every rank sends each other rank the block it needs at once.  The
 * same bytes on every link as recursive doubling or halving, in one message
 * latency instead of log2(n); n-1 messages instead of log2(n).  They run
 * where the start-up timing found the direct allreduce faster, whose n-1
 * messages carry the whole buffer, not a block (dt__coll_pick). */
#include <stdint.h>
#include <string.h>

#include "base/reduce.h"
#include "base/status.h"
#include "comm/coll.h"

dt_status dt__direct_allgather(dt__coll *k, uint8_t *recv, size_t bytes)
{
    int n = k->c->size, r = k->c->rank, posted = 0;
    dt__req *rq = dt__comm_scratch(k->c, DT__SCRATCH_TMP, (size_t)(2 * (n - 1)) * sizeof(dt__req));
    if (!rq)
        return dt__fail(DT_ERR_NOMEM, "%s: out of memory", k->op);
    for (int j = 0; j < n; j++)
        if (j != r)
            DT_CHECK(dt__coll_recv(k, &rq[posted++], j, 0, recv + (size_t)j * bytes, bytes));
    for (int d = 1; d < n; d++) /* rank r+1 first, so not every rank sends to rank 0 first */
        DT_CHECK(dt__coll_send(k, &rq[posted++], (r + d) % n, 0, recv + (size_t)r * bytes, bytes));
    return dt__coll_wait(k, rq, (size_t)posted);
}

dt_status dt__direct_reduce_scatter(dt__coll *k, uint8_t *work, size_t count, dt_dtype t, dt_redop op)
{
    int n = k->c->size, r = k->c->rank, posted = 0;
    size_t bytes = count * dt_dtype_size(t);
    size_t head = ((size_t)(2 * (n - 1)) * sizeof(dt__req) + 63) / 64 * 64;
    uint8_t *tmp = dt__comm_scratch(k->c, DT__SCRATCH_TMP, head + (size_t)(n - 1) * bytes);
    if (!tmp)
        return dt__fail(DT_ERR_NOMEM, "%s: out of memory", k->op);
    dt__req *rq = (dt__req *)tmp;
    uint8_t *slots = tmp + head, *mine = work + (size_t)r * bytes;
#define CONTRIBUTION(j) ((j) == r ? mine : slots + (size_t)((j) < r ? (j) : (j) - 1) * bytes)
    for (int j = 0; j < n; j++)
        if (j != r)
            DT_CHECK(dt__coll_recv(k, &rq[posted++], j, 0, CONTRIBUTION(j), bytes));
    for (int d = 1; d < n; d++) {
        int to = (r + d) % n;
        DT_CHECK(dt__coll_send(k, &rq[posted++], to, 0, work + (size_t)to * bytes, bytes));
    }
    DT_CHECK(dt__coll_wait(k, rq, (size_t)posted));
    /* Folded in rank order into rank 0's contribution, so this rank's own
     * block is read before anything is written over it. */
    uint8_t *acc = CONTRIBUTION(0);
    for (int j = 1; j < n; j++)
        dt__reduce(acc, acc, CONTRIBUTION(j), count, t, op);
#undef CONTRIBUTION
    if (acc != mine)
        memcpy(mine, acc, bytes);
    return DT_OK;
}
