#include "comm/coll.h"

#include <stdint.h>
#include <stdio.h>

#include "base/clock.h"
#include "base/status.h"

dt_status dt__coll_begin(dt__coll *k, dt_comm *c, const char *op)
{
    DT_CHECK(dt__comm_check(c, op));
    k->c = c;
    k->op = op;
    k->seq = ++c->coll_seq;
    k->deadline = dt__deadline_after(c->timeout_s);
    k->reduces = false;
    k->sig = 0;
    return DT_OK;
}

dt_status dt__coll_begin_reducing(dt__coll *k, dt_comm *c, const char *op)
{
    DT_CHECK(dt__coll_begin(k, c, op));
    k->reduces = true;
    return DT_OK;
}

static int32_t coll_tag(uint32_t subtag) { return (int32_t)(DT__TAG_COLL | (subtag & DT__SUBTAG_MAX)); }

dt_status dt__coll_send(dt__coll *k, dt__req *r, int peer, uint32_t subtag, const void *buf, size_t len)
{
    return dt__engine_isend(k->c->world->eng, r, k->c->ranks[peer], k->c->id, coll_tag(subtag), k->seq, k->sig,
                            buf, len, !k->reduces);
}

dt_status dt__coll_recv(dt__coll *k, dt__req *r, int peer, uint32_t subtag, void *buf, size_t len)
{
    return dt__engine_irecv(k->c->world->eng, r, k->c->ranks[peer], k->c->id, coll_tag(subtag), k->seq, k->sig,
                            false, buf, len);
}

dt_status dt__coll_wait(dt__coll *k, dt__req *rs, size_t n)
{
    return dt__engine_wait_all(k->c->world->eng, rs, n, k->deadline);
}

dt_status dt__coll_progress(dt__coll *k)
{
    dt__engine *e = k->c->world->eng;
    if (dt__now_ns() >= k->deadline)
        return dt__engine_fail(e, DT_ERR_TIMEOUT, "%s (collective #%llu) timed out after %.0f s", k->op,
                               (unsigned long long)k->seq, k->c->timeout_s);
    return dt__engine_progress(e, dt__ms_left(k->deadline, 1000));
}

dt_status dt__coll_error(dt__coll *k, dt_status s)
{
    if (s == DT_OK)
        return DT_OK;
    dt__engine *e = k->c->world->eng;
    if (dt__engine_status(e) == DT_OK)
        dt__engine_fail(e, s, "%s", dt_last_error());
    return dt__wrap(dt__engine_status(e), "%s: ", k->op);
}

dt_status dt__coll_check_buffers(const char *op, const void *send, size_t send_bytes, const void *recv,
                                 size_t recv_bytes)
{
    if ((send_bytes && !send) || (recv_bytes && !recv))
        return dt__fail(DT_ERR_INVALID, "%s: NULL buffer for %zu bytes", op, send_bytes ? send_bytes : recv_bytes);
    if (send == recv || !send_bytes || !recv_bytes)
        return DT_OK;
    uintptr_t s = (uintptr_t)send, r = (uintptr_t)recv;
    if (s < r + recv_bytes && r < s + send_bytes)
        return dt__fail(DT_ERR_INVALID, "%s: send and receive buffers partially overlap (pass the same pointer for in place)", op);
    return DT_OK;
}

dt_status dt__coll_bytes(const char *op, size_t count, dt_dtype t, size_t mult, size_t *bytes)
{
    size_t es = dt_dtype_size(t);
    *bytes = 0;
    if (!es)
        return dt__fail(DT_ERR_INVALID, "%s: invalid dtype %d", op, (int)t);
    if (mult == 0)
        mult = 1;
    if (count > DT__MAX_BUFFER_BYTES / es / mult) {
        char ranks[48] = "";
        if (mult > 1)
            snprintf(ranks, sizeof ranks, " x %zu ranks", mult);
        return dt__fail(DT_ERR_INVALID, "%s: count %zu x %zu-byte %s%s overflows the size of a buffer (at most %llu bytes)",
                        op, count, es, dt_dtype_name(t), ranks, (unsigned long long)DT__MAX_BUFFER_BYTES);
    }
    *bytes = count * es;
    return DT_OK;
}

dt_status dt__check_dtype_op(const char *op, dt_dtype t, dt_redop r)
{
    if (dt_dtype_size(t) == 0)
        return dt__fail(DT_ERR_INVALID, "%s: invalid dtype %d", op, (int)t);
    if (!dt_redop_name(r))
        return dt__fail(DT_ERR_INVALID, "%s: invalid reduction op %d", op, (int)r);
    return DT_OK;
}

void dt__split_blocks(size_t count, int n, size_t *offsets, size_t *lengths)
{
    size_t base = count / (size_t)n, rem = count % (size_t)n, off = 0;
    for (int b = 0; b < n; b++) {
        lengths[b] = base + ((size_t)b < rem ? 1 : 0);
        offsets[b] = off;
        off += lengths[b];
    }
}
