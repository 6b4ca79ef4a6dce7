/* The MPI backend's point to point: MPI_Isend / MPI_Irecv of bytes, and
 * waits that poll MPI_Test up to the communicator's deadline (DT_TIMEOUT),
 * so that a silent peer still fails the wait as the native backend's does.
 *
 * Sends are buffered, as dtrain's contract says (a cycle of blocking sends
 * completes): isend copies the message, and a wait on a send whose receiver
 * has not matched it yet hands the MPI request to a list of detached sends,
 * which every later poll progresses and the world's destruction finishes.
 * The copy costs one memcpy per send (MPI's own eager protocol copies the
 * small ones anyway).
 * dtrain's tags (0..DT_TAG_MAX) are MPI's tags as they are; an MPI whose
 * MPI_TAG_UB is smaller refuses the larger ones naming both. */
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/status.h"
#include "comm/coll.h"
#include "comm/mpi/mpi_internal.h"
#include "transport/frame.h"

typedef struct {
    dt_request base; /* first: the dt_request the caller holds */
    MPI_Request mr;
    bool is_send;
    int peer;
    size_t len;
    /* completed by dt_cancel of a receive that had already matched */
    bool done;
    int rc;
    size_t got;
    void *copy; /* a send's own copy of the message */
} mpi_req;

/* Sends whose wait returned before MPI completed them (one world per process). */
typedef struct detached {
    struct detached *next;
    MPI_Request mr;
    void *copy;
} detached;
static detached *detached_sends;
static pthread_mutex_t detached_mu = PTHREAD_MUTEX_INITIALIZER;

static void progress_detached(void)
{
    if (!__atomic_load_n(&detached_sends, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&detached_mu);
    for (detached **p = &detached_sends; *p;) {
        int done = 0;
        DT__MPI_LOCK();
        int rc = MPI_Test(&(*p)->mr, &done, MPI_STATUS_IGNORE);
        DT__MPI_UNLOCK();
        if (done || rc != MPI_SUCCESS) {
            detached *d = *p;
            *p = d->next;
            free(d->copy);
            free(d);
        } else {
            p = &(*p)->next;
        }
    }
    pthread_mutex_unlock(&detached_mu);
}

static bool detach(mpi_req *r)
{
    detached *d = malloc(sizeof *d);
    if (!d)
        return false;
    d->mr = r->mr;
    d->copy = r->copy;
    pthread_mutex_lock(&detached_mu);
    d->next = detached_sends;
    __atomic_store_n(&detached_sends, d, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&detached_mu);
    return true;
}

void dt__mpi_p2p_flush(double timeout_s)
{
    int64_t deadline = dt__deadline_after(timeout_s);
    while (__atomic_load_n(&detached_sends, __ATOMIC_ACQUIRE) && dt__now_ns() < deadline)
        progress_detached();
    pthread_mutex_lock(&detached_mu);
    while (detached_sends) { /* never received: withdrawn */
        detached *d = detached_sends;
        detached_sends = d->next;
        MPI_Cancel(&d->mr);
        MPI_Request_free(&d->mr);
        free(d->copy);
        free(d);
    }
    pthread_mutex_unlock(&detached_mu);
}

static int tag_ub(dt_comm *c)
{
    int *ub = NULL, flag = 0;
    MPI_Comm_get_attr(dt__mpi_of(c), MPI_TAG_UB, &ub, &flag);
    return flag && ub ? *ub : 32767;
}

static dt_status post(dt_comm *c, bool is_send, void *buf, size_t count, dt_dtype t, int peer, int tag,
                      dt_request **out)
{
    const char *op = is_send ? "send" : "recv";
    DT_CHECK(dt__comm_usable(c, op));
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
    if (count * es > INT_MAX)
        return dt__fail(DT_ERR_INVALID, "%s: %zu bytes exceed MPI's largest message count (%d bytes)", op,
                        count * es, INT_MAX);
    int ub = tag_ub(c);
    if (tag > ub)
        return dt__fail(DT_ERR_INVALID, "%s: tag %d is above this MPI's MPI_TAG_UB %d", op, tag, ub);
    mpi_req *r = calloc(1, sizeof *r);
    if (!r)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    r->base.comm = c;
    r->base.elem = es;
    r->is_send = is_send;
    r->peer = peer;
    r->len = count * es;
    if (is_send && r->len) {
        r->copy = malloc(r->len);
        if (!r->copy) {
            free(r);
            return dt__fail(DT_ERR_NOMEM, "out of memory");
        }
        memcpy(r->copy, buf, r->len);
        buf = r->copy;
    }
    DT__MPI_LOCK();
    int rc = is_send ? MPI_Isend(buf, (int)r->len, MPI_BYTE, peer, tag, dt__mpi_of(c), &r->mr)
                     : MPI_Irecv(buf, (int)r->len, MPI_BYTE, peer, tag, dt__mpi_of(c), &r->mr);
    DT__MPI_UNLOCK();
    if (rc != MPI_SUCCESS) {
        free(r->copy);
        free(r);
        return dt__mpi_error(rc, op);
    }
    *out = &r->base;
    return DT_OK;
}

dt_status dt__mpi_isend(const void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c, dt_request **req)
{
    return post(c, true, (void *)buf, count, t, peer, tag, req);
}

dt_status dt__mpi_irecv(void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c, dt_request **req)
{
    return post(c, false, buf, count, t, peer, tag, req);
}

/* One MPI_Test; *done once it completed (r->rc and r->got set). */
static void poll_one(mpi_req *r, int *done)
{
    progress_detached();
    if (r->done) {
        *done = 1;
        return;
    }
    MPI_Status st;
    DT__MPI_LOCK();
    int rc = MPI_Test(&r->mr, done, &st);
    DT__MPI_UNLOCK();
    if (rc != MPI_SUCCESS)
        *done = 1;
    if (!*done)
        return;
    r->done = true;
    r->rc = rc;
    int n = 0;
    if (rc == MPI_SUCCESS && !r->is_send)
        MPI_Get_count(&st, MPI_BYTE, &n);
    r->got = r->is_send ? r->len : (size_t)n;
}

/* The result of a completed request; frees it. */
static dt_status finish(mpi_req *r, size_t *received)
{
    dt_status s = DT_OK;
    size_t es = r->base.elem;
    if (r->rc != MPI_SUCCESS)
        s = dt__wrap(dt__mpi_error(r->rc, r->is_send ? "send" : "recv"), "%s rank %d: ",
                     r->is_send ? "send to" : "receive from", r->peer);
    else if (!r->is_send && r->got % es)
        s = dt__fail(DT_ERR_TRUNCATE,
                     "receive from rank %d: the message has %zu bytes, not a whole number of the receiver's "
                     "%zu-byte elements (its buffer holds %zu bytes); sender and receiver disagree on the dtype",
                     r->peer, r->got, es, r->len);
    if (received && s == DT_OK)
        *received = r->got / es;
    free(r->copy);
    free(r);
    return s;
}

static void pause_briefly(int64_t spins)
{
    if (spins < 1000) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 20000}; /* 20 us: a waiting rank leaves the core to the others */
    nanosleep(&ts, NULL);
}

dt_status dt__mpi_wait(dt_request *req, size_t *received)
{
    mpi_req *r = (mpi_req *)req;
    int64_t deadline = dt__deadline_after(req->comm->timeout_s);
    int done = 0;
    for (int64_t spins = 0;; spins++) {
        poll_one(r, &done);
        if (done)
            return finish(r, received);
        if (r->is_send && spins > 100 && detach(r)) { /* buffered: it completes in the background */
            if (received)
                *received = r->len / r->base.elem;
            free(r);
            return DT_OK;
        }
        if (dt__now_ns() > deadline)
            return dt__fail(DT_ERR_TIMEOUT, "%s rank %d: nothing after %.0f s (DT_TIMEOUT)",
                            r->is_send ? "send to" : "receive from", r->peer, req->comm->timeout_s);
        pause_briefly(spins);
    }
}

dt_status dt__mpi_test(dt_request *req, int *done, size_t *received)
{
    mpi_req *r = (mpi_req *)req;
    poll_one(r, done);
    return *done ? finish(r, received) : DT_OK;
}

dt_status dt__mpi_cancel(dt_request *req)
{
    mpi_req *r = (mpi_req *)req;
    if (r->is_send)
        return dt__fail(DT_ERR_INVALID, "dt_cancel: a send cannot be cancelled (wait for it)");
    if (r->done)
        return dt__fail(DT_ERR_INVALID, "dt_cancel: the receive has already matched a message (wait for it)");
    MPI_Status st;
    DT__MPI_LOCK();
    MPI_Cancel(&r->mr);
    int rc = MPI_Wait(&r->mr, &st);
    DT__MPI_UNLOCK();
    int cancelled = 0;
    if (rc == MPI_SUCCESS)
        MPI_Test_cancelled(&st, &cancelled);
    if (cancelled) {
        free(r);
        return DT_OK;
    }
    /* It matched first: keep its result for dt_wait / dt_test. */
    int n = 0;
    if (rc == MPI_SUCCESS)
        MPI_Get_count(&st, MPI_BYTE, &n);
    r->done = true;
    r->rc = rc;
    r->got = (size_t)n;
    return dt__fail(DT_ERR_INVALID, "dt_cancel: the receive has already matched a message (wait for it)");
}

dt_status dt__mpi_waitany(dt_request **reqs, int n, int *index, size_t *received)
{
    double timeout = 0;
    for (int i = 0; i < n; i++)
        if (reqs[i] && reqs[i]->comm->timeout_s > timeout)
            timeout = reqs[i]->comm->timeout_s;
    int64_t deadline = dt__deadline_after(timeout);
    for (int64_t spins = 0;; spins++) {
        for (int i = 0; i < n; i++) {
            if (!reqs[i])
                continue;
            int done = 0;
            poll_one((mpi_req *)reqs[i], &done);
            if (done) {
                mpi_req *r = (mpi_req *)reqs[i];
                reqs[i] = NULL;
                *index = i;
                return finish(r, received);
            }
        }
        if (dt__now_ns() > deadline)
            return dt__fail(DT_ERR_TIMEOUT, "dt_waitany: none of %d requests completed in %.0f s (DT_TIMEOUT)", n,
                            timeout);
        pause_briefly(spins);
    }
}
