/* Broadcast: binomial tree for small messages (log2 n steps), a pipelined
 * chain for large ones (every link carries the message once, in segments, so
 * the time approaches N/B for any n). */
#include <stdlib.h>

#include "base/status.h"
#include "comm/coll.h"

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
            if (recvs[forwarded].state == DT_REQ_DONE) {
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

dt_status dt_broadcast(void *buf, size_t count, dt_dtype t, int root, dt_comm *c)
{
    size_t es = dt_dtype_size(t);
    if (!es)
        return dt__fail(DT_ERR_INVALID, "broadcast: invalid dtype %d", (int)t);
    if (c && (root < 0 || root >= c->size))
        return dt__fail(DT_ERR_INVALID, "broadcast: root %d outside the communicator of %d ranks", root, c->size);
    DT_CHECK(dt__coll_check_buffers("broadcast", buf, count * es, buf, count * es));
    dt__coll k;
    DT_CHECK(dt__coll_begin(&k, c, "broadcast"));
    size_t bytes = count * es;
    if (bytes == 0 || c->size == 1)
        return DT_OK;
    if (dt__coll_pick(c, DT__COLL_BROADCAST, bytes) == DT__ALG_RING)
        return dt__chain_bcast(&k, buf, bytes, root);
    return dt__coll_error(&k, dt__tree_bcast(&k, buf, bytes, root));
}
