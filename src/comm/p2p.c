/* Point-to-point operations on a communicator.  A message may come in
 * chunks (p2p_chunk.h): every receive takes one, and a request completes
 * when its whole message has. */
#include <stdlib.h>

#include "base/clock.h"
#include "base/status.h"
#include "comm/coll.h"
#include "comm/p2p_chunk.h"
#include "transport/frame.h"

dt_status dt__p2p_post(dt_comm *c, bool is_send, void *buf, size_t count, dt_dtype t, int peer, int tag,
                       uint64_t seq, dt_request **out)
{
    const char *op = is_send ? "send" : "recv";
    if (!out)
        return dt__fail(DT_ERR_INVALID, "%s: request pointer (req) is NULL", is_send ? "isend" : "irecv");
    *out = NULL;
    DT_CHECK(dt__comm_usable(c, op)); /* no waiting for c's nonblocking collectives: other tags */
    size_t es = dt_dtype_size(t);
    if (!es)
        return dt__fail(DT_ERR_INVALID, "%s: invalid dtype %d", op, (int)t);
    if (peer < 0 || peer >= c->size)
        return dt__fail(DT_ERR_INVALID, "%s: peer %d is outside the communicator of %d ranks", op, peer, c->size);
    if (tag < 0 || tag > DT_TAG_MAX)
        return dt__fail(DT_ERR_INVALID, "%s: tag %d outside 0..%d", op, tag, DT_TAG_MAX);
    if (count && !buf)
        return dt__fail(DT_ERR_INVALID, "%s: buffer (buf) is NULL for %zu elements", op, count);
    if (count > DT_FRAME_MAX_PAYLOAD / es)
        return dt__fail(DT_ERR_INVALID, "%s: count %zu x %zu-byte %s overflows a message: one message carries at most %llu bytes",
                        op, count, es, dt_dtype_name(t), (unsigned long long)DT_FRAME_MAX_PAYLOAD);
    dt_request *r = calloc(1, sizeof *r);
    if (!r)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    r->comm = c;
    r->elem = es;
    dt__engine *e = c->world->eng;
    dt_status s = is_send ? dt__engine_isend(e, &r->req, c->ranks[peer], c->id, tag, seq, 0, buf, count * es, true)
                          : dt__engine_irecv(e, &r->req, c->ranks[peer], c->id, tag, 0, 0, true, buf, count * es);
    if (s != DT_OK) {
        free(r);
        return dt__wrap(s, "%s: ", op);
    }
    *out = r;
    return DT_OK;
}

dt_status dt__native_isend(const void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c, dt_request **req)
{
    return dt__p2p_post(c, true, (void *)buf, count, t, peer, tag, dt__p2p_next_seq(c), req);
}

dt_status dt__native_irecv(void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c, dt_request **req)
{
    return dt__p2p_post(c, false, buf, count, t, peer, tag, 0, req);
}

static dt_status finish(dt_request *r, size_t *received)
{
    size_t sent = dt__p2p_send_frames(r) ? dt__p2p_send_total(r) : r->req.len;
    dt__p2p_chunks_free(r);
    dt_status s = r->req.status;
    dt_comm *c = r->comm;
    if (s != DT_OK && !c->world->engine_closed && dt__engine_status(c->world->eng) != DT_OK)
        s = dt__engine_status(c->world->eng); /* re-arms the engine's message */
    else if (s != DT_OK)
        s = dt__fail(s, "%s rank %d failed: %s", r->req.kind == DT_REQ_SEND ? "send to" : "receive from",
                     r->req.peer, dt_status_name(s));
    if (s == DT_OK && r->req.kind == DT_REQ_RECV && r->req.received % r->elem)
        s = dt__fail(DT_ERR_TRUNCATE,
                     "receive from rank %d: the message has %zu bytes, not a whole number of the receiver's "
                     "%zu-byte elements (its buffer holds %zu bytes); sender and receiver disagree on the dtype",
                     r->req.peer, r->req.received, r->elem, r->req.len);
    if (received && s == DT_OK) /* a chunked send's length is its first chunk's: the whole from its state */
        *received = (r->req.kind == DT_REQ_RECV ? r->req.received : sent) / r->elem;
    free(r);
    return s;
}

/* Frame 0 of r is done: the rest of a chunked message, up to deadline_ns. */
static dt_status rest(dt_request *r, int64_t deadline_ns)
{
    if (r->comm->world->engine_closed)
        return DT_OK;
    bool done;
    dt_status s = dt__p2p_rest(r, true, deadline_ns, &done);
    if (s != DT_OK) {
        dt__p2p_chunks_free(r);
        free(r);
    }
    return s;
}

dt_status dt__native_wait(dt_request *r, size_t *received)
{
    dt_comm *c = r->comm;
    int64_t deadline = dt__deadline_after(c->timeout_s);
    if (!dt__req_done(&r->req)) {
        if (c->world->engine_closed) {
            free(r);
            return dt__fail(DT_ERR_INVALID, "dt_wait: the communicator was destroyed");
        }
        dt__engine_wait(c->world->eng, &r->req, deadline);
    }
    DT_CHECK(rest(r, deadline));
    return finish(r, received);
}

dt_status dt__native_waitany(dt_request **reqs, int n, int *index, size_t *received)
{
    enum { MAX = 1024 };
    dt__req *rs[MAX];
    dt_comm *c = NULL;
    double timeout = 0;
    for (int i = 0; i < n; i++) {
        rs[i] = reqs[i] ? &reqs[i]->req : NULL;
        if (reqs[i] && (!c || reqs[i]->comm->timeout_s > timeout)) { /* the longest deadline of theirs */
            c = reqs[i]->comm;
            timeout = c->timeout_s;
        }
    }
    *index = -1;
    if (!c)
        return DT_OK;
    if (c->world->engine_closed)
        return dt__fail(DT_ERR_INVALID, "dt_waitany: the communicator was destroyed");
    size_t which = 0;
    dt_status s = dt__engine_wait_any(c->world->eng, rs, (size_t)n, dt__deadline_after(timeout), &which);
    if (s != DT_OK)
        return dt__engine_status(c->world->eng) != DT_OK ? dt__engine_status(c->world->eng) : s;
    if (which >= (size_t)n)
        return DT_OK;
    *index = (int)which;
    dt_request *r = reqs[which];
    reqs[which] = NULL;
    DT_CHECK(rest(r, dt__deadline_after(timeout))); /* the rest of a chunked message: it is on its way */
    return finish(r, received);
}

dt_status dt__native_cancel(dt_request *r)
{
    if (r->comm->world->engine_closed || dt__engine_cancel(r->comm->world->eng, &r->req) != DT_OK)
        return dt__fail(DT_ERR_INVALID, "dt_cancel: the %s from rank %d has %s", r->req.kind == DT_REQ_SEND ? "send to" : "receive",
                        r->req.peer, r->req.kind == DT_REQ_SEND ? "no cancel (wait for it)" : "matched a message already (wait for it)");
    free(r);
    return DT_OK;
}

dt_status dt__native_test(dt_request *r, int *done, size_t *received)
{
    if (!dt__req_done(&r->req) && !r->comm->world->engine_closed)
        dt__engine_progress(r->comm->world->eng, 0);
    if (!dt__req_done(&r->req) && !r->comm->world->engine_closed)
        return DT_OK;
    if (!r->comm->world->engine_closed) {
        bool all;
        dt_status s = dt__p2p_rest(r, false, 0, &all);
        if (s != DT_OK || !all)
            return s; /* r stays */
    }
    *done = 1;
    return finish(r, received);
}
