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
        if (dt__coll_use_ring(c, bytes)) {
            size_t *off = malloc(2 * (size_t)c->size * sizeof *off);
            if (!off)
                return dt__coll_error(&k, dt__fail(DT_ERR_NOMEM, "out of memory"));
            dt__split_blocks(count, c->size, off, off + c->size);
            dt_status s = dt__ring_run(&k, recv, off, off + c->size, t, op, DT_RING_RS | DT_RING_AG);
            free(off);
            DT_CHECK(s);
        } else {
            DT_CHECK(dt__rd_allreduce(&k, recv, count, t, op));
        }
    }
    dt__reduce_finish(recv, count, t, op, c->size);
    return DT_OK;
}
