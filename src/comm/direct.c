/* Direct (one-step) collectives for the smallest messages: every rank sends
 * every other rank what it needs at once.  One message latency instead of
 * log2(n), for n-1 messages per rank (docs/algorithms.md has the
 * measurements).
 *
 * Allreduce sends the whole buffer to every rank, n-1 times the bytes of
 * recursive doubling; allgather and reduce-scatter send each rank one
 * block, the same bytes on every link as doubling or halving.  The
 * reductions combine their n contributions in exactly the order of the
 * algorithm that runs at that size without the direct one (recursive
 * doubling, halving, or the ring; below), so the bits agree on every rank
 * and do not depend on whether the start-up timing (src/comm/tune.c) chose
 * direct: a reduction's order never depends on timing (docs/algorithms.md,
 * "Determinism"). */
#include <stdint.h>
#include <string.h>

#include "base/redop.h"
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

/* The n inputs are combined in the association of the algorithm the size
 * rule runs at this size (dt__coll_direct_order), so that the start-up
 * timing, which only decides between direct and that algorithm, never
 * changes a bit (nor does DT_DIRECT_MSG):
 *   - recursive doubling, and the halving-doubling allreduce: folded pairs
 *     (2i, 2i+1), then a balanced tree pairing at distance 1, 2, ..., p/2;
 *   - the halving reduce-scatter (a power of two): pairs at distance p/2,
 *     ..., 1;
 *   - the ring's block b: b+1, b+2, ..., b, folded left.
 * Every combination op(a, b) takes the same operand first as there. */

/* Elements [at, at + count) (at in bytes) of the n inputs combined in a
 * tree; each combination overwrites the storage of its right operand, which
 * nothing reads again.  The result into this rank's input. */
static void reduce_tree(const inputs *in, uint8_t **val, int n, size_t at, size_t count, dt_dtype t, dt_redop op,
                        bool halving)
{
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    int rem = n - p; /* only recursive doubling folds: halving needs a power of two */
    for (int v = 0; v < p; v++) {
        if (v < rem) {
            val[v] = input(in, 2 * v + 1) + at;
            dt__reduce(val[v], input(in, 2 * v) + at, val[v], count, t, op);
        } else {
            val[v] = input(in, v + rem) + at;
        }
    }
    for (int step = 1, done = 0; step < p; step <<= 1) {
        int mask = halving ? p / (2 * step) : step;
        for (int v = 0; v < p; v++) {
            if (v & (mask | done))
                continue;
            dt__reduce(val[v | mask], val[v], val[v | mask], count, t, op);
            val[v] = val[v | mask];
        }
        done |= mask;
    }
    if (val[0] != in->mine + at)
        memcpy(in->mine + at, val[0], count * dt_dtype_size(t));
}

/* Elements [at, at + count) of the inputs folded left from b+1 round to b,
 * into the storage of input b+1 (read by nothing else), the result into
 * this rank's input. */
static void reduce_ring(const inputs *in, int n, int b, size_t at, size_t count, dt_dtype t, dt_redop op)
{
    uint8_t *acc = input(in, (b + 1) % n) + at;
    for (int d = 2; d <= n; d++)
        dt__reduce(acc, acc, input(in, (b + d) % n) + at, count, t, op);
    if (acc != in->mine + at)
        memcpy(in->mine + at, acc, count * dt_dtype_size(t));
}

dt_status dt__direct_allreduce(dt__coll *k, void *buf, size_t count, dt_dtype t, dt_redop op)
{
    int n = k->c->size;
    if (n == 1 || count == 0)
        return DT_OK;
    size_t es = dt_dtype_size(t);
    inputs in;
    uint8_t **val = lay_out(k, buf, count * es, (size_t)n * sizeof(uint8_t *), &in);
    if (!val)
        return dt__coll_error(k, dt__fail(DT_ERR_NOMEM, "%s: out of memory", k->op));
    dt_status s = exchange(k, &in, buf, 0);
    if (s != DT_OK)
        return dt__coll_error(k, s);
    /* Halving-doubling allreduce pairs as recursive doubling does (rhd.c). */
    if (dt__coll_direct_order(k->c, DT__COLL_ALLREDUCE, count * es) != DT__ALG_RING) {
        reduce_tree(&in, val, n, 0, count, t, op, false);
        return DT_OK;
    }
    /* The ring's n blocks (dt__split_blocks), block b in its own order. */
    size_t base = count / (size_t)n, extra = count % (size_t)n, lo = 0;
    for (int b = 0; b < n; b++) {
        size_t len = base + ((size_t)b < extra ? 1 : 0);
        if (len)
            reduce_ring(&in, n, b, lo * es, len, t, op);
        lo += len;
    }
    return DT_OK;
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
    int n = k->c->size, r = k->c->rank;
    size_t bytes = count * dt_dtype_size(t);
    inputs in;
    uint8_t **val = lay_out(k, work + (size_t)r * bytes, bytes, (size_t)n * sizeof(uint8_t *), &in);
    if (!val)
        return dt__fail(DT_ERR_NOMEM, "%s: out of memory", k->op);
    DT_CHECK(exchange(k, &in, work, bytes));
    /* Block r as the algorithm below the threshold reduces it: recursive
     * doubling's allreduce of the whole buffer, halving's reduce-scatter,
     * or the ring's, whose block r ends on rank r. */
    dt__alg alg = dt__coll_direct_order(k->c, DT__COLL_REDUCE_SCATTER, (size_t)n * bytes);
    if (alg == DT__ALG_RING)
        reduce_ring(&in, n, r, 0, count, t, op);
    else
        reduce_tree(&in, val, n, 0, count, t, op, alg == DT__ALG_RHD);
    return DT_OK;
}
