/* Reduce to a root: binomial tree for small messages; for large ones a ring
 * reduce-scatter followed by each rank sending its reduced block to the root
 * (every link carries ~N/n per step instead of the tree's N). */
#include <stdlib.h>
#include <string.h>

#include "base/redop.h"
#include "base/status.h"
#include "comm/coll.h"
#include "comm/colltrace.h"

#define GATHER_SUBTAG (DT__SUBTAG_MAX - 1)

static dt_status tree(dt__coll *k, uint8_t *work, size_t count, dt_dtype t, dt_redop op, int root)
{
    int n = k->c->size, v = (k->c->rank - root + n) % n;
    size_t bytes = count * dt_dtype_size(t);
    uint8_t *tmp = dt__comm_scratch(k->c, DT__SCRATCH_TMP, bytes);
    if (!tmp)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    dt_status s = DT_OK;
    dt__req rq;
    for (int mask = 1; s == DT_OK && mask < n; mask <<= 1) {
        if (v & mask) {
            s = dt__coll_send(k, &rq, (v - mask + root) % n, 0, work, bytes);
            if (s == DT_OK)
                s = dt__coll_wait(k, &rq, 1);
            break;
        }
        if (v + mask < n) {
            s = dt__coll_recv(k, &rq, (v + mask + root) % n, 0, tmp, bytes);
            if (s == DT_OK)
                s = dt__coll_wait(k, &rq, 1);
            if (s == DT_OK)
                dt__reduce(work, work, tmp, count, t, op); /* lower virtual rank first */
        }
    }
    return s;
}

static dt_status ring_then_gather(dt__coll *k, uint8_t *work, void *recv, size_t count, dt_dtype t,
                                  dt_redop op, int root, size_t *off)
{
    int n = k->c->size, r = k->c->rank;
    size_t es = dt_dtype_size(t), *len = off + n;
    dt__split_blocks(count, n, off, len);
    DT_CHECK(dt__ring_run(k, work, off, len, t, op, DT_RING_RS));
    if (r != root) {
        dt__req rq;
        DT_CHECK(dt__coll_send(k, &rq, root, GATHER_SUBTAG, work + off[r] * es, len[r] * es));
        return dt__coll_wait(k, &rq, 1);
    }
    dt__req *rq = calloc((size_t)n, sizeof *rq);
    if (!rq)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    dt_status s = DT_OK;
    int nreq = 0;
    for (int b = 0; s == DT_OK && b < n; b++)
        if (b != root)
            s = dt__coll_recv(k, &rq[nreq++], b, GATHER_SUBTAG, (uint8_t *)recv + off[b] * es, len[b] * es);
    memcpy((uint8_t *)recv + off[root] * es, work + off[root] * es, len[root] * es);
    if (s == DT_OK)
        s = dt__coll_wait(k, rq, (size_t)nreq);
    free(rq);
    return s;
}

dt_status dt__native_reduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, int root, dt_comm *c)
{
    DT_CHECK(dt__check_dtype_op("reduce", t, op));
    if (c && (root < 0 || root >= c->size))
        return dt__fail(DT_ERR_INVALID, "reduce: root %d outside the communicator of %d ranks", root, c->size);
    size_t bytes;
    DT_CHECK(dt__coll_bytes("reduce", count, t, 1, &bytes));
    bool is_root = c && c->rank == root;
    DT_CHECK(dt__coll_check_buffers("reduce", send, bytes, is_root ? recv : send, bytes));
    dt__coll k;
    DT_CHECK(dt__coll_begin_reducing(&k, c, "reduce"));
    DT_CHECK(dt__coll_trace(&k, count, t, (int)op, root));
    DT_CHECK(dt__coll_agree(&k));
    if (count == 0)
        return DT_OK;
    uint8_t *work = dt__comm_scratch(c, DT__SCRATCH_WORK, bytes);
    size_t *off = malloc(2 * (size_t)c->size * sizeof *off);
    if (!work || !off) {
        free(off);
        return dt__coll_error(&k, dt__fail(DT_ERR_NOMEM, "out of memory"));
    }
    memcpy(work, send, bytes);
    dt_status s;
    bool ring = dt__coll_pick(c, DT__COLL_REDUCE, bytes) == DT__ALG_RING;
    if (c->size == 1)
        s = DT_OK;
    else if (ring)
        s = ring_then_gather(&k, work, recv, count, t, op, root, off);
    else
        s = tree(&k, work, count, t, op, root);
    s = dt__coll_error(&k, s);
    if (s == DT_OK && is_root) {
        if (c->size == 1 || !ring)
            memcpy(recv, work, bytes);
        dt__reduce_finish(recv, count, t, op, c->size);
    }
    free(off);
    return s;
}
