/* The poll loop: pumping the memory channels (shared memory), spinning on
 * them before sleeping, sleeping in poll() on every peer's socket with the
 * memory channels armed to ring the doorbell, and waiting for requests with
 * deadlines and heartbeats. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/spin.h"
#include "base/status.h"
#include "transport/engine_internal.h"
#include "transport/heartbeat.h"

/* ---- pumped peers (shared memory): rings, doorbells, sleeping ---- */

/* Doorbell bytes (dropped) or the end of the connection on the socket of a
 * shared-memory peer.  At the end, whatever it wrote into the ring before
 * going (its goodbye, or why it failed) is read first. */
static dt_status doorbell_event(dt__engine *e, int pi)
{
    dt__chan *c = e->peers[pi].ch;
    int err = 0;
    if (c->ops->doorbells(c, &err))
        return DT_OK;
    while (c->fd >= 0 && c->ops->readable(c) > 0)
        DT_CHECK(dt__peer_read(e, pi));
    return c->fd >= 0 ? dt__peer_eof(e, pi, err) : DT_OK;
}

/* A peer whose channel the loop pumps (and arms before sleeping). */
static inline bool pumped(const peer *p) { return p->ch && p->ch->ops->pumped; }

/* Move what the rings allow; *moved says whether any byte moved. */
static dt_status shm_pump(dt__engine *e, bool *moved)
{
    for (int i = 0; i < e->size; i++) {
        peer *p = &e->peers[i];
        if (!pumped(p) || p->ch->fd < 0)
            continue;
        dt__chan *c = p->ch;
        if (c->ops->readable(c) > 0) {
            DT_CHECK(dt__peer_read(e, i));
            *moved = true;
        }
        if ((p->sendq || p->acks_owed) && c->ops->writable(c) >= (p->sendq ? 1 : DT_FRAME_HDR)) {
            DT_CHECK(dt__peer_write(e, i));
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
        if (!pumped(p) || p->ch->fd < 0)
            continue;
        dt__chan *c = p->ch;
        if (c->ops->readable(c) > 0 || ((p->sendq || p->acks_owed) && c->ops->writable(c) >= DT_FRAME_HDR))
            return true;
    }
    return false;
}

/* Announce sleep on every ring; false (do not sleep) when work arrived. */
static bool shm_arm(dt__engine *e)
{
    for (int i = 0; i < e->size; i++) {
        peer *p = &e->peers[i];
        if (!pumped(p) || p->ch->fd < 0)
            continue;
        size_t need_tx = p->sendq ? 1 : p->acks_owed ? DT_FRAME_HDR : 0;
        if (!p->ch->ops->arm(p->ch, need_tx))
            return false;
    }
    return true;
}

static void shm_disarm(dt__engine *e)
{
    for (int i = 0; i < e->size; i++)
        if (pumped(&e->peers[i]))
            e->peers[i].ch->ops->disarm(e->peers[i].ch);
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

/* "a message from rank 3 (10.0.0.4:4242) (tag 5, sequence 12)" */
static const char *req_what(dt__engine *e, const dt__req *r, char *buf, size_t len)
{
    snprintf(buf, len, "%s %s (tag %d, sequence %llu)", r->kind == DT_REQ_SEND ? "a send to" : "a message from",
             e->peers[r->peer].name, r->tag, (unsigned long long)r->seq);
    return buf;
}

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

/* ---- threads: one poller, the others wait for its passes ---- */

/* The engine this thread is the poller of (NULL: none). */
static _Thread_local dt__engine *polling_here;

void dt__engine_wake(dt__engine *e)
{
    if (e->polling && polling_here != e && e->wake_fd >= 0) {
        uint64_t one = 1;
        ssize_t n = write(e->wake_fd, &one, sizeof one); /* full counter: a wake-up is pending anyway */
        (void)n;
    }
}

void dt__engine_wake_for(dt__engine *e, int pi)
{
    const peer *p = &e->peers[pi];
    if (p->sendq || p->acks_owed)
        dt__engine_wake(e);
}

static void drain_wake_fd(dt__engine *e)
{
    uint64_t v;
    ssize_t n = read(e->wake_fd, &v, sizeof v);
    (void)n;
}

/* poll() with the lock released, so that other threads post and wait
 * meanwhile; only the poller touches pfds.  Returns poll's result. */
static int poll_unlocked(dt__engine *e, int n, int timeout_ms)
{
    dt__engine_unlock(e);
    int rc = poll(e->pfds, (nfds_t)n, timeout_ms);
    int err = errno;
    dt__engine_lock(e);
    errno = err;
    return rc;
}

/* One pass of the poller (mu held, e->polling set by this thread). */
static dt_status poll_pass(dt__engine *e, int timeout_ms)
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
        if (!dt__peer_open(p))
            continue;
        dt__chan *c = p->ch;
        bool out = p->sendq && !c->ops->pumped;
        e->pfds[n] = (struct pollfd){.fd = c->fd, .events = (short)(POLLIN | (out ? POLLOUT : 0))};
        e->pfd_peer[n++] = i;
        if (!c->ops->pumped && c->ops->readable(c))
            timeout_ms = 0; /* frames already read wait in the inbox */
    }
    int npeers = n;
    if (timeout_ms > 0) /* another thread may need this sleep cut short */
        e->pfds[n++] = (struct pollfd){.fd = e->wake_fd, .events = POLLIN};
    int rc = 0;
    if (timeout_ms > 0 && e->poll_spin_ns > 0 && !dt__poll_spin_off && e->nshm + 1 < e->size) {
        /* A wake-up from a blocking poll costs tens of microseconds; with
         * peers over TCP look without blocking first, giving the core away
         * between looks (the 8-byte allreduce on 4 namespace hosts: 107 ->
         * 72 us with 200 us of looking). */
        int64_t until = dt__now_ns() + e->poll_spin_ns;
        dt__engine_unlock(e);
        while ((rc = poll(e->pfds, (nfds_t)n, 0)) == 0 && dt__now_ns() < until)
            sched_yield();
        int err = errno;
        dt__engine_lock(e);
        errno = err;
    }
    if (rc == 0)
        rc = timeout_ms > 0 ? poll_unlocked(e, n, timeout_ms) : poll(e->pfds, (nfds_t)n, 0);
    if (armed)
        shm_disarm(e);
    if (rc < 0 && errno != EINTR)
        return dt__engine_fail(e, DT_ERR_SYSTEM, "poll: %s", strerror(errno));
    if (e->failed != DT_OK) /* another thread failed the engine while this one slept */
        return dt__engine_status(e);
    if (n > npeers && rc > 0 && e->pfds[npeers].revents) {
        drain_wake_fd(e);
        rc--;
    }
    for (int k = 0; rc >= 0 && k < npeers; k++) {
        short ev = rc > 0 ? e->pfds[k].revents : 0;
        int pi = e->pfd_peer[k];
        dt__chan *c = e->peers[pi].ch;
        if (!dt__peer_open(&e->peers[pi]) || c->fd != e->pfds[k].fd)
            continue; /* closed by another thread while this one slept */
        if (c->ops->pumped) {
            if (ev & (POLLIN | POLLHUP | POLLERR))
                DT_CHECK(doorbell_event(e, pi));
            continue;
        }
        if ((ev & (POLLIN | POLLHUP | POLLERR)) || c->ops->readable(c))
            DT_CHECK(dt__peer_read(e, pi));
        if (ev & POLLOUT)
            DT_CHECK(dt__peer_write(e, pi));
    }
    if (e->nshm) {
        bool moved = false;
        DT_CHECK(shm_pump(e, &moved));
    }
    return dt__engine_status(e);
}

/* Progress as the poller, or, while another thread is the poller (it serves
 * this thread's requests too), wait up to timeout_ms for its next pass.
 * mu held exactly once (the waits release it). */
static dt_status progress_locked(dt__engine *e, int timeout_ms)
{
    if (e->polling) {
        if (timeout_ms > 0) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            int64_t at = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + (int64_t)timeout_ms * 1000000;
            ts.tv_sec = (time_t)(at / 1000000000);
            ts.tv_nsec = (long)(at % 1000000000);
            pthread_cond_timedwait(&e->progressed, &e->mu, &ts);
        }
        return dt__engine_status(e);
    }
    e->polling = true;
    polling_here = e;
    dt_status s = poll_pass(e, timeout_ms);
    polling_here = NULL;
    e->polling = false;
    pthread_cond_broadcast(&e->progressed);
    return s;
}

dt_status dt__engine_progress(dt__engine *e, int timeout_ms)
{
    dt__engine_lock(e);
    dt_status s = progress_locked(e, timeout_ms);
    dt__engine_unlock(e);
    return s;
}

static dt_status wait_all_locked(dt__engine *e, dt__req *rs, size_t n, int64_t deadline_ns)
{
    for (size_t i = 0; i < n; i++) {
        while (rs[i].state == DT_REQ_PENDING) {
            if (dt__now_ns() >= deadline_ns) {
                char what[256];
                return dt__engine_fail(e, DT_ERR_TIMEOUT, "timed out after %.0f s waiting for %s", e->timeout_s,
                                       req_what(e, &rs[i], what, sizeof what));
            }
            DT_CHECK(progress_locked(e, dt__ms_left(deadline_ns, 1000)));
        }
        if (rs[i].status != DT_OK)
            return dt__engine_status(e) != DT_OK ? e->failed : dt__fail(rs[i].status, "request failed");
    }
    return DT_OK;
}

dt_status dt__engine_wait_all(dt__engine *e, dt__req *rs, size_t n, int64_t deadline_ns)
{
    dt__engine_lock(e);
    dt_status s = wait_all_locked(e, rs, n, deadline_ns);
    dt__engine_unlock(e);
    return s;
}

dt_status dt__engine_wait_any(dt__engine *e, dt__req *const *rs, size_t n, int64_t deadline_ns, size_t *which)
{
    dt__engine_lock(e);
    dt_status s = DT_OK;
    for (;;) {
        size_t first = n;
        for (size_t i = 0; i < n; i++)
            if (rs[i] && rs[i]->state != DT_REQ_PENDING) {
                *which = i;
                dt__engine_unlock(e);
                return DT_OK;
            } else if (rs[i] && first == n)
                first = i;
        if (first == n) { /* nothing pending */
            *which = n;
            break;
        }
        if (dt__now_ns() >= deadline_ns) {
            char what[256];
            s = dt__engine_fail(e, DT_ERR_TIMEOUT, "timed out after %.0f s waiting for %s or %zu other request%s",
                                e->timeout_s, req_what(e, rs[first], what, sizeof what), n - 1, n == 2 ? "" : "s");
            break;
        }
        if ((s = progress_locked(e, dt__ms_left(deadline_ns, 1000))) != DT_OK)
            break;
    }
    dt__engine_unlock(e);
    return s;
}

dt_status dt__engine_wait(dt__engine *e, dt__req *r, int64_t deadline_ns)
{
    return dt__engine_wait_all(e, r, 1, deadline_ns);
}
