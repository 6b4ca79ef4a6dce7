#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/spin.h"
#include "base/status.h"
#include "transport/engine_internal.h"
#include "transport/heartbeat.h"
#include "transport/socket.h"

int dt__engine_rank(const dt__engine *e) { return e->rank; }
int dt__engine_size(const dt__engine *e) { return e->size; }
const char *dt__engine_peer_name(dt__engine *e, int p) { return e->peers[p].name; }
void dt__engine_allow_poll_spin(dt__engine *e, bool allow) { e->poll_spin_off = !allow; }

void dt__engine_shm_spin_policy(const dt__engine *e, int64_t *spin_ns, bool *yields)
{
    *spin_ns = e->shm_spin_ns;
    *yields = e->shm_spin_yields;
}
bool dt__engine_is_local(const dt__engine *e, int p) { return p == e->rank || e->peers[p].shm != NULL; }

bool dt__engine_tcp_probes_rtt(const dt__engine *e)
{
    for (int p = 0; p < e->size; p++)
        if (!dt__engine_is_local(e, p) && e->peers[p].fd >= 0 && dt__sock_probes_rtt(e->peers[p].fd))
            return true;
    return false;
}

static void complete(dt__req *r, dt_status s)
{
    r->state = DT_REQ_DONE;
    r->status = s;
    r->next = NULL;
}

static void complete_list(dt__req **head, dt__req **tail, dt_status s)
{
    dt__req *r = *head;
    while (r) {
        dt__req *next = r->next;
        complete(r, s);
        r = next;
    }
    *head = *tail = NULL;
}

static void free_unexpected(dt__engine *e, peer *p)
{
    for (unexpected *u = p->unexp; u;) {
        unexpected *n = u->next;
        e->refs_waiting -= u->in_sender;
        dt__bufcache_put(&e->early, u->data, u->cap);
        free(u);
        u = n;
    }
    p->unexp = p->unexp_tail = NULL;
    if (p->stash) {
        dt__bufcache_put(&e->early, p->stash->data, p->stash->cap);
        free(p->stash);
        p->stash = NULL;
    }
    free(p->control);
    p->control = NULL;
}

static void close_peer(peer *p)
{
    if (p->fd >= 0)
        close(p->fd);
    p->fd = -1;
    p->inbox_at = p->inbox_end = 0;
}

/* ---- the byte stream to a peer: its socket, or its shared-memory rings ---- */

/* Wake a shared-memory peer sleeping in poll (a full socket buffer means
 * it has wake-ups pending already). */
static void ring_doorbell(peer *p)
{
    const uint8_t bell = 0;
    if (p->fd >= 0)
        (void)send(p->fd, &bell, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* sendmsg's contract: bytes written, or -1 with errno (EAGAIN when full). */
static ssize_t chan_send(peer *p, struct iovec *iov, int n)
{
    if (!p->shm) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        return sendmsg(p->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    size_t w = dt__shm_write(p->tx, iov, n);
    if (w == 0) {
        errno = EAGAIN;
        return -1;
    }
    if (dt__shm_wake_consumer(p->tx))
        ring_doorbell(p);
    return (ssize_t)w;
}

/* Size of a TCP peer's inbox, and the read from which the socket's bytes go
 * straight to their destination instead (a copy of more would cost more
 * than the recv it saves). */
#define INBOX_BYTES 8192
#define INBOX_DIRECT_MIN 4096

static bool inbox_has_bytes(const peer *p) { return p->inbox_at < p->inbox_end; }

static ssize_t socket_recv(peer *p, void *dst, size_t len)
{
    uint8_t discard[65536];
    return dst ? recv(p->fd, dst, len, MSG_DONTWAIT)
               : recv(p->fd, discard, len < sizeof discard ? len : sizeof discard, MSG_DONTWAIT);
}

/* Up to len bytes of the TCP stream: from the inbox, else from the socket
 * (small reads fill the inbox with whatever has arrived). */
static ssize_t tcp_recv(peer *p, void *dst, size_t len)
{
    if (!inbox_has_bytes(p)) {
        if (len >= INBOX_DIRECT_MIN)
            return socket_recv(p, dst, len);
        if (!p->inbox && !(p->inbox = malloc(INBOX_BYTES)))
            return socket_recv(p, dst, len); /* no memory for it: read exactly */
        ssize_t n = recv(p->fd, p->inbox, INBOX_BYTES, MSG_DONTWAIT);
        if (n <= 0)
            return n;
        p->inbox_at = 0;
        p->inbox_end = (size_t)n;
    }
    size_t k = p->inbox_end - p->inbox_at;
    if (k > len)
        k = len;
    if (dst)
        memcpy(dst, p->inbox + p->inbox_at, k);
    p->inbox_at += k;
    return (ssize_t)k;
}

/* recv's contract (dst NULL drops the bytes); a ring never reports EOF:
 * the end of a shared-memory peer shows on its socket. */
static ssize_t chan_recv(peer *p, void *dst, size_t len)
{
    if (!p->shm)
        return tcp_recv(p, dst, len);
    size_t r = dt__shm_read(p->rx, dst, len);
    if (r == 0) {
        errno = EAGAIN;
        return -1;
    }
    if (dt__shm_wake_producer(p->rx))
        ring_doorbell(p);
    return (ssize_t)r;
}

/* Bytes that follow a header in the stream. */
static size_t stream_len(const dt__frame *f) { return f->type == DT_FRAME_DATA_REF ? DT_FRAME_REF_BYTES : (size_t)f->len; }

static size_t frame_bytes(const dt__req *r) { return DT_FRAME_HDR + (r->by_ref ? sizeof r->ref : r->len); }

/* Send what is left of r's frame (header, then payload or address). */
static ssize_t send_rest(peer *p, dt__req *r)
{
    struct iovec iov[2];
    int n = 0;
    size_t body = r->by_ref ? sizeof r->ref : r->len;
    if (r->off < DT_FRAME_HDR)
        iov[n++] = (struct iovec){r->hdr + r->off, DT_FRAME_HDR - r->off};
    size_t poff = r->off > DT_FRAME_HDR ? r->off - DT_FRAME_HDR : 0;
    if (body > poff)
        iov[n++] = (struct iovec){(r->by_ref ? r->ref : r->buf) + poff, body - poff};
    return chan_send(p, iov, n);
}

/* Before a failure notice: a frame already half sent must be finished, or
 * the notice would land inside it and the peer would only see a cut-off
 * message.  The peer is normally alive and reading; give up at the deadline. */
static bool finish_frame(peer *p, int64_t deadline)
{
    dt__req *r = p->sendq;
    while (r && r->off > 0 && r->off < frame_bytes(r)) {
        ssize_t w = send_rest(p, r);
        if (w > 0) {
            r->off += (size_t)w;
            continue;
        }
        if ((w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) || dt__now_ns() >= deadline)
            return false;
        struct pollfd pf = {.fd = p->fd, .events = POLLOUT};
        poll(&pf, 1, p->shm ? 1 : dt__ms_left(deadline, 50)); /* a ring has no POLLOUT: look again soon */
    }
    return true;
}

static void send_notice(peer *p, const uint8_t *hdr, const char *text, size_t len, int64_t deadline)
{
    struct iovec iov[2] = {{(void *)hdr, DT_FRAME_HDR}, {(void *)text, len}};
    while (p->shm && dt__shm_writable(p->tx) < DT_FRAME_HDR + len && dt__now_ns() < deadline)
        poll(NULL, 0, 1); /* no half frames in a ring: wait for room */
    if (!p->shm || dt__shm_writable(p->tx) >= DT_FRAME_HDR + len)
        (void)chan_send(p, iov, 2); /* else the peer sees the close */
}

/* Best effort: tell every peer why this rank is failing (an ABORT frame whose
 * tag carries the status), so that ranks seeing the cascade of closed
 * connections still learn the original cause.  A peer that does not take the
 * rest of a half-written frame in time sees the connection close instead. */
static void notify_peers(dt__engine *e, dt_status code, const char *text)
{
    size_t len = strlen(text);
    if (len > DT_FRAME_MAX_CONTROL)
        len = DT_FRAME_MAX_CONTROL;
    dt__frame f = {.type = DT_FRAME_ABORT, .tag = code, .len = len};
    uint8_t hdr[DT_FRAME_HDR];
    dt__frame_encode(&f, hdr);
    /* Peers between frames first (at once), then those with a frame half
     * sent, each given a moment to take the rest (a dead or frozen one will
     * not, and is skipped when its moment is up). */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; e->peers && i < e->size; i++) {
            peer *p = &e->peers[i];
            bool partial = p->sendq && p->sendq->off > 0;
            if (p->fd < 0 || p->bye_received || partial != (pass == 1))
                continue;
            if (p->shm && p->pid > 0 && kill(p->pid, 0) != 0)
                continue; /* that process is gone */
            int64_t deadline = dt__deadline_after(0.2);
            if (!partial || finish_frame(p, deadline))
                send_notice(p, hdr, text, len, deadline);
        }
    }
}

static dt_status fail_with(dt__engine *e, dt_status code, bool notify, const char *msg)
{
    if (e->failed == DT_OK) {
        snprintf(e->fail_msg, sizeof e->fail_msg, "%s", msg);
        if (notify)
            notify_peers(e, code, msg);
        e->failed = code;
        for (int i = 0; e->peers && i < e->size; i++) {
            peer *p = &e->peers[i];
            if (p->target)
                complete(p->target, code);
            p->target = NULL;
            complete_list(&p->sendq, &p->sendq_tail, code);
            complete_list(&p->unacked, &p->unacked_tail, code);
            complete_list(&p->posted, &p->posted_tail, code);
            free_unexpected(e, p);
            /* FIN after the notice, no close yet: closing with unread input
             * would send RST and the peer would lose the notice. */
            if (p->fd >= 0)
                shutdown(p->fd, SHUT_WR);
        }
        if (e->fail_hook)
            e->fail_hook(e->fail_hook_arg, code, e->fail_msg);
    }
    return dt__engine_status(e);
}

dt_status dt__engine_fail(dt__engine *e, dt_status code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fail_with(e, code, true, msg);
}

/* After a failure, read and drop input until every peer has closed its side
 * (they fail within milliseconds of our notice), at most `seconds`: closing a
 * socket that still holds unread input sends RST, which would make the peer
 * discard our notice before reading it. */
static void linger_and_close(dt__engine *e, double seconds)
{
    int64_t deadline = dt__deadline_after(seconds);
    uint8_t sink[65536];
    for (;;) {
        int n = 0;
        for (int i = 0; i < e->size; i++)
            if (e->peers[i].fd >= 0) {
                e->pfds[n] = (struct pollfd){.fd = e->peers[i].fd, .events = POLLIN};
                e->pfd_peer[n++] = i;
            }
        if (n == 0 || dt__now_ns() >= deadline)
            break;
        if (poll(e->pfds, (nfds_t)n, dt__ms_left(deadline, 100)) <= 0)
            continue;
        for (int k = 0; k < n; k++) {
            if (!e->pfds[k].revents)
                continue;
            ssize_t r = recv(e->pfds[k].fd, sink, sizeof sink, MSG_DONTWAIT);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
                close_peer(&e->peers[e->pfd_peer[k]]);
        }
    }
    for (int i = 0; i < e->size; i++)
        close_peer(&e->peers[i]);
}

dt_status dt__engine_close(dt__engine *e)
{
    bool failed = e->failed != DT_OK;
    e->fail_hook = NULL; /* an orderly end is not a failure to report */
    dt_status s = fail_with(e, DT_ERR_INVALID, false, "the communicator was destroyed");
    if (e->peers)
        linger_and_close(e, failed ? 1.0 : 0.0);
    return s;
}

dt_status dt__engine_status(dt__engine *e)
{
    if (e->failed == DT_OK)
        return DT_OK;
    return dt__fail(e->failed, "%s", e->fail_msg);
}

static bool matches(const dt__req *r, const dt__frame *f)
{
    return r->comm_id == f->comm_id && r->tag == f->tag && (r->any_seq || dt__frame_seq_eq(r->seq, f->seq));
}

/* ---- sending ---- */

static dt_status peer_read(dt__engine *e, int pi);

static void enqueue(dt__req **head, dt__req **tail, dt__req *r)
{
    r->next = NULL;
    if (*tail)
        (*tail)->next = r;
    else
        *head = r;
    *tail = r;
}

/* Write one ACK frame if the ring has room for all of it; false when not. */
static bool write_ack(peer *p)
{
    if (dt__shm_writable(p->tx) < DT_FRAME_HDR)
        return false;
    dt__frame f = {.type = DT_FRAME_ACK, .seq = p->acks[p->acks_head]};
    uint8_t hdr[DT_FRAME_HDR];
    dt__frame_encode(&f, hdr);
    struct iovec iov = {hdr, sizeof hdr};
    (void)chan_send(p, &iov, 1);
    (void)dt__ref_ack_taken(p);
    return true;
}

static dt_status peer_write(dt__engine *e, int pi)
{
    peer *p = &e->peers[pi];
    p->last_io = dt__now_ns();
    while ((p->sendq || p->acks_owed) && p->fd >= 0) {
        dt__req *r = p->sendq;
        if (p->acks_owed && (!r || r->off == 0)) { /* only between frames */
            if (!write_ack(p))
                return DT_OK;
            continue;
        }
        ssize_t w = send_rest(p, r);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return DT_OK;
            int err = errno;
            if (peer_read(e, pi) != DT_OK) /* the peer may have said why it went away */
                return dt__engine_status(e);
            return dt__engine_fail(e, DT_ERR_PEER, "lost the connection to %s while sending: %s", p->name,
                                   strerror(err));
        }
        r->off += (size_t)w;
        if (r->off < frame_bytes(r))
            return DT_OK;
        p->sendq = r->next;
        if (!p->sendq)
            p->sendq_tail = NULL;
        if (r->by_ref)
            enqueue(&p->unacked, &p->unacked_tail, r); /* done when the peer has read it */
        else
            complete(r, DT_OK);
    }
    return DT_OK;
}

static dt_status queue_frame(dt__engine *e, dt__req *r, int pi, uint8_t type, uint32_t comm_id,
                             int32_t tag, uint64_t seq, uint64_t sig, const void *buf, size_t len, bool by_ref_ok)
{
    dt__frame f = {.type = type, .comm_id = comm_id, .tag = tag, .seq = seq, .len = len, .sig = sig};
    memset(r, 0, sizeof *r);
    r->kind = DT_REQ_SEND;
    r->state = DT_REQ_PENDING;
    r->peer = pi;
    r->comm_id = comm_id;
    r->tag = tag;
    r->seq = seq;
    r->sig = sig;
    r->buf = (uint8_t *)buf;
    r->len = len;
    peer *p = &e->peers[pi];
    if (by_ref_ok && p->send_refs && type == DT_FRAME_DATA && e->shm_copy_min && len >= e->shm_copy_min) {
        f.type = DT_FRAME_DATA_REF;
        r->by_ref = true;
        dt__put_u64(r->ref, (uint64_t)(uintptr_t)buf);
        dt__put_u64(r->ref + 8, p->ref_next++);
    }
    dt__frame_encode(&f, r->hdr);
    bool was_idle = p->sendq == NULL;
    enqueue(&p->sendq, &p->sendq_tail, r);
    return was_idle ? peer_write(e, pi) : DT_OK;
}

/* ---- receiving ---- */

static dt_status deliver_local(dt__engine *e, const dt__frame *f, const void *buf);

dt_status dt__engine_isend(dt__engine *e, dt__req *r, int pi, uint32_t comm_id, int32_t tag,
                           uint64_t seq, uint64_t sig, const void *buf, size_t len, bool by_ref_ok)
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
        DT_CHECK(deliver_local(e, &f, buf));
        complete(r, DT_OK);
        return DT_OK;
    }
    if (e->peers[pi].bye_sent)
        return dt__fail(DT_ERR_INVALID, "send to %s after the communicator was destroyed", e->peers[pi].name);
    return queue_frame(e, r, pi, DT_FRAME_DATA, comm_id, tag, seq, sig, buf, len, by_ref_ok);
}

static void finish_recv(dt__req *r, const dt__frame *f)
{
    r->received = (size_t)f->len;
    complete(r, f->len > r->len ? DT_ERR_TRUNCATE : DT_OK);
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
        complete(r, s);
    dt__bufcache_put(&e->early, u->data, u->cap);
    free(u);
    return s;
}

dt_status dt__engine_irecv(dt__engine *e, dt__req *r, int pi, uint32_t comm_id, int32_t tag,
                           uint64_t seq, uint64_t sig, bool any_seq, void *buf, size_t cap)
{
    DT_CHECK(dt__engine_status(e));
    if (pi < 0 || pi >= e->size)
        return dt__fail(DT_ERR_INVALID, "receive from rank %d outside the world of %d", pi, e->size);
    memset(r, 0, sizeof *r);
    r->kind = DT_REQ_RECV;
    r->state = DT_REQ_PENDING;
    r->peer = pi;
    r->comm_id = comm_id;
    r->tag = tag;
    r->seq = seq;
    r->sig = sig;
    r->any_seq = any_seq;
    r->buf = buf;
    r->len = cap;
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
    enqueue(&p->posted, &p->posted_tail, r);
    return DT_OK;
}

/* Route an arriving DATA frame: to its posted receive, or into a buffer (a
 * DATA_REF's payload stays with its sender until the receive is posted). */
static dt_status route_data(dt__engine *e, peer *p, const dt__frame *f)
{
    dt__req *r = take_posted(p, f);
    if (r && dt__sig_differs(r->sig, f->sig)) {
        complete(r, DT_ERR_INVALID);
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

static dt_status deliver_local(dt__engine *e, const dt__frame *f, const void *buf)
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
        return fail_with(e, known ? (dt_status)f->tag : DT_ERR_ABORTED, true, msg);
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
        finish_recv(r, f);
        if (r->status != DT_OK)
            return dt__engine_fail(e, DT_ERR_TRUNCATE, "message of %llu bytes from %s exceeds the %zu-byte receive buffer (tag %d)",
                                   (unsigned long long)f->len, p->name, r->len, f->tag);
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
    if ((type == DT_FRAME_DATA_REF || type == DT_FRAME_ACK) && !p->shm)
        return dt__engine_fail(e, DT_ERR_PEER, "%s sent a shared-memory frame (type %d) over TCP; connection closed",
                               p->name, type);
    if (type == DT_FRAME_ACK) {
        dt__req *r = dt__ref_take_unacked(p, p->cur.seq);
        if (!r)
            return dt__engine_fail(e, DT_ERR_PEER, "%s acknowledged a message this rank never sent (id %llu)", p->name,
                                   (unsigned long long)p->cur.seq);
        complete(r, DT_OK);
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

static dt_status peer_eof(dt__engine *e, int pi, int err)
{
    peer *p = &e->peers[pi];
    if (p->bye_received && !p->in_payload && p->hdr_got == 0 && err == 0) {
        close_peer(p); /* orderly goodbye */
        return DT_OK;
    }
    if (err)
        return dt__engine_fail(e, DT_ERR_PEER, "lost the connection to %s: %s", p->name, strerror(err));
    return dt__engine_fail(e, DT_ERR_PEER, "%s closed the connection (process died or exited)%s", p->name,
                           p->in_payload || p->hdr_got ? " in the middle of a message" : "");
}

/* Payload bytes one peer_read may put into buffers before returning. */
#define READ_BUFFER_BUDGET (256u << 10)

static dt_status peer_read(dt__engine *e, int pi)
{
    peer *p = &e->peers[pi];
    p->last_io = dt__now_ns();
    size_t buffered = 0; /* payload bytes this call put into buffers of ours */
    for (int budget = 0; budget < 64 && p->fd >= 0; budget++) {
        ssize_t n;
        if (!p->in_payload) {
            n = chan_recv(p, p->hdr + p->hdr_got, DT_FRAME_HDR - p->hdr_got);
        } else {
            size_t want = stream_len(&p->cur) - p->got;
            uint8_t *to = p->cur.type == DT_FRAME_DATA_REF ? p->ref : p->dst;
            n = chan_recv(p, to ? to + p->got : NULL, want);
        }
        if (n == 0)
            return peer_eof(e, pi, 0);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return DT_OK;
            return peer_eof(e, pi, errno);
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

/* ---- shared-memory peers: rings, doorbells, sleeping ---- */

/* Doorbell bytes (dropped) or the end of the connection on the socket of a
 * shared-memory peer.  At the end, whatever it wrote into the ring before
 * going (its goodbye, or why it failed) is read first. */
static dt_status shm_socket_event(dt__engine *e, int pi)
{
    peer *p = &e->peers[pi];
    uint8_t sink[256];
    for (;;) {
        ssize_t n = recv(p->fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n > 0)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return DT_OK;
        if (n < 0 && errno == EINTR)
            continue;
        int err = n < 0 ? errno : 0;
        while (p->fd >= 0 && dt__shm_readable(p->rx) > 0)
            DT_CHECK(peer_read(e, pi));
        return p->fd >= 0 ? peer_eof(e, pi, err) : DT_OK;
    }
}

/* Move what the rings allow; *moved says whether any byte moved. */
static dt_status shm_pump(dt__engine *e, bool *moved)
{
    for (int i = 0; i < e->size; i++) {
        peer *p = &e->peers[i];
        if (!p->shm || p->fd < 0)
            continue;
        if (dt__shm_readable(p->rx) > 0) {
            DT_CHECK(peer_read(e, i));
            *moved = true;
        }
        if ((p->sendq || p->acks_owed) && dt__shm_writable(p->tx) >= (p->sendq ? 1 : DT_FRAME_HDR)) {
            DT_CHECK(peer_write(e, i));
            *moved = true;
        }
    }
    return DT_OK;
}

/* True when some ring has work for this rank (an engine). */
static bool shm_ready(void *engine)
{
    dt__engine *e = engine;
    for (int i = 0; i < e->size; i++) {
        peer *p = &e->peers[i];
        if (p->shm && p->fd >= 0 &&
            (dt__shm_readable(p->rx) > 0 || ((p->sendq || p->acks_owed) && dt__shm_writable(p->tx) >= DT_FRAME_HDR)))
            return true;
    }
    return false;
}

/* Announce sleep on every ring; false (do not sleep) when work arrived. */
static bool shm_arm(dt__engine *e)
{
    for (int i = 0; i < e->size; i++) {
        peer *p = &e->peers[i];
        if (!p->shm || p->fd < 0)
            continue;
        if (!dt__shm_sleep_rx(p->rx))
            return false;
        if ((p->sendq || p->acks_owed) && !dt__shm_sleep_tx(p->tx, p->sendq ? 1 : DT_FRAME_HDR))
            return false;
    }
    return true;
}

static void shm_disarm(dt__engine *e)
{
    for (int i = 0; i < e->size; i++)
        if (e->peers[i].shm) {
            dt__shm_awake_rx(e->peers[i].rx);
            dt__shm_awake_tx(e->peers[i].tx);
        }
}

/* Before sleeping: a busy poll of the rings, which a peer on another core
 * answers in microseconds (a doorbell costs two system calls and a wake-up).
 * After the first few microseconds every look also yields the core: a peer
 * this rank woke with a doorbell is often queued on this very core (the
 * scheduler places a wakee next to its waker) and would otherwise wait the
 * whole spin for it, which turned every exchange of 2 local ranks into a
 * spin plus a wake-up (70 us for an 8-byte allreduce instead of 4). */
static bool shm_spin(dt__engine *e)
{
    return dt__spin_until(shm_ready, e, e->shm_spin_ns, e->shm_spin_yields, 1);
}

/* A rank whose every peer is on shared memory looks at its sockets (doorbell
 * bytes, a peer's end) at most this often while the rings keep moving: each
 * look is a system call, a third of a small exchange's cost in this VM. */
#define SHM_SOCKET_LOOK_NS 1000000

static const char *req_what(dt__engine *e, const dt__req *r, char *buf, size_t len);

/* Heartbeats: a peer this rank has pending work with, and nothing read from
 * or written to for a heartbeat period, is asked whether it still beats. */
static dt_status watch_silent_peers(dt__engine *e)
{
    int64_t now = dt__now_ns();
    if (now - e->last_watch_ns < e->heartbeat_period_ns / 4)
        return DT_OK;
    e->last_watch_ns = now;
    for (int i = 0; i < e->size; i++) {
        peer *p = &e->peers[i];
        const dt__req *r = p->target ? p->target : p->posted ? p->posted : p->sendq ? p->sendq : p->unacked;
        if (i == e->rank || !r || now - p->last_io < e->heartbeat_period_ns)
            continue;
        if (dt__heartbeat_check(e->heartbeat, i, p->name) != DT_OK) {
            char why[1024], what[256];
            snprintf(why, sizeof why, "%s", dt_last_error());
            return dt__engine_fail(e, DT_ERR_PEER, "%s (waiting for %s)", why, req_what(e, r, what, sizeof what));
        }
    }
    return DT_OK;
}

dt_status dt__engine_progress(dt__engine *e, int timeout_ms)
{
    DT_CHECK(dt__engine_status(e));
    if (e->refs_waiting) {
        DT_CHECK(dt__ref_fetch_stale(e));
        int wait_ms = DT__REF_WAIT_NS / 1000000 + 1; /* wake up to copy the rest once stale */
        if (e->refs_waiting && timeout_ms > wait_ms)
            timeout_ms = wait_ms;
    }
    if (e->heartbeat) {
        DT_CHECK(watch_silent_peers(e));
        int period_ms = (int)(e->heartbeat_period_ns / 1000000) + 1;
        if (timeout_ms > period_ms)
            timeout_ms = period_ms;
    }
    bool armed = false;
    if (e->nshm) {
        bool moved = false;
        DT_CHECK(shm_pump(e, &moved));
        if (moved || (timeout_ms > 0 && shm_spin(e)))
            timeout_ms = 0;
        else if (timeout_ms > 0)
            armed = shm_arm(e);
        if (timeout_ms > 0 && !armed)
            timeout_ms = 0;
    }
    if (timeout_ms == 0 && e->nshm + 1 == e->size) { /* only shm-only ranks pay this clock read */
        int64_t now = dt__now_ns();
        if (now - e->sockets_seen_ns < SHM_SOCKET_LOOK_NS)
            return dt__engine_status(e);
        e->sockets_seen_ns = now;
    }
    int n = 0;
    for (int i = 0; i < e->size; i++) {
        peer *p = &e->peers[i];
        if (p->fd < 0)
            continue;
        bool out = p->sendq && !p->shm;
        e->pfds[n] = (struct pollfd){.fd = p->fd, .events = (short)(POLLIN | (out ? POLLOUT : 0))};
        e->pfd_peer[n++] = i;
        if (inbox_has_bytes(p))
            timeout_ms = 0; /* frames already read wait in the inbox */
    }
    int rc = 0;
    if (timeout_ms > 0 && e->poll_spin_ns > 0 && !e->poll_spin_off && e->nshm + 1 < e->size) {
        /* A wake-up from a blocking poll costs tens of microseconds; with
         * peers over TCP look without blocking first, giving the core away
         * between looks (the 8-byte allreduce on 4 namespace hosts: 107 ->
         * 72 us with 200 us of looking). */
        int64_t until = dt__now_ns() + e->poll_spin_ns;
        while ((rc = poll(e->pfds, (nfds_t)n, 0)) == 0 && dt__now_ns() < until)
            sched_yield();
    }
    if (rc == 0)
        rc = poll(e->pfds, (nfds_t)n, timeout_ms);
    if (armed)
        shm_disarm(e);
    if (rc < 0 && errno != EINTR)
        return dt__engine_fail(e, DT_ERR_SYSTEM, "poll: %s", strerror(errno));
    for (int k = 0; rc >= 0 && k < n; k++) {
        short ev = rc > 0 ? e->pfds[k].revents : 0;
        int pi = e->pfd_peer[k];
        if (e->peers[pi].shm) {
            if (ev & (POLLIN | POLLHUP | POLLERR))
                DT_CHECK(shm_socket_event(e, pi));
            continue;
        }
        if ((ev & (POLLIN | POLLHUP | POLLERR)) || inbox_has_bytes(&e->peers[pi]))
            DT_CHECK(peer_read(e, pi));
        if (ev & POLLOUT)
            DT_CHECK(peer_write(e, pi));
    }
    if (e->nshm) {
        bool moved = false;
        DT_CHECK(shm_pump(e, &moved));
    }
    return dt__engine_status(e);
}

static const char *req_what(dt__engine *e, const dt__req *r, char *buf, size_t len)
{
    snprintf(buf, len, "%s %s (tag %d, sequence %llu)", r->kind == DT_REQ_SEND ? "a send to" : "a message from",
             e->peers[r->peer].name, r->tag, (unsigned long long)r->seq);
    return buf;
}

void dt__engine_set_heartbeat(dt__engine *e, struct dt__heartbeat *h)
{
    e->heartbeat = h;
    e->heartbeat_period_ns = h ? (int64_t)(dt__heartbeat_period(h) * 1e9) : 0;
}

void dt__engine_set_sig_namer(dt__engine *e, dt__sig_namer namer) { e->sig_namer = namer; }

void dt__engine_set_fail_hook(dt__engine *e, void (*hook)(void *arg, dt_status code, const char *why), void *arg)
{
    e->fail_hook = hook;
    e->fail_hook_arg = arg;
}

dt_status dt__engine_wait_all(dt__engine *e, dt__req *rs, size_t n, int64_t deadline_ns)
{
    for (size_t i = 0; i < n; i++) {
        while (rs[i].state == DT_REQ_PENDING) {
            if (dt__now_ns() >= deadline_ns) {
                char what[256];
                return dt__engine_fail(e, DT_ERR_TIMEOUT, "timed out after %.0f s waiting for %s", e->timeout_s,
                                       req_what(e, &rs[i], what, sizeof what));
            }
            DT_CHECK(dt__engine_progress(e, dt__ms_left(deadline_ns, 1000)));
        }
        if (rs[i].status != DT_OK)
            return dt__engine_status(e) != DT_OK ? e->failed : dt__fail(rs[i].status, "request failed");
    }
    return DT_OK;
}

dt_status dt__engine_wait(dt__engine *e, dt__req *r, int64_t deadline_ns)
{
    return dt__engine_wait_all(e, r, 1, deadline_ns);
}

dt_status dt__engine_abort(dt__engine *e, const char *reason)
{
    char text[DT_FRAME_MAX_CONTROL], local[DT_FRAME_MAX_CONTROL + 64];
    snprintf(text, sizeof text, "%s aborted the job: %s", e->peers[e->rank].name, reason ? reason : "(no reason given)");
    snprintf(local, sizeof local, "this rank aborted the job: %s", reason ? reason : "(no reason given)");
    if (e->failed == DT_OK)
        notify_peers(e, DT_ERR_ABORTED, text);
    return fail_with(e, DT_ERR_ABORTED, false, local);
}

/* Used by teardown: an empty BYE frame after everything already queued. */
dt_status dt__engine_queue_bye(dt__engine *e, int pi)
{
    peer *p = &e->peers[pi];
    p->bye_sent = true;
    return queue_frame(e, &p->bye, pi, DT_FRAME_BYE, 0, 0, 0, 0, NULL, 0, false);
}
