/* Recursive halving-doubling (Rabenseifner): a reduce-scatter by recursive
 * halving followed by an allgather by recursive doubling.
 *
 * Among p = 2^m ranks the buffer is cut into p blocks.  At halving step i
 * (distance p/2, p/4, ..., 1) each rank swaps half of its current window with
 * the partner at that distance and reduces the half it keeps, so after m steps
 * rank v holds the reduction of block v.  The doubling steps run the same
 * partners backwards and swap whole windows.  Every rank sends (p-1)/p N
 * bytes per phase, like the ring, but in log2 p steps instead of p-1: the
 * better choice where per-step latency, not bandwidth, dominates.
 *
 * A world that is not a power of two folds its first 2*rem ranks in pairs
 * (the even rank hands its buffer to the odd one and gets the result at the
 * end), as the recursive-doubling allreduce does.  Each block is reduced by
 * one rank in a fixed order (lower virtual rank first) and then copied, so all
 * ranks end with the same bits. */
#include <stdlib.h>

#include "base/reduce.h"
#include "base/status.h"
#include "comm/coll.h"

enum { FOLD_TAG = 0, UNFOLD_TAG = 1, STEP_TAG = 2 };

typedef struct {
    dt__coll *k;
    uint8_t *buf, *tmp;
    const size_t *off, *len; /* p blocks, in elements */
    size_t es;
    int p, rem, v;           /* power of two, folded pairs, this rank's virtual rank */
} rhd;

static int real_rank(const rhd *h, int v) { return v < h->rem ? v * 2 + 1 : v + h->rem; }

/* Byte range of blocks [lo, hi). */
static size_t span(const rhd *h, int lo, int hi, size_t *start)
{
    *start = h->off[lo] * h->es;
    return (h->off[hi - 1] + h->len[hi - 1]) * h->es - *start;
}

static dt_status halving(rhd *h, dt_dtype t, dt_redop op, int *lo_out, int *step)
{
    int lo = 0, hi = h->p;
    dt__req rq[2];
    for (int mask = h->p / 2; mask > 0; mask >>= 1, (*step)++) {
        int pv = h->v ^ mask, mid = lo + (hi - lo) / 2;
        int keep_lo = h->v & mask ? mid : lo, keep_hi = h->v & mask ? hi : mid;
        int give_lo = h->v & mask ? lo : mid, give_hi = h->v & mask ? mid : hi;
        size_t ks, gs, kb = span(h, keep_lo, keep_hi, &ks), gb = span(h, give_lo, give_hi, &gs);
        int peer = real_rank(h, pv);
        DT_CHECK(dt__coll_recv(h->k, &rq[0], peer, STEP_TAG + (uint32_t)*step, h->tmp, kb));
        DT_CHECK(dt__coll_send(h->k, &rq[1], peer, STEP_TAG + (uint32_t)*step, h->buf + gs, gb));
        DT_CHECK(dt__coll_wait(h->k, rq, 2));
        uint8_t *mine = h->buf + ks;
        size_t cnt = kb / h->es;
        if (pv < h->v)
            dt__reduce(mine, h->tmp, mine, cnt, t, op);
        else
            dt__reduce(mine, mine, h->tmp, cnt, t, op);
        lo = keep_lo;
        hi = keep_hi;
    }
    *lo_out = lo;
    return DT_OK;
}

static dt_status doubling(rhd *h, int *step)
{
    dt__req rq[2];
    for (int mask = 1; mask < h->p; mask <<= 1, (*step)++) {
        int pv = h->v ^ mask;
        int mine_lo = h->v & ~(mask - 1), theirs_lo = pv & ~(mask - 1);
        size_t ms, ts, mb = span(h, mine_lo, mine_lo + mask, &ms), tb = span(h, theirs_lo, theirs_lo + mask, &ts);
        int peer = real_rank(h, pv);
        DT_CHECK(dt__coll_recv(h->k, &rq[0], peer, STEP_TAG + (uint32_t)*step, h->buf + ts, tb));
        DT_CHECK(dt__coll_send(h->k, &rq[1], peer, STEP_TAG + (uint32_t)*step, h->buf + ms, mb));
        DT_CHECK(dt__coll_wait(h->k, rq, 2));
    }
    return DT_OK;
}

static dt_status run(rhd *h, size_t count, dt_dtype t, dt_redop op, int phases)
{
    int r = h->k->c->rank;
    size_t bytes = count * h->es;
    dt__req rq[1];
    h->v = r - h->rem;
    if (r < 2 * h->rem) {
        if (r % 2 == 0) {
            DT_CHECK(dt__coll_send(h->k, &rq[0], r + 1, FOLD_TAG, h->buf, bytes));
            DT_CHECK(dt__coll_wait(h->k, rq, 1));
            h->v = -1;
        } else {
            DT_CHECK(dt__coll_recv(h->k, &rq[0], r - 1, FOLD_TAG, h->tmp, bytes));
            DT_CHECK(dt__coll_wait(h->k, rq, 1));
            dt__reduce(h->buf, h->tmp, h->buf, count, t, op);
            h->v = r / 2;
        }
    }
    int step = 0, lo;
    if (h->v >= 0 && (phases & DT_RING_RS))
        DT_CHECK(halving(h, t, op, &lo, &step));
    if (h->v >= 0 && (phases & DT_RING_AG))
        DT_CHECK(doubling(h, &step));
    if (r < 2 * h->rem) {
        if (r % 2 == 1)
            DT_CHECK(dt__coll_send(h->k, &rq[0], r - 1, UNFOLD_TAG, h->buf, bytes));
        else
            DT_CHECK(dt__coll_recv(h->k, &rq[0], r + 1, UNFOLD_TAG, h->buf, bytes));
        DT_CHECK(dt__coll_wait(h->k, rq, 1));
    }
    return DT_OK;
}

dt_status dt__rhd_run(dt__coll *k, void *buf, size_t count, const size_t *offsets, const size_t *lengths,
                      dt_dtype t, dt_redop op, int phases)
{
    int n = k->c->size, p = 1;
    while (p * 2 <= n)
        p *= 2;
    if (n == 1 || count == 0)
        return DT_OK;
    if (p != n && phases != (DT_RING_RS | DT_RING_AG))
        return dt__coll_error(k, dt__fail(DT_ERR_INTERNAL, "%s: halving-doubling reduce-scatter or allgather needs a power-of-two world, not %d",
                                          k->op, n));
    size_t es = dt_dtype_size(t);
    /* Incoming partials (the fold's whole buffer, the halving's halves). */
    size_t tmp_bytes = p != n || (phases & DT_RING_RS) ? count * es : 0;
    rhd h = {.k = k, .buf = buf, .off = offsets, .len = lengths, .es = es, .p = p, .rem = n - p};
    h.tmp = tmp_bytes ? dt__comm_scratch(k->c, DT__SCRATCH_TMP, tmp_bytes) : NULL;
    dt_status s = tmp_bytes && !h.tmp ? dt__fail(DT_ERR_NOMEM, "%s: out of memory", k->op)
                                      : run(&h, count, t, op, phases);
    return dt__coll_error(k, s);
}
