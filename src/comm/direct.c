/* Direct (one-step) collectives for the smallest messages: every rank sends
 * every other rank what it needs at once.  One message latency instead of
 * log2(n), for n-1 messages per rank (docs/algorithms.md has the
 * measurements).
 *
 * Allreduce sends the whole buffer to every rank, n-1 times the bytes of
 * recursive doubling; its contributions are combined in exactly the order
 * recursive doubling combines them (fold pairs (2i, 2i+1) for the ranks
 * beyond the largest power of two p, then a balanced tree over the p
 * values, lower one first), so the bits agree on every rank and do not
 * depend on which of the two algorithms the start-up timing chose
 * (src/comm/tune.c).  Allgather and reduce-scatter send each rank one
 * block, the same bytes on every link as doubling or halving. */
#include <stdint.h>
#include <string.h>

#include "base/reduce.h"
#include "base/status.h"
#include "comm/coll.h"

typedef struct {
    uint8_t *mine, *slots; /* this rank's contribution; the others', in rank order */
    dt__req *rq;           /* 2(n-1): the receives, then the sends */
    size_t bytes;          /* of one contribution */
    int rank;
} inputs;

static uint8_t *input(const inputs *in, int j)
{
    return j == in->rank ? in->mine : in->slots + (size_t)(j < in->rank ? j : j - 1) * in->bytes;
}

/* One scratch block: 2(n-1) requests, `extra` bytes (returned), n-1 receive
 * slots of `bytes`.  NULL when out of memory. */
static void *lay_out(dt__coll *k, uint8_t *mine, size_t bytes, size_t extra, inputs *in)
{
    int n = k->c->size;
    size_t reqs = (size_t)(2 * (n - 1)) * sizeof(dt__req), head = (reqs + extra + 63) / 64 * 64;
    uint8_t *tmp = dt__comm_scratch(k->c, DT__SCRATCH_TMP, head + (size_t)(n - 1) * bytes);
    if (!tmp)
        return NULL;
    *in = (inputs){mine, tmp + head, (dt__req *)tmp, bytes, k->c->rank};
    return tmp + reqs;
}

/* Every receive into the slots, then the sends to r+1, r+2, ... (so not
 * every rank sends to rank 0 first): to rank j the block at send + j *
 * stride (stride 0: the same buffer to every rank). */
static dt_status exchange(dt__coll *k, const inputs *in, const uint8_t *send, size_t stride)
{
    int n = k->c->size, r = in->rank, posted = 0;
    for (int j = 0; j < n; j++)
        if (j != r)
            DT_CHECK(dt__coll_recv(k, &in->rq[posted++], j, 0, input(in, j), in->bytes));
    for (int d = 1; d < n; d++) {
        int to = (r + d) % n;
        DT_CHECK(dt__coll_send(k, &in->rq[posted++], to, 0, send + (size_t)to * stride, in->bytes));
    }
    return dt__coll_wait(k, in->rq, (size_t)posted);
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
    if (val[0] != in->mine)
        memcpy(in->mine, val[0], in->bytes);
}

dt_status dt__direct_allreduce(dt__coll *k, void *buf, size_t count, dt_dtype t, dt_redop op)
{
    int n = k->c->size;
    if (n == 1 || count == 0)
        return DT_OK;
    inputs in;
    uint8_t **val = lay_out(k, buf, count * dt_dtype_size(t), (size_t)n * sizeof(uint8_t *), &in);
    if (!val)
        return dt__coll_error(k, dt__fail(DT_ERR_NOMEM, "%s: out of memory", k->op));
    dt_status s = exchange(k, &in, buf, 0);
    if (s == DT_OK)
        reduce_in_rd_order(&in, val, n, count, t, op);
    return dt__coll_error(k, s);
}

dt_status dt__direct_allgather(dt__coll *k, uint8_t *recv, size_t bytes)
{
    int n = k->c->size, r = k->c->rank, posted = 0;
    dt__req *rq = dt__comm_scratch(k->c, DT__SCRATCH_TMP, (size_t)(2 * (n - 1)) * sizeof(dt__req));
    if (!rq)
        return dt__fail(DT_ERR_NOMEM, "%s: out of memory", k->op);
    /* The blocks arrive in place, so no slots: the same order as exchange(). */
    for (int j = 0; j < n; j++)
        if (j != r)
            DT_CHECK(dt__coll_recv(k, &rq[posted++], j, 0, recv + (size_t)j * bytes, bytes));
    for (int d = 1; d < n; d++)
        DT_CHECK(dt__coll_send(k, &rq[posted++], (r + d) % n, 0, recv + (size_t)r * bytes, bytes));
    return dt__coll_wait(k, rq, (size_t)posted);
}

dt_status dt__direct_reduce_scatter(dt__coll *k, uint8_t *work, size_t count, dt_dtype t, dt_redop op)
{
    int n = k->c->size;
    size_t bytes = count * dt_dtype_size(t);
    inputs in;
    if (!lay_out(k, work + (size_t)k->c->rank * bytes, bytes, 0, &in))
        return dt__fail(DT_ERR_NOMEM, "%s: out of memory", k->op);
    DT_CHECK(exchange(k, &in, work, bytes));
    /* Folded in rank order into rank 0's contribution, so this rank's own
     * block is read before anything is written over it. */
    uint8_t *acc = input(&in, 0);
    for (int j = 1; j < n; j++)
        dt__reduce(acc, acc, input(&in, j), count, t, op);
    if (acc != in.mine)
        memcpy(in.mine, acc, bytes);
    return DT_OK;
}
