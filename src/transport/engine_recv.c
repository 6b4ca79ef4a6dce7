/* Receiving: receives are matched on (communicator id, tag, sequence) in
 * posting order, and the payload of a matched frame is read straight into the
 * caller's buffer; frames that arrive before their receive is posted are
 * buffered ("unexpected").  The frame parser reads each peer's channel as a
 * state machine: header, then payload (or a DATA_REF's address). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/status.h"
#include "transport/engine_internal.h"
#include "transport/socket.h"

static bool matches(const dt__req *r, const dt__frame *f)
{
    return r->comm_id == f->comm_id && r->tag == f->tag && (r->any_seq || dt__frame_seq_eq(r->seq, f->seq));
}

/* Bytes that follow a header in the stream. */
static size_t stream_len(const dt__frame *f) { return f->type == DT_FRAME_DATA_REF ? DT_FRAME_REF_BYTES : (size_t)f->len; }

static void finish_recv(dt__req *r, const dt__frame *f)
{
    r->received = (size_t)f->len;
    if (r->any_seq)
        r->seq = f->seq; /* which message matched (comm/p2p_chunk.c reads it) */
    dt__req_complete(r, f->len > r->len ? DT_ERR_TRUNCATE : DT_OK);
}

/* Unlink and return the first posted receive that matches f (posting order). */
static dt__req *take_posted(peer *p, const dt__frame *f)
{
    dt__req *prev = NULL;
    for (dt__req *r = p->posted; r; prev = r, r = r->next) {
        if (matches(r, f))
            return dt__req_unlink(&p->posted, &p->posted_tail, prev, r);
    }
    return NULL;
}

/* Unlink and return the oldest buffered message that r matches. */
static unexpected *take_unexpected(peer *p, const dt__req *r)
{
    unexpected *prev = NULL;
    for (unexpected *u = p->unexp; u; prev = u, u = u->next) {
        if (!matches(r, &u->f))
            continue;
        if (prev)
            prev->next = u->next;
        else
            p->unexp = u->next;
        if (p->unexp_tail == u)
            p->unexp_tail = prev;
        return u;
    }
    return NULL;
}

/* Complete receive r with buffered message u (copied if it fits, from our
 * buffer or the sender's memory) and free u. */
static dt_status deliver_buffered(dt__engine *e, peer *p, dt__req *r, unexpected *u)
{
    bool fits = u->f.len <= r->len;
    dt_status s = DT_OK;
    if (u->in_sender)
        s = dt__ref_fetch(e, p, u, fits ? r->buf : NULL);
    else if (fits && u->f.len)
        memcpy(r->buf, u->data, (size_t)u->f.len);
    if (s == DT_OK)
        finish_recv(r, &u->f);
    else
        dt__req_complete(r, s);
    dt__bufcache_put(&e->early, u->data, u->cap);
    free(u);
    return s;
}

static dt_status irecv_locked(dt__engine *e, dt__req *r, int pi, uint32_t comm_id, int32_t tag, uint64_t seq,
                              uint64_t sig, bool any_seq, void *buf, size_t cap)
{
    DT_CHECK(dt__engine_status(e));
    if (pi < 0 || pi >= e->size)
        return dt__fail(DT_ERR_INVALID, "receive from rank %d outside the world of %d", pi, e->size);
    dt__req_init(r, DT_REQ_RECV, pi, comm_id, tag, seq, sig, buf, cap); /* len: the capacity */
    r->any_seq = any_seq;
    peer *p = &e->peers[pi];
    unexpected *u = take_unexpected(p, r);
    if (u && dt__sig_differs(sig, u->f.sig)) {
        uint64_t theirs = u->f.sig;
        dt__bufcache_put(&e->early, u->data, u->cap);
        free(u);
        return dt__engine_sig_mismatch(e, pi, comm_id, seq, sig, theirs);
    }
    if (sig)
        DT_CHECK(dt__engine_sig_enter(e, comm_id, seq, sig));
    if (u) {
        DT_CHECK(deliver_buffered(e, p, r, u));
        return r->status == DT_OK ? DT_OK
                                  : dt__fail(DT_ERR_TRUNCATE, "message of %zu bytes from %s exceeds the %zu-byte receive buffer",
                                             r->received, p->name, cap);
    }
    if (p->bye_received && pi != e->rank)
        return dt__fail(DT_ERR_PEER, "receive from %s, which has already left (destroyed its communicator)", p->name);
    dt__req_enqueue(&p->posted, &p->posted_tail, r);
    return DT_OK;
}

dt_status dt__engine_cancel(dt__engine *e, dt__req *r)
{
    dt__engine_lock(e);
    dt_status s = DT_ERR_INVALID;
    if (r->kind == DT_REQ_RECV && r->state == DT_REQ_PENDING && r->peer >= 0 && r->peer < e->size) {
        peer *p = &e->peers[r->peer];
        dt__req *prev = NULL;
        for (dt__req *q = p->posted; q; prev = q, q = q->next)
            if (q == r && p->target != r) { /* posted and not being filled */
                dt__req_unlink(&p->posted, &p->posted_tail, prev, r);
                r->status = DT_ERR_ABORTED;
                __atomic_store_n(&r->state, DT_REQ_DONE, __ATOMIC_RELEASE);
                s = DT_OK;
                break;
            }
    }
    dt__engine_unlock(e);
    return s;
}

dt_status dt__engine_irecv(dt__engine *e, dt__req *r, int pi, uint32_t comm_id, int32_t tag,
                           uint64_t seq, uint64_t sig, bool any_seq, void *buf, size_t cap)
{
    dt__engine_lock(e);
    dt_status s = irecv_locked(e, r, pi, comm_id, tag, seq, sig, any_seq, buf, cap);
    if (s == DT_OK && pi >= 0 && pi < e->size && pi != e->rank)
        dt__engine_wake_for(e, pi); /* a buffered DATA_REF copied now owes its ACK */
    dt__engine_unlock(e);
    return s;
}

/* Route an arriving DATA frame: to its posted receive, or into a buffer (a
 * DATA_REF's payload stays with its sender until the receive is posted). */
static dt_status route_data(dt__engine *e, peer *p, const dt__frame *f)
{
    dt__req *r = take_posted(p, f);
    if (r && dt__sig_differs(r->sig, f->sig)) {
        dt__req_complete(r, DT_ERR_INVALID);
        return dt__engine_sig_mismatch(e, (int)(p - e->peers), f->comm_id, f->seq, r->sig, f->sig);
    }
    if (!r && f->sig)
        DT_CHECK(dt__sig_check_arrival(e, (int)(p - e->peers), f));
    if (r) {
        p->target = r;
        p->dst = f->len <= r->len ? r->buf : NULL;
        return DT_OK;
    }
    unexpected *u = calloc(1, sizeof *u);
    size_t cap = 0;
    bool buffered = f->len && f->type == DT_FRAME_DATA;
    uint8_t *data = buffered && u ? dt__bufcache_get(&e->early, (size_t)f->len, &cap) : NULL;
    if (!u || (buffered && !data)) {
        free(u);
        return dt__engine_fail(e, DT_ERR_NOMEM, "cannot buffer a %llu-byte message from %s",
                               (unsigned long long)f->len, p->name);
    }
    u->f = *f;
    u->data = data;
    u->cap = cap;
    p->stash = u;
    p->dst = data;
    return DT_OK;
}

/* The buffered message just completed.  A receive posted while it was still
 * arriving takes it now; otherwise it joins the peer's unexpected queue. */
static dt_status stash_unexpected(dt__engine *e, peer *p)
{
    unexpected *u = p->stash;
    p->stash = NULL;
    dt__req *r = take_posted(p, &u->f);
    if (r)
        return deliver_buffered(e, p, r, u);
    u->next = NULL;
    if (p->unexp_tail)
        p->unexp_tail->next = u;
    else
        p->unexp = u;
    p->unexp_tail = u;
    return DT_OK;
}

dt_status dt__deliver_local(dt__engine *e, const dt__frame *f, const void *buf)
{
    peer *p = &e->peers[e->rank];
    DT_CHECK(route_data(e, p, f));
    if (p->dst && f->len)
        memcpy(p->dst, buf, (size_t)f->len);
    if (p->target)
        finish_recv(p->target, f);
    if (p->stash)
        DT_CHECK(stash_unexpected(e, p));
    p->target = NULL;
    p->dst = NULL;
    return DT_OK;
}

static dt_status payload_done(dt__engine *e, peer *p)
{
    const dt__frame *f = &p->cur;
    p->in_payload = false;
    p->hdr_got = 0;
    if (f->type == DT_FRAME_ABORT) {
        char text[DT_FRAME_MAX_CONTROL + 1] = "";
        if (p->control) {
            memcpy(text, p->control, (size_t)f->len);
            text[f->len] = '\0';
        }
        free(p->control);
        p->control = NULL;
        /* A peer's failure: keep its code, say who reported it, and pass it on
         * once (the reporter may have been unable to reach every rank). */
        char msg[DT_FRAME_MAX_CONTROL + 256];
        bool known = f->tag <= DT_ERR_INVALID && f->tag >= DT_ERR_INTERNAL;
        if (strstr(text, " (reported by ")) /* passed on: the first reporter is named already */
            snprintf(msg, sizeof msg, "%s", text);
        else
            snprintf(msg, sizeof msg, "%s (reported by %s)", text, p->name);
        return dt__engine_fail_with(e, known ? (dt_status)f->tag : DT_ERR_ABORTED, true, msg);
    }
    if (f->type == DT_FRAME_BYE) {
        p->bye_received = true;
        if (p->posted)
            return dt__engine_fail(e, DT_ERR_PEER, "%s left (destroyed its communicator) while this rank still expected a message from it (tag %d)",
                                   p->name, p->posted->tag);
        return DT_OK;
    }
    if (f->type == DT_FRAME_DATA_REF) {
        uint64_t addr = dt__get_u64(p->ref), id = dt__get_u64(p->ref + 8);
        if (p->stash) /* copied when its receive is posted */
            dt__ref_defer(e, p->stash, addr, id);
        else
            DT_CHECK(dt__ref_copy(e, p, addr, id, p->dst, (size_t)f->len));
    }
    if (p->target) {
        dt__req *r = p->target;
        p->target = NULL;
        /* Read r before completing it: its waiter may free it at once. */
        size_t cap = r->len;
        finish_recv(r, f);
        if ((size_t)f->len > cap)
            return dt__engine_fail(e, DT_ERR_TRUNCATE, "message of %llu bytes from %s exceeds the %zu-byte receive buffer (tag %d)",
                                   (unsigned long long)f->len, p->name, cap, f->tag);
    } else if (p->stash) {
        return stash_unexpected(e, p);
    }
    return DT_OK;
}

static dt_status header_done(dt__engine *e, int pi)
{
    peer *p = &e->peers[pi];
    dt_status s = dt__frame_decode(p->hdr, &p->cur);
    if (s != DT_OK) {
        DT_WARN("closing the connection to %s: malformed frame: %s", p->name, dt_last_error());
        return dt__engine_fail(e, DT_ERR_PEER, "malformed frame from %s (%s); connection closed", p->name,
                               dt_last_error());
    }
    uint8_t type = p->cur.type;
    /* Only a channel that can read the peer's memory (shared memory) carries them. */
    if ((type == DT_FRAME_DATA_REF || type == DT_FRAME_ACK) && !p->ch->ops->read_remote)
        return dt__engine_fail(e, DT_ERR_PEER, "%s sent a shared-memory frame (type %d) over TCP; connection closed",
                               p->name, type);
    if (type == DT_FRAME_ACK) {
        dt__req *r = dt__ref_take_unacked(p, p->cur.seq);
        if (!r)
            return dt__engine_fail(e, DT_ERR_PEER, "%s acknowledged a message this rank never sent (id %llu)", p->name,
                                   (unsigned long long)p->cur.seq);
        dt__req_complete(r, DT_OK);
        p->hdr_got = 0;
        return DT_OK;
    }
    p->in_payload = true;
    p->got = 0;
    p->dst = NULL;
    if (type == DT_FRAME_ABORT) {
        p->control = malloc((size_t)p->cur.len + 1);
        p->dst = p->control;
    } else if (type == DT_FRAME_DATA || type == DT_FRAME_DATA_REF) {
        DT_CHECK(route_data(e, p, &p->cur));
    }
    return stream_len(&p->cur) == 0 ? payload_done(e, p) : DT_OK;
}

dt_status dt__peer_eof(dt__engine *e, int pi, int err)
{
    peer *p = &e->peers[pi];
    if (p->bye_received && !p->in_payload && p->hdr_got == 0 && err == 0) {
        p->ch->ops->close(p->ch); /* orderly goodbye */
        return DT_OK;
    }
    if (err)
        return dt__engine_fail(e, DT_ERR_PEER, "lost the connection to %s: %s", p->name, strerror(err));
    return dt__engine_fail(e, DT_ERR_PEER, "%s closed the connection (process died or exited)%s", p->name,
                           p->in_payload || p->hdr_got ? " in the middle of a message" : "");
}

/* Payload bytes one peer_read may put into buffers before returning. */
#define READ_BUFFER_BUDGET (256u << 10)

dt_status dt__peer_read(dt__engine *e, int pi)
{
    peer *p = &e->peers[pi];
    dt__chan *c = p->ch;
    p->last_io = dt__now_ns();
    size_t buffered = 0; /* payload bytes this call put into buffers of ours */
    for (int budget = 0; budget < 64 && c->fd >= 0; budget++) {
        ssize_t n;
        if (!p->in_payload) {
            n = c->ops->recv(c, p->hdr + p->hdr_got, DT_FRAME_HDR - p->hdr_got);
        } else {
            size_t want = stream_len(&p->cur) - p->got;
            uint8_t *to = p->cur.type == DT_FRAME_DATA_REF ? p->ref : p->dst;
            n = c->ops->recv(c, to ? to + p->got : NULL, want);
        }
        if (n == 0)
            return dt__peer_eof(e, pi, 0);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return DT_OK;
            return dt__peer_eof(e, pi, errno);
        }
        if (!p->in_payload) {
            p->hdr_got += (size_t)n;
            if (p->hdr_got == DT_FRAME_HDR)
                DT_CHECK(header_done(e, pi));
        } else {
            p->got += (size_t)n;
            if (p->got == stream_len(&p->cur)) {
                bool posted = p->target != NULL;
                if (p->stash && p->cur.type == DT_FRAME_DATA)
                    buffered += (size_t)p->cur.len;
                DT_CHECK(payload_done(e, p));
                /* A receive completed, or a good deal was buffered: give the
                 * caller its turn before reading on.  Reading on would
                 * buffer what follows before its receive is posted (a root
                 * running ahead in a loop of broadcasts), and a rank that
                 * falls behind would stay behind: 2 ranks, 256 KiB
                 * broadcasts, 25 ms in one call, fresh buffers faulting in
                 * page by page. */
                if (posted || buffered >= READ_BUFFER_BUDGET)
                    return DT_OK;
            }
        }
    }
    return DT_OK;
}
