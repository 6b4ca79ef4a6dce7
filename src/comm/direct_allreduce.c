/* Direct (one-shot) allreduce for the smallest messages: every rank sends its
 * whole buffer to every other rank at once and reduces the n contributions
 * itself.  One message latency instead of recursive doubling's log2(n), for
 * n-1 times the bytes: it wins where a hop costs far more than the bytes
 * (docs/algorithms.md has the measurements).
 *
 * The contributions are combined in exactly the order recursive doubling
 * combines them (fold pairs (2i, 2i+1) for the ranks beyond the largest power
 * of two p, then a balanced tree over the p values, lower one first), so the
 * bits agree on every rank and do not depend on which of the two algorithms
 * the start-up timing chose (src/comm/tune.c). */
#include <stdint.h>
#include <string.h>

#include "base/reduce.h"
#include "base/status.h"
#include "comm/coll.h"

typedef struct {
    uint8_t *buf, *slots; /* this rank's contribution; the others', in rank order */
    size_t bytes;
    int rank;
} inputs;

static uint8_t *input(const inputs *in, int j)
{
    return j == in->rank ? in->buf : in->slots + (size_t)(j < in->rank ? j : j - 1) * in->bytes;
}

/* Recursive doubling's association over the n inputs; each combination
 * overwrites the storage of its right operand, which nothing reads again. */
static void reduce_in_rd_order(const inputs *in, uint8_t **val, int n, size_t count, dt_dtype t, dt_redop op)
{
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    int rem = n - p;
    for (int v = 0; v < p; v++) {
        if (v < rem) {
            val[v] = input(in, 2 * v + 1);
            dt__reduce(val[v], input(in, 2 * v), val[v], count, t, op);
        } else {
            val[v] = input(in, v + rem);
        }
    }
    for (int mask = 1; mask < p; mask <<= 1)
        for (int v = 0; v < p; v += 2 * mask) {
            dt__reduce(val[v + mask], val[v], val[v + mask], count, t, op);
            val[v] = val[v + mask];
        }
    if (val[0] != in->buf)
        memcpy(in->buf, val[0], in->bytes);
}

static dt_status run(dt__coll *k, const inputs *in, dt__req *rq, uint8_t **val, size_t count, dt_dtype t,
                     dt_redop op)
{
    int n = k->c->size, r = in->rank, posted = 0;
    for (int j = 0; j < n; j++)
        if (j != r)
            DT_CHECK(dt__coll_recv(k, &rq[posted++], j, 0, input(in, j), in->bytes));
    for (int d = 1; d < n; d++) /* rank r+1 first, so not every rank sends to rank 0 first */
        DT_CHECK(dt__coll_send(k, &rq[posted++], (r + d) % n, 0, in->buf, in->bytes));
    DT_CHECK(dt__coll_wait(k, rq, (size_t)posted));
    reduce_in_rd_order(in, val, n, count, t, op);
    return DT_OK;
}

dt_status dt__direct_allreduce(dt__coll *k, void *buf, size_t count, dt_dtype t, dt_redop op)
{
    int n = k->c->size;
    if (n == 1 || count == 0)
        return DT_OK;
    /* One scratch block: 2(n-1) requests, n value pointers, n-1 receive slots. */
    size_t head = ((size_t)(2 * (n - 1)) * sizeof(dt__req) + (size_t)n * sizeof(uint8_t *) + 63) / 64 * 64;
    inputs in = {buf, NULL, count * dt_dtype_size(t), k->c->rank};
    uint8_t *tmp = dt__comm_scratch(k->c, DT__SCRATCH_TMP, head + (size_t)(n - 1) * in.bytes);
    if (!tmp)
        return dt__coll_error(k, dt__fail(DT_ERR_NOMEM, "%s: out of memory", k->op));
    in.slots = tmp + head;
    dt__req *rq = (dt__req *)tmp;
    uint8_t **val = (uint8_t **)(tmp + (size_t)(2 * (n - 1)) * sizeof(dt__req));
    return dt__coll_error(k, run(k, &in, rq, val, count, t, op));
}
