/* Reduce-scatter: the ring's reduce-scatter phase for large messages,
 * recursive halving for mid-sized ones on a power of two ranks, a
 * recursive-doubling allreduce for small ones, and across hosts every rank
 * sending each rank its block in one step for the smallest. */
#include <stdlib.h>
#include <string.h>

#include "base/redop.h"
#include "base/status.h"
#include "comm/coll.h"
#include "comm/colltrace.h"

dt_status dt__native_reduce_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, dt_redop op, dt_comm *c)
{
    DT_CHECK(dt__check_dtype_op("reduce_scatter", t, op));
    if (!c)
        return dt__fail(DT_ERR_INVALID, "reduce_scatter: communicator is NULL");
    size_t n = (size_t)c->size, bytes;
    DT_CHECK(dt__coll_bytes("reduce_scatter", recvcount, t, n, &bytes));
    bool in_place = send == recv;
    DT_CHECK(dt__coll_check_buffers("reduce_scatter", send, n * bytes, recv, in_place ? n * bytes : bytes));
    dt__coll k;
    DT_CHECK(dt__coll_begin_reducing(&k, c, "reduce_scatter"));
    DT_CHECK(dt__coll_trace(&k, recvcount, t, (int)op, -1));
    if (bytes == 0)
        return DT_OK;
    dt__alg alg = dt__coll_pick(c, DT__COLL_REDUCE_SCATTER, n * bytes);
    if (alg == DT__ALG_SHM) {
        DT_CHECK(dt__shm_reduce_scatter(&k, send, recv, recvcount, t, op));
        dt__reduce_finish(recv, recvcount, t, op, c->size);
        return DT_OK;
    }
    uint8_t *work = in_place ? recv : dt__comm_scratch(c, DT__SCRATCH_WORK, n * bytes);
    size_t *off = malloc(2 * n * sizeof *off);
    if (!work || !off) {
        free(off);
        return dt__coll_error(&k, dt__fail(DT_ERR_NOMEM, "out of memory"));
    }
    bool hier = dt__hier_use(c, n * bytes), ring = !hier && n > 1 && alg == DT__ALG_RING;
    /* The ring reads send block by block as it first needs it (no copy of
     * the whole input first, as allreduce). */
    if (!in_place && !ring)
        memcpy(work, send, n * bytes);
    dt_status s = DT_OK;
    for (size_t b = 0; b < n; b++) {
        off[b] = b * recvcount;
        off[n + b] = recvcount;
    }
    if (hier)
        s = dt__coll_error(&k, dt__hier_reduce_scatter(c, work, recvcount, t, op));
    else if (ring)
        s = dt__ring_run_from(&k, send, work, off, off + n, t, op, DT_RING_RS);
    else if (n > 1 && alg == DT__ALG_DIRECT)
        s = dt__coll_error(&k, dt__direct_reduce_scatter(&k, work, recvcount, t, op));
    else if (n > 1 && alg == DT__ALG_RHD)
        s = dt__rhd_run(&k, work, n * recvcount, off, off + n, t, op, DT_RING_RS);
    else if (n > 1)
        s = dt__rd_allreduce(&k, work, n * recvcount, t, op);
    if (s == DT_OK) {
        memmove(recv, work + (size_t)c->rank * bytes, bytes);
        dt__reduce_finish(recv, recvcount, t, op, c->size);
    }
    free(off);
    return s;
}
