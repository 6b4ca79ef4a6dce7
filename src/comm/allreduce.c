#include <stdlib.h>
#include <string.h>

#include "base/reduce.h"
#include "base/status.h"
#include "comm/coll.h"

dt_status dt_allreduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, dt_comm *c)
{
    DT_CHECK(dt__check_dtype_op("allreduce", t, op));
    size_t bytes = count * dt_dtype_size(t);
    DT_CHECK(dt__coll_check_buffers("allreduce", send, bytes, recv, bytes));
    dt__coll k;
    DT_CHECK(dt__coll_begin(&k, c, "allreduce"));
    if (count == 0)
        return DT_OK;
    if (send != recv)
        memcpy(recv, send, bytes);
    if (c->size > 1) {
        dt__alg alg = dt__coll_pick(c, DT__COLL_ALLREDUCE, bytes);
        if (alg == DT__ALG_RD) {
            DT_CHECK(dt__rd_allreduce(&k, recv, count, t, op));
        } else {
            /* The ring cuts the buffer into n blocks, halving-doubling into the
             * largest power of two p <= n (the other ranks fold in). */
            int blocks = c->size;
            while (alg == DT__ALG_RHD && (blocks & (blocks - 1)))
                blocks &= blocks - 1;
            size_t *off = malloc(2 * (size_t)blocks * sizeof *off);
            if (!off)
                return dt__coll_error(&k, dt__fail(DT_ERR_NOMEM, "out of memory"));
            dt__split_blocks(count, blocks, off, off + blocks);
            dt_status s = alg == DT__ALG_RING
                              ? dt__ring_run(&k, recv, off, off + blocks, t, op, DT_RING_RS | DT_RING_AG)
                              : dt__rhd_run(&k, recv, count, off, off + blocks, t, op, DT_RING_RS | DT_RING_AG);
            free(off);
            DT_CHECK(s);
        }
    }
    dt__reduce_finish(recv, count, t, op, c->size);
    return DT_OK;
}
