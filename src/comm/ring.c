/* Pipelined ring (reduce-scatter and/or allgather phase).
 *
 * The buffer is cut into n blocks and every block into segments of
 * DT_RING_SEGMENT bytes.  Segment s of every block forms an independent chain
 * of 2(n-1) steps: at reduce-scatter step t rank r sends block (r-t-1) and
 * receives block (r-t-2), which it reduces into its own copy and sends on at
 * step t+1; after n-1 steps it holds the full reduction of block r, which the
 * allgather steps carry round the ring (send block r-a, receive r-a-1 straight
 * into place).  Chains advance independently, so while one segment is being
 * reduced the next is on the wire: time ~ 2(n-1)/n * N/B whatever n is.
 *
 * Reduction order of block b is fixed (b+1, b+2, ..., b), so results are
 * deterministic, and only the owner computes the final value, so every rank
 * ends with the same bits. */
#include <stdlib.h>
#include <string.h>

#include "base/redop.h"
#include "base/status.h"
#include "comm/coll.h"

enum { PIPELINE_DEPTH = 4, MIN_SEGMENT = 8192 };

typedef struct {
    dt__coll *k;
    const uint8_t *src; /* this rank's input (== buf: in place) */
    uint8_t *buf, *tmp;
    const size_t *off, *len;
    size_t es, seg;
    int n, r, nseg, rs_steps, steps;
    dt__req *sends, *recvs;
    int *step;
} ring;

static int mod(int a, int n) { return ((a % n) + n) % n; }

static int send_block(const ring *g, int t)
{
    return t < g->rs_steps ? mod(g->r - t - 1, g->n) : mod(g->r - (t - g->rs_steps), g->n);
}

static int recv_block(const ring *g, int t)
{
    return t < g->rs_steps ? mod(g->r - t - 2, g->n) : mod(g->r - (t - g->rs_steps) - 1, g->n);
}

/* Element range [lo, lo+cnt) of segment s inside block b. */
static size_t seg_range(const ring *g, int b, int s, size_t *lo)
{
    *lo = (size_t)s * g->seg;
    if (*lo >= g->len[b])
        return 0;
    size_t hi = *lo + g->seg;
    return (hi > g->len[b] ? g->len[b] : hi) - *lo;
}

static dt_status post_step(ring *g, int s, int t)
{
    uint32_t subtag = (uint32_t)t * (uint32_t)g->nseg + (uint32_t)s;
    size_t lo;
    int sb = send_block(g, t), rb = recv_block(g, t);
    size_t cnt = seg_range(g, sb, s, &lo);
    /* Reduce-scatter's first step sends this rank's own input; every later
     * step sends what the step before wrote into buf. */
    const uint8_t *from = t == 0 && g->rs_steps ? g->src : g->buf;
    DT_CHECK(dt__coll_send(g->k, &g->sends[(size_t)s * g->steps + t], mod(g->r + 1, g->n), subtag,
                           from + (g->off[sb] + lo) * g->es, cnt * g->es));
    cnt = seg_range(g, rb, s, &lo);
    uint8_t *dst = t < g->rs_steps ? g->tmp + lo * g->es : g->buf + (g->off[rb] + lo) * g->es;
    return dt__coll_recv(g->k, &g->recvs[s], mod(g->r - 1, g->n), subtag, dst, cnt * g->es);
}

/* A segment's receive for its current step finished: reduce, then advance. */
static dt_status advance(ring *g, int s, dt_dtype t, dt_redop op, int *remaining)
{
    int step = g->step[s];
    if (step < g->rs_steps) {
        size_t lo;
        int rb = recv_block(g, step);
        size_t cnt = seg_range(g, rb, s, &lo);
        /* Each block arrives once in reduce-scatter: combined with this
         * rank's input, the sum lands in buf. */
        size_t at = (g->off[rb] + lo) * g->es;
        dt__reduce(g->buf + at, g->tmp + lo * g->es, g->src + at, cnt, t, op);
    }
    g->step[s] = ++step;
    if (step == g->steps) {
        (*remaining)--;
        return DT_OK;
    }
    return post_step(g, s, step);
}

static dt_status run(ring *g, dt_dtype t, dt_redop op)
{
    for (int s = 0; s < g->nseg; s++)
        DT_CHECK(post_step(g, s, 0));
    int remaining = g->nseg;
    bool idle = false;
    while (remaining > 0) {
        if (idle)
            DT_CHECK(dt__coll_progress(g->k));
        idle = true;
        for (int s = 0; s < g->nseg; s++) {
            if (g->step[s] == g->steps || !dt__req_done(&g->recvs[s]))
                continue;
            if (g->recvs[s].status != DT_OK)
                return dt__engine_status(g->k->c->world->eng);
            idle = false;
            DT_CHECK(advance(g, s, t, op, &remaining));
        }
    }
    return dt__coll_wait(g->k, g->sends, (size_t)g->nseg * g->steps);
}

dt_status dt__ring_run(dt__coll *k, void *buf, const size_t *offsets, const size_t *lengths, dt_dtype t,
                       dt_redop op, int phases)
{
    return dt__ring_run_from(k, buf, buf, offsets, lengths, t, op, phases);
}

dt_status dt__ring_run_from(dt__coll *k, const void *src, void *buf, const size_t *offsets,
                            const size_t *lengths, dt_dtype t, dt_redop op, int phases)
{
    int n = k->c->size;
    size_t maxlen = 0;
    for (int b = 0; b < n; b++)
        if (lengths[b] > maxlen)
            maxlen = lengths[b];
    if (n == 1 && src != buf && (phases & DT_RING_RS))
        memcpy(buf, src, lengths[0] * dt_dtype_size(t));
    if (n == 1 || maxlen == 0)
        return DT_OK;
    ring g = {.k = k, .src = src, .buf = buf, .off = offsets, .len = lengths, .es = dt_dtype_size(t), .n = n,
              .r = k->c->rank};
    /* At least PIPELINE_DEPTH segments per block so a mid-sized message still
     * pipelines, but no segment below MIN_SEGMENT bytes (per-message cost). */
    size_t seg_bytes = k->c->segment_bytes;
    if (maxlen * g.es / PIPELINE_DEPTH < seg_bytes)
        seg_bytes = maxlen * g.es / PIPELINE_DEPTH;
    if (seg_bytes < MIN_SEGMENT)
        seg_bytes = MIN_SEGMENT < k->c->segment_bytes ? MIN_SEGMENT : k->c->segment_bytes;
    g.seg = seg_bytes / g.es ? seg_bytes / g.es : 1;
    g.nseg = (int)((maxlen + g.seg - 1) / g.seg);
    g.rs_steps = (phases & DT_RING_RS) ? n - 1 : 0;
    g.steps = g.rs_steps + ((phases & DT_RING_AG) ? n - 1 : 0);
    if ((uint64_t)g.steps * (uint64_t)g.nseg > DT__SUBTAG_MAX)
        return dt__fail(DT_ERR_INVALID, "%s: %zu elements need more ring segments than tags allow; raise DT_RING_SEGMENT",
                        k->op, maxlen);
    g.tmp = g.rs_steps ? dt__comm_scratch(k->c, DT__SCRATCH_TMP, maxlen * g.es) : NULL;
    g.sends = calloc((size_t)g.nseg * (size_t)g.steps, sizeof *g.sends);
    g.recvs = calloc((size_t)g.nseg, sizeof *g.recvs);
    g.step = calloc((size_t)g.nseg, sizeof *g.step);
    dt_status s;
    if ((g.rs_steps && !g.tmp) || !g.sends || !g.recvs || !g.step)
        s = dt__fail(DT_ERR_NOMEM, "%s: out of memory for the ring's buffers", k->op);
    else
        s = run(&g, t, op);
    s = dt__coll_error(k, s); /* cancels what is still pending before the memory goes */
    free(g.sends);
    free(g.recvs);
    free(g.step);
    return s;
}
