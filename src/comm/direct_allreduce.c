/* Direct (one-shot) allreduce for the smallest messages: every rank sends its
 * whole buffer to every other rank at once and reduces the n contributions
 * itself.  One message latency instead of recursive doubling's log2(n), for
 * n-1 times the bytes: it wins where a hop costs far more than the bytes
 * (docs/algorithms.md has the measurements).  Every rank reduces in rank
 * order, ((x0 OP x1) OP x2) ..., so the bits agree on every rank. */
#include <stdint.h>

#include "base/reduce.h"
#include "base/status.h"
#include "comm/coll.h"

static dt_status run(dt__coll *k, uint8_t *buf, dt__req *rq, uint8_t *slots, size_t count, dt_dtype t, dt_redop op)
{
    int n = k->c->size, r = k->c->rank;
    size_t bytes = count * dt_dtype_size(t);
    /* slot of rank j (j != r): the contributions in rank order, r left out */
#define SLOT(j) (slots + (size_t)((j) < r ? (j) : (j)-1) * bytes)
    int posted = 0;
    for (int j = 0; j < n; j++)
        if (j != r)
            DT_CHECK(dt__coll_recv(k, &rq[posted++], j, 0, SLOT(j), bytes));
    for (int d = 1; d < n; d++) /* rank r+1 first, so not every rank sends to rank 0 first */
        DT_CHECK(dt__coll_send(k, &rq[posted++], (r + d) % n, 0, buf, bytes));
    DT_CHECK(dt__coll_wait(k, rq, (size_t)posted));
    /* acc = x0; acc = acc OP xj for j = 1..n-1; the last step writes buf. */
    const uint8_t *acc = r == 0 ? buf : SLOT(0);
    for (int j = 1; j < n; j++) {
        uint8_t *out = j == n - 1 || r == 0 ? buf : SLOT(0);
        dt__reduce(out, acc, j == r ? buf : SLOT(j), count, t, op);
        acc = out;
    }
#undef SLOT
    return DT_OK;
}

dt_status dt__direct_allreduce(dt__coll *k, void *buf, size_t count, dt_dtype t, dt_redop op)
{
    int n = k->c->size;
    if (n == 1 || count == 0)
        return DT_OK;
    /* One scratch block: the 2(n-1) requests, then n-1 receive slots. */
    size_t reqs = ((size_t)(2 * (n - 1)) * sizeof(dt__req) + 63) / 64 * 64;
    uint8_t *tmp = dt__comm_scratch(k->c, DT__SCRATCH_TMP, reqs + (size_t)(n - 1) * count * dt_dtype_size(t));
    dt_status s = tmp ? run(k, buf, (dt__req *)tmp, tmp + reqs, count, t, op)
                      : dt__fail(DT_ERR_NOMEM, "%s: out of memory", k->op);
    return dt__coll_error(k, s);
}
