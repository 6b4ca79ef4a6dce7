/* Sticky failure: the first failure completes every pending request with its
 * status, tells the peers why (so that ranks seeing the cascade of closed
 * connections still learn the original cause), and makes every later call
 * return the same error; then the connections linger until the peers have
 * read the notice, and close. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/clock.h"
#include "base/status.h"
#include "transport/engine_internal.h"

static void complete_list(dt__req **head, dt__req **tail, dt_status s)
{
    dt__req *r = *head;
    while (r) {
        dt__req *next = r->next;
        dt__req_complete(r, s);
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

/* Before a failure notice: a frame already half sent must be finished, or
 * the notice would land inside it and the peer would only see a cut-off
 * message.  The peer is normally alive and reading; give up at the deadline. */
static bool finish_frame(peer *p, int64_t deadline)
{
    dt__req *r = p->sendq;
    while (r && r->off > 0 && r->off < dt__frame_bytes(r)) {
        ssize_t w = dt__send_rest(p, r);
        if (w > 0) {
            r->off += (size_t)w;
            continue;
        }
        if ((w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) || dt__now_ns() >= deadline)
            return false;
        struct pollfd pf = {.fd = p->ch->fd, .events = POLLOUT};
        /* a ring has no POLLOUT: look again soon */
        poll(&pf, 1, p->ch->ops->pumped ? 1 : dt__ms_left(deadline, 50));
    }
    return true;
}

static void send_notice(peer *p, const uint8_t *hdr, const char *text, size_t len, int64_t deadline)
{
    dt__chan *c = p->ch;
    struct iovec iov[2] = {{(void *)hdr, DT_FRAME_HDR}, {(void *)text, len}};
    while (c->ops->writable(c) < DT_FRAME_HDR + len && dt__now_ns() < deadline)
        poll(NULL, 0, 1); /* no half frames in a ring: wait for room */
    if (c->ops->writable(c) >= DT_FRAME_HDR + len)
        (void)c->ops->send(c, iov, 2); /* else the peer sees the close */
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
            if (!dt__peer_open(p) || p->bye_received || partial != (pass == 1))
                continue;
            if (p->ch->ops->gone && p->ch->ops->gone(p->ch))
                continue; /* that process is gone */
            int64_t deadline = dt__deadline_after(0.2);
            if (!partial || finish_frame(p, deadline))
                send_notice(p, hdr, text, len, deadline);
        }
    }
}

dt_status dt__engine_fail_with(dt__engine *e, dt_status code, bool notify, const char *msg)
{
    dt__engine_lock(e);
    if (e->failed == DT_OK) {
        snprintf(e->fail_msg, sizeof e->fail_msg, "%s", msg);
        if (notify)
            notify_peers(e, code, msg);
        e->failed = code;
        for (int i = 0; e->peers && i < e->size; i++) {
            peer *p = &e->peers[i];
            if (p->target)
                dt__req_complete(p->target, code);
            p->target = NULL;
            complete_list(&p->sendq, &p->sendq_tail, code);
            complete_list(&p->unacked, &p->unacked_tail, code);
            complete_list(&p->posted, &p->posted_tail, code);
            free_unexpected(e, p);
            /* FIN after the notice, no close yet: closing with unread input
             * would send RST and the peer would lose the notice. */
            if (dt__peer_open(p))
                shutdown(p->ch->fd, SHUT_WR);
        }
        if (e->fail_hook)
            e->fail_hook(e->fail_hook_arg, code, e->fail_msg);
        dt__engine_wake(e); /* a poller asleep in poll() stops at once */
    }
    dt_status s = dt__engine_status(e);
    dt__engine_unlock(e);
    return s;
}

dt_status dt__engine_fail(dt__engine *e, dt_status code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return dt__engine_fail_with(e, code, true, msg);
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
            if (dt__peer_open(&e->peers[i])) {
                e->pfds[n] = (struct pollfd){.fd = e->peers[i].ch->fd, .events = POLLIN};
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
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                dt__chan *c = e->peers[e->pfd_peer[k]].ch;
                c->ops->close(c);
            }
        }
    }
    for (int i = 0; i < e->size; i++)
        if (e->peers[i].ch)
            e->peers[i].ch->ops->close(e->peers[i].ch);
}

/* Teardown: no other thread uses the engine any more. */
dt_status dt__engine_close(dt__engine *e)
{
    bool failed = e->failed != DT_OK;
    e->fail_hook = NULL; /* an orderly end is not a failure to report */
    dt_status s = dt__engine_fail_with(e, DT_ERR_INVALID, false, "the communicator was destroyed");
    if (e->peers)
        linger_and_close(e, failed ? 1.0 : 0.0);
    return s;
}

dt_status dt__engine_status(dt__engine *e)
{
    dt__engine_lock(e);
    dt_status s = e->failed == DT_OK ? DT_OK : dt__fail(e->failed, "%s", e->fail_msg);
    dt__engine_unlock(e);
    return s;
}

dt_status dt__engine_abort(dt__engine *e, const char *reason)
{
    char text[DT_FRAME_MAX_CONTROL], local[DT_FRAME_MAX_CONTROL + 64];
    snprintf(text, sizeof text, "%s aborted the job: %s", e->peers[e->rank].name, reason ? reason : "(no reason given)");
    snprintf(local, sizeof local, "this rank aborted the job: %s", reason ? reason : "(no reason given)");
    dt__engine_lock(e);
    if (e->failed == DT_OK)
        notify_peers(e, DT_ERR_ABORTED, text);
    dt_status s = dt__engine_fail_with(e, DT_ERR_ABORTED, false, local);
    dt__engine_unlock(e);
    return s;
}
