/* Recursive halving-doubling (Rabenseifner): a reduce-scatter by recursive
 * halving followed by an allgather by recursive doubling.
 *
 * Among p = 2^m ranks the buffer is cut into p blocks.  At each halving step
 * a rank swaps half of its current window with its partner and reduces the
 * half it keeps; the doubling steps run the same partners backwards and swap
 * whole windows.  A reduce-scatter takes partners at distance p/2, ..., 1,
 * which leaves block v on rank v; an allreduce takes them at distance 1, ...,
 * p/2, as recursive doubling does, so every element is reduced in the same
 * tree and order as there and the two algorithms give the same bits.
 *
 * Every rank sends (p-1)/p N bytes per phase, like the ring, but in log2 p
 * steps instead of p-1: the better choice where per-step latency, not
 * bandwidth, dominates.
 *
 * A world that is not a power of two folds its first 2*rem ranks in pairs
 * (the even rank hands its buffer to the odd one and gets the result at the
 * end), as the recursive-doubling allreduce does.  Each block is reduced by
 * one rank in a fixed order (lower virtual rank first) and then copied, so all
 * ranks end with the same bits. */
#include <stdlib.h>

#include "base/redop.h"
#include "base/status.h"
#include "comm/coll.h"

enum { FOLD_TAG = 0, UNFOLD_TAG = 1, STEP_TAG = 2 };

typedef struct {
    dt__coll *k;
    uint8_t *buf, *tmp;
    const size_t *off, *len; /* p blocks, in elements */
    size_t es;
    int p, rem, v;           /* power of two, folded pairs, this rank's virtual rank */
    bool rd_order;           /* partners at distance 1, 2, ..., p/2 (else p/2, ..., 1) */
} rhd;

static int real_rank(const rhd *h, int v) { return v < h->rem ? v * 2 + 1 : v + h->rem; }

/* Partner distance of halving step i (of log2 p). */
static int step_mask(const rhd *h, int i) { return h->rd_order ? 1 << i : h->p >> (i + 1); }

/* Byte range of blocks [lo, hi). */
static size_t span(const rhd *h, int lo, int hi, size_t *start)
{
    *start = h->off[lo] * h->es;
    return (h->off[hi - 1] + h->len[hi - 1]) * h->es - *start;
}

/* The window of blocks this rank holds before halving step i: every step
 * halves it and keeps the half that bit `mask` of the virtual rank names. */
static void window_before(const rhd *h, int i, int *lo, int *hi)
{
    *lo = 0;
    *hi = h->p;
    for (int j = 0; j < i; j++) {
        int mid = *lo + (*hi - *lo) / 2;
        if (h->v & step_mask(h, j))
            *lo = mid;
        else
            *hi = mid;
    }
}

static int log2_of(int p)
{
    int m = 0;
    while ((1 << m) < p)
        m++;
    return m;
}

static dt_status halving(rhd *h, dt_dtype t, dt_redop op, int *step)
{
    dt__req rq[2];
    for (int i = 0, steps = log2_of(h->p); i < steps; i++, (*step)++) {
        int mask = step_mask(h, i), pv = h->v ^ mask, lo, hi;
        window_before(h, i, &lo, &hi);
        int mid = lo + (hi - lo) / 2;
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
    }
    return DT_OK;
}

/* The halving steps backwards: swap the half kept at that step for the
 * partner's half, so the window doubles each time. */
static dt_status doubling(rhd *h, int *step)
{
    dt__req rq[2];
    for (int i = log2_of(h->p) - 1; i >= 0; i--, (*step)++) {
        int mask = step_mask(h, i), lo, hi;
        window_before(h, i, &lo, &hi);
        int mid = lo + (hi - lo) / 2;
        int mine_lo = h->v & mask ? mid : lo, mine_hi = h->v & mask ? hi : mid;
        int theirs_lo = h->v & mask ? lo : mid, theirs_hi = h->v & mask ? mid : hi;
        size_t ms, ts, mb = span(h, mine_lo, mine_hi, &ms), tb = span(h, theirs_lo, theirs_hi, &ts);
        int peer = real_rank(h, h->v ^ mask);
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
    int step = 0;
    if (h->v >= 0 && (phases & DT_RING_RS))
        DT_CHECK(halving(h, t, op, &step));
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
    /* A whole allreduce pairs ranks as recursive doubling does, so both give
     * the same bits and the choice between them may follow a measurement;
     * a reduce-scatter must leave block v on rank v, which needs the
     * partners the other way round. */
    rhd h = {.k = k, .buf = buf, .off = offsets, .len = lengths, .es = es, .p = p, .rem = n - p,
             .rd_order = phases == (DT_RING_RS | DT_RING_AG)};
    h.tmp = tmp_bytes ? dt__comm_scratch(k->c, DT__SCRATCH_TMP, tmp_bytes) : NULL;
    dt_status s = tmp_bytes && !h.tmp ? dt__fail(DT_ERR_NOMEM, "%s: out of memory", k->op)
                                      : run(&h, count, t, op, phases);
    return dt__coll_error(k, s);
}
