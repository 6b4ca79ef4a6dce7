/* The send queues: requests are queued per peer and written to its channel
 * header+payload with one send (sendmsg over TCP), or, for a DATA_REF, header
 * and the payload's address; owed ACKs go out between frames. */
#include <errno.h>
#include <string.h>

#include "base/clock.h"
#include "base/status.h"
#include "transport/engine_internal.h"
#include "transport/socket.h"

ssize_t dt__send_rest(peer *p, dt__req *r)
{
    struct iovec iov[2];
    int n = 0;
    size_t body = r->by_ref ? sizeof r->ref : r->len;
    if (r->off < DT_FRAME_HDR)
        iov[n++] = (struct iovec){r->hdr + r->off, DT_FRAME_HDR - r->off};
    size_t poff = r->off > DT_FRAME_HDR ? r->off - DT_FRAME_HDR : 0;
    if (body > poff)
        iov[n++] = (struct iovec){(r->by_ref ? r->ref : r->buf) + poff, body - poff};
    return p->ch->ops->send(p->ch, iov, n);
}

/* Write one ACK frame if the ring has room for all of it; false when not. */
static bool write_ack(peer *p)
{
    if (p->ch->ops->writable(p->ch) < DT_FRAME_HDR)
        return false;
    dt__frame f = {.type = DT_FRAME_ACK, .seq = p->acks[p->acks_head]};
    uint8_t hdr[DT_FRAME_HDR];
    dt__frame_encode(&f, hdr);
    struct iovec iov = {hdr, sizeof hdr};
    (void)p->ch->ops->send(p->ch, &iov, 1);
    (void)dt__ref_ack_taken(p);
    return true;
}

dt_status dt__peer_write(dt__engine *e, int pi)
{
    peer *p = &e->peers[pi];
    p->last_io = dt__now_ns();
    while ((p->sendq || p->acks_owed) && dt__peer_open(p)) {
        dt__req *r = p->sendq;
        if (p->acks_owed && (!r || r->off == 0)) { /* only between frames */
            if (!write_ack(p))
                return DT_OK;
            continue;
        }
        ssize_t w = dt__send_rest(p, r);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return DT_OK;
            int err = errno;
            if (dt__peer_read(e, pi) != DT_OK) /* the peer may have said why it went away */
                return dt__engine_status(e);
            return dt__engine_fail(e, DT_ERR_PEER, "lost the connection to %s while sending: %s", p->name,
                                   strerror(err));
        }
        r->off += (size_t)w;
        if (r->off < dt__frame_bytes(r))
            return DT_OK;
        p->sendq = r->next;
        if (!p->sendq)
            p->sendq_tail = NULL;
        if (r->by_ref)
            dt__req_enqueue(&p->unacked, &p->unacked_tail, r); /* done when the peer has read it */
        else
            dt__req_complete(r, DT_OK);
    }
    return DT_OK;
}

static dt_status queue_frame(dt__engine *e, dt__req *r, int pi, uint8_t type, uint32_t comm_id,
                             int32_t tag, uint64_t seq, uint64_t sig, const void *buf, size_t len, bool by_ref_ok)
{
    dt__frame f = {.type = type, .comm_id = comm_id, .tag = tag, .seq = seq, .len = len, .sig = sig};
    dt__req_init(r, DT_REQ_SEND, pi, comm_id, tag, seq, sig, (void *)buf, len);
    peer *p = &e->peers[pi];
    if (by_ref_ok && p->ch->send_refs && type == DT_FRAME_DATA && e->shm_copy_min && len >= e->shm_copy_min) {
        f.type = DT_FRAME_DATA_REF;
        r->by_ref = true;
        dt__put_u64(r->ref, (uint64_t)(uintptr_t)buf);
        dt__put_u64(r->ref + 8, p->ref_next++);
    }
    dt__frame_encode(&f, r->hdr);
    bool was_idle = p->sendq == NULL;
    dt__req_enqueue(&p->sendq, &p->sendq_tail, r);
    return was_idle ? dt__peer_write(e, pi) : DT_OK;
}

static dt_status isend_locked(dt__engine *e, dt__req *r, int pi, uint32_t comm_id, int32_t tag, uint64_t seq,
                              uint64_t sig, const void *buf, size_t len, bool by_ref_ok)
{
    DT_CHECK(dt__engine_status(e));
    if (pi < 0 || pi >= e->size)
        return dt__fail(DT_ERR_INVALID, "send to rank %d outside the world of %d", pi, e->size);
    if (len > DT_FRAME_MAX_PAYLOAD)
        return dt__fail(DT_ERR_INVALID, "message of %zu bytes to rank %d: one message carries at most %llu", len, pi,
                        (unsigned long long)DT_FRAME_MAX_PAYLOAD);
    if (sig)
        DT_CHECK(dt__engine_sig_enter(e, comm_id, seq, sig));
    if (pi == e->rank) {
        dt__frame f = {.type = DT_FRAME_DATA, .comm_id = comm_id, .tag = tag, .seq = seq, .len = len, .sig = sig};
        memset(r, 0, sizeof *r);
        r->kind = DT_REQ_SEND;
        DT_CHECK(dt__deliver_local(e, &f, buf));
        dt__req_complete(r, DT_OK);
        return DT_OK;
    }
    if (e->peers[pi].bye_sent)
        return dt__fail(DT_ERR_INVALID, "send to %s after the communicator was destroyed", e->peers[pi].name);
    __atomic_fetch_add(&e->bytes_sent, (uint64_t)len, __ATOMIC_RELAXED);
    return queue_frame(e, r, pi, DT_FRAME_DATA, comm_id, tag, seq, sig, buf, len, by_ref_ok);
}

dt_status dt__engine_isend(dt__engine *e, dt__req *r, int pi, uint32_t comm_id, int32_t tag,
                           uint64_t seq, uint64_t sig, const void *buf, size_t len, bool by_ref_ok)
{
    dt__engine_lock(e);
    dt_status s = isend_locked(e, r, pi, comm_id, tag, seq, sig, buf, len, by_ref_ok);
    if (s == DT_OK && pi != e->rank)
        dt__engine_wake_for(e, pi);
    dt__engine_unlock(e);
    return s;
}

/* Used by teardown: an empty BYE frame after everything already queued. */
dt_status dt__engine_queue_bye(dt__engine *e, int pi)
{
    peer *p = &e->peers[pi];
    p->bye_sent = true;
    return queue_frame(e, &p->bye, pi, DT_FRAME_BYE, 0, 0, 0, 0, NULL, 0, false);
}

uint64_t dt__engine_bytes_sent(const dt__engine *e)
{
    return e ? __atomic_load_n(&e->bytes_sent, __ATOMIC_RELAXED) : 0;
}

void dt__engine_count_sent(dt__engine *e, uint64_t bytes)
{
    if (e)
        __atomic_fetch_add(&e->bytes_sent, bytes, __ATOMIC_RELAXED);
}
