/* Barrier by dissemination: ceil(log2 n) rounds of empty messages, round i
 * to rank r+2^i and from rank r-2^i. */
#include "base/status.h"
#include "comm/coll.h"
#include "comm/colltrace.h"

dt_status dt__native_barrier(dt_comm *c)
{
    dt__coll k;
    DT_CHECK(dt__coll_begin(&k, c, "barrier"));
    DT_CHECK(dt__coll_trace(&k, 0, DT_U8, -1, -1));
    int n = c->size, r = c->rank;
    dt_status s = DT_OK;
    for (int dist = 1, round = 0; s == DT_OK && dist < n; dist <<= 1, round++) {
        dt__req rq[2];
        s = dt__coll_recv(&k, &rq[0], (r - dist + n) % n, (uint32_t)round, NULL, 0);
        if (s == DT_OK)
            s = dt__coll_send(&k, &rq[1], (r + dist) % n, (uint32_t)round, NULL, 0);
        if (s == DT_OK)
            s = dt__coll_wait(&k, rq, 2);
    }
    return dt__coll_error(&k, s);
}
