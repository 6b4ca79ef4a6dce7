/* Recursive-doubling allreduce for small messages: log2(p) exchange steps of
 * the whole buffer.  A world that is not a power of two first folds its extra
 * ranks into their neighbours (rank 2i sends to 2i+1) and hands them the
 * result at the end.  Both partners compute OP(lower half, upper half), so the
 * bits agree on every rank. */
#include <stdlib.h>

#include "base/redop.h"
#include "base/status.h"
#include "comm/coll.h"

enum { FOLD_TAG = 0, UNFOLD_TAG = 1, STEP_TAG = 2 };

static dt_status run(dt__coll *k, uint8_t *buf, uint8_t *tmp, size_t count, dt_dtype t, dt_redop op)
{
    int n = k->c->size, r = k->c->rank;
    size_t bytes = count * dt_dtype_size(t);
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    int rem = n - p, v;
    dt__req rq[2];
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            DT_CHECK(dt__coll_send(k, &rq[0], r + 1, FOLD_TAG, buf, bytes));
            DT_CHECK(dt__coll_wait(k, rq, 1));
            v = -1;
        } else {
            DT_CHECK(dt__coll_recv(k, &rq[0], r - 1, FOLD_TAG, tmp, bytes));
            DT_CHECK(dt__coll_wait(k, rq, 1));
            dt__reduce(buf, tmp, buf, count, t, op);
            v = r / 2;
        }
    } else {
        v = r - rem;
    }
    for (int mask = 1, step = 0; v >= 0 && mask < p; mask <<= 1, step++) {
        int pv = v ^ mask;
        int pr = pv < rem ? pv * 2 + 1 : pv + rem;
        DT_CHECK(dt__coll_recv(k, &rq[0], pr, STEP_TAG + (uint32_t)step, tmp, bytes));
        DT_CHECK(dt__coll_send(k, &rq[1], pr, STEP_TAG + (uint32_t)step, buf, bytes));
        DT_CHECK(dt__coll_wait(k, rq, 2));
        if (pr < r)
            dt__reduce(buf, tmp, buf, count, t, op);
        else
            dt__reduce(buf, buf, tmp, count, t, op);
    }
    if (r < 2 * rem) {
        if (r % 2 == 1)
            DT_CHECK(dt__coll_send(k, &rq[0], r - 1, UNFOLD_TAG, buf, bytes));
        else
            DT_CHECK(dt__coll_recv(k, &rq[0], r + 1, UNFOLD_TAG, buf, bytes));
        DT_CHECK(dt__coll_wait(k, rq, 1));
    }
    return DT_OK;
}

dt_status dt__rd_allreduce(dt__coll *k, void *buf, size_t count, dt_dtype t, dt_redop op)
{
    if (k->c->size == 1 || count == 0)
        return DT_OK;
    uint8_t *tmp = dt__comm_scratch(k->c, DT__SCRATCH_TMP, count * dt_dtype_size(t));
    dt_status s = tmp ? run(k, buf, tmp, count, t, op)
                      : dt__fail(DT_ERR_NOMEM, "%s: out of memory", k->op);
    s = dt__coll_error(k, s);
    return s;
}
