/* Broadcast: binomial tree for small messages (log2 n steps); for large ones
 * a pipelined chain between hosts (every link carries the message once, in
 * segments, so the time approaches N/B for any n), and on one host a scatter
 * from the root followed by a ring allgather (a chain there forwards every
 * byte through every rank's rings one after the other: 4 ranks on 2 cores,
 * 64 MiB, 240 ms against 60). */
#include <stdlib.h>

#include "base/status.h"
#include "comm/coll.h"
#include "comm/colltrace.h"

dt_status dt__tree_bcast(dt__coll *k, void *buf, size_t bytes, int root)
{
    int n = k->c->size, v = (k->c->rank - root + n) % n;
    dt__req rq[32];
    int mask = 1;
    while (mask < n) {
        if (v & mask) {
            DT_CHECK(dt__coll_recv(k, &rq[0], (v - mask + root) % n, 0, buf, bytes));
            DT_CHECK(dt__coll_wait(k, rq, 1));
            break;
        }
        mask <<= 1;
    }
    int nreq = 0;
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (v + mask < n)
            DT_CHECK(dt__coll_send(k, &rq[nreq++], (v + mask + root) % n, 0, buf, bytes));
    return dt__coll_wait(k, rq, (size_t)nreq);
}

static dt_status chain(dt__coll *k, uint8_t *buf, size_t bytes, int root, dt__req *recvs, dt__req *sends,
                       size_t nseg, size_t seg)
{
    int n = k->c->size, r = k->c->rank, v = (r - root + n) % n;
    int prev = (r - 1 + n) % n, next = (r + 1) % n;
    bool last = v == n - 1;
    for (size_t s = 0; s < nseg; s++) {
        size_t len = s + 1 < nseg ? seg : bytes - s * seg;
        if (v == 0)
            DT_CHECK(dt__coll_send(k, &sends[s], next, (uint32_t)s, buf + s * seg, len));
        else
            DT_CHECK(dt__coll_recv(k, &recvs[s], prev, (uint32_t)s, buf + s * seg, len));
    }
    if (v != 0 && !last) {
        size_t forwarded = 0;
        while (forwarded < nseg) {
            /* Segments arrive in order on one connection: forward each as it lands. */
            if (dt__req_done(&recvs[forwarded])) {
                if (recvs[forwarded].status != DT_OK)
                    return dt__engine_status(k->c->world->eng);
                size_t len = forwarded + 1 < nseg ? seg : bytes - forwarded * seg;
                DT_CHECK(dt__coll_send(k, &sends[forwarded], next, (uint32_t)forwarded, buf + forwarded * seg, len));
                forwarded++;
                continue;
            }
            DT_CHECK(dt__coll_progress(k));
        }
    }
    if (v != 0)
        DT_CHECK(dt__coll_wait(k, recvs, nseg));
    return last ? DT_OK : dt__coll_wait(k, sends, nseg);
}

dt_status dt__chain_bcast(dt__coll *k, void *buf, size_t bytes, int root)
{
    size_t seg = k->c->segment_bytes, nseg = (bytes + seg - 1) / seg;
    dt__req *rq = calloc(2 * nseg, sizeof *rq);
    dt_status s = rq ? chain(k, buf, bytes, root, rq, rq + nseg, nseg, seg)
                     : dt__fail(DT_ERR_NOMEM, "%s: out of memory", k->op);
    s = dt__coll_error(k, s);
    free(rq);
    return s;
}

#define SCATTER_SUBTAG (DT__SUBTAG_MAX - 2)

static dt_status scatter_allgather(dt__coll *k, uint8_t *buf, size_t bytes, int root, size_t *off)
{
    int n = k->c->size, r = k->c->rank;
    size_t *len = off + n;
    dt__split_blocks(bytes, n, off, len);
    dt__req *rq = calloc((size_t)n, sizeof *rq);
    if (!rq)
        return dt__fail(DT_ERR_NOMEM, "%s: out of memory", k->op);
    dt_status s = DT_OK;
    int nreq = 0;
    if (r == root) {
        for (int b = 0; s == DT_OK && b < n; b++)
            if (b != root)
                s = dt__coll_send(k, &rq[nreq++], b, SCATTER_SUBTAG, buf + off[b], len[b]);
    } else {
        s = dt__coll_recv(k, &rq[nreq++], root, SCATTER_SUBTAG, buf + off[r], len[r]);
    }
    if (s == DT_OK)
        s = dt__coll_wait(k, rq, (size_t)nreq);
    free(rq);
    return s == DT_OK ? dt__ring_run(k, buf, off, len, DT_U8, DT_SUM, DT_RING_AG) : s;
}

dt_status dt__native_broadcast(void *buf, size_t count, dt_dtype t, int root, dt_comm *c)
{
    size_t bytes;
    DT_CHECK(dt__coll_bytes("broadcast", count, t, 1, &bytes));
    if (c && (root < 0 || root >= c->size))
        return dt__fail(DT_ERR_INVALID, "broadcast: root %d outside the communicator of %d ranks", root, c->size);
    DT_CHECK(dt__coll_check_buffers("broadcast", buf, bytes, buf, bytes));
    dt__coll k;
    DT_CHECK(dt__coll_begin(&k, c, "broadcast"));
    DT_CHECK(dt__coll_trace(&k, count, t, -1, root));
    DT_CHECK(dt__coll_agree(&k));
    if (bytes == 0 || c->size == 1)
        return DT_OK;
    dt__alg alg = dt__coll_pick(c, DT__COLL_BROADCAST, bytes);
    if (alg == DT__ALG_SHM)
        return dt__shm_broadcast(&k, buf, bytes, root);
    if (alg == DT__ALG_RING) {
        /* Two ranks: the chain is one direct transfer, and the allgather
         * would send half of it back to the root. */
        if (!c->one_host || c->algo != DT_ALGO_AUTO || c->size == 2)
            return dt__chain_bcast(&k, buf, bytes, root);
        size_t *off = malloc(2 * (size_t)c->size * sizeof *off);
        dt_status s = off ? scatter_allgather(&k, buf, bytes, root, off) : dt__fail(DT_ERR_NOMEM, "broadcast: out of memory");
        free(off);
        return dt__coll_error(&k, s);
    }
    return dt__coll_error(&k, dt__tree_bcast(&k, buf, bytes, root));
}
