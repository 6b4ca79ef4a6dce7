#include <stdlib.h>
#include <string.h>

#include "base/redop.h"
#include "base/status.h"
#include "comm/coll.h"
#include "comm/colltrace.h"

dt_status dt__allreduce_flat_from(dt__coll *k, const void *src, void *buf, size_t count, dt_dtype t, dt_redop op)
{
    dt__alg alg = dt__coll_pick(k->c, DT__COLL_ALLREDUCE, count * dt_dtype_size(t));
    return dt__allreduce_alg(k, src, buf, count, t, op, alg);
}

dt_status dt__allreduce_flat(dt__coll *k, void *buf, size_t count, dt_dtype t, dt_redop op)
{
    return dt__allreduce_flat_from(k, buf, buf, count, t, op);
}

dt_status dt__allreduce_alg(dt__coll *k, const void *src, void *buf, size_t count, dt_dtype t, dt_redop op,
                            dt__alg alg)
{
    dt_comm *c = k->c;
    /* The ring reads this rank's input from src block by block as it first
     * needs it, the arena copies it from src into its slot; the others
     * start from a copy in buf.  (64 MiB: the copy kept 4 hosts' links idle
     * about 10 ms of each 850 ms call.) */
    if (src != buf && ((alg != DT__ALG_RING && alg != DT__ALG_SHM) || c->size == 1)) {
        memcpy(buf, src, count * dt_dtype_size(t));
        src = buf;
    }
    if (c->size == 1)
        return DT_OK;
    if (alg == DT__ALG_SHM)
        return dt__shm_allreduce(k, src, buf, count, t, op);
    if (alg == DT__ALG_DIRECT)
        return dt__direct_allreduce(k, buf, count, t, op);
    if (alg == DT__ALG_RD)
        return dt__rd_allreduce(k, buf, count, t, op);
    /* The ring cuts the buffer into n blocks, halving-doubling into the
     * largest power of two p <= n (the other ranks fold in). */
    int blocks = c->size;
    while (alg == DT__ALG_RHD && (blocks & (blocks - 1)))
        blocks &= blocks - 1;
    size_t *off = malloc(2 * (size_t)blocks * sizeof *off);
    if (!off)
        return dt__coll_error(k, dt__fail(DT_ERR_NOMEM, "out of memory"));
    dt__split_blocks(count, blocks, off, off + blocks);
    dt_status s = alg == DT__ALG_RING ? dt__ring_run_from(k, src, buf, off, off + blocks, t, op, DT_RING_RS | DT_RING_AG)
                                      : dt__rhd_run(k, buf, count, off, off + blocks, t, op, DT_RING_RS | DT_RING_AG);
    free(off);
    return s;
}

dt_status dt__native_allreduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, dt_comm *c)
{
    DT_CHECK(dt__check_dtype_op("allreduce", t, op));
    size_t bytes;
    DT_CHECK(dt__coll_bytes("allreduce", count, t, 1, &bytes));
    DT_CHECK(dt__coll_check_buffers("allreduce", send, bytes, recv, bytes));
    dt__coll k;
    DT_CHECK(dt__coll_begin_reducing(&k, c, "allreduce"));
    DT_CHECK(dt__coll_trace(&k, count, t, (int)op, -1));
    if (count == 0)
        return DT_OK;
    if (dt__hier_use(c, bytes)) {
        if (send != recv)
            memcpy(recv, send, bytes);
        DT_CHECK(dt__coll_error(&k, dt__hier_allreduce(c, recv, count, t, op)));
    } else {
        DT_CHECK(dt__allreduce_flat_from(&k, send, recv, count, t, op));
    }
    dt__reduce_finish(recv, count, t, op, c->size);
    return DT_OK;
}
