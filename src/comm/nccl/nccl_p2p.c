/* The NCCL backend's point to point: ncclSend / ncclRecv of bytes on the
 * communicator's stream, each request a CUDA event recorded after its call;
 * wait polls the event, the communicator's asynchronous error and the
 * deadline (DT_TIMEOUT from the wait's start), test polls it once.
 *
 * NCCL's matching, not dtrain's: messages between two ranks match in the
 * order they were posted (tags are not compared), a receive must name the
 * sender's exact size (received reports the posted size), and a send
 * completes only when its receive runs: sends are not buffered, so a cycle
 * of sends posted before their receives on one stream stalls until the
 * deadline aborts the communicator (post the receive first, or use the
 * collectives).  A receive cannot be withdrawn (dt_cancel refuses) once
 * NCCL has it.
 *
 * Messages to this rank itself (NCCL matches a self send only inside one
 * group) are copies on the stream: the send is staged into stream-ordered
 * device memory and completes at once, as dtrain's contract says; the
 * receive takes the oldest staged send of its tag, or waits in a list for
 * it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/status.h"
#include "comm/coll.h"
#include "comm/nccl/nccl_internal.h"

typedef struct {
    dt_request base; /* first: the dt_request the caller holds */
    cudaEvent_t ev;
    bool is_send;
    bool ready;      /* ev was recorded (a self receive waits for its send before) */
    dt_status fail;  /* a self receive's failure found by the send that matched it */
    char why[200];   /* its message (found on the sender's thread) */
    size_t len, got; /* posted and received bytes */
} nccl_req;

/* A self message: a staged send (data) waiting for its receive, or a
 * receive (req, buf) waiting for its send. */
typedef struct dt__nccl_self {
    struct dt__nccl_self *next;
    int tag;
    void *data;
    size_t len;
    nccl_req *req;
    void *buf;
} self_msg;

static dt_status check_post(dt_comm *c, const char *op, const void *buf, size_t count, dt_dtype t, int peer, int tag)
{
    /* After the queued nonblocking collectives: one NCCL communicator is
     * not called from two threads at once. */
    DT_CHECK(dt__comm_check(c, op));
    size_t es = dt_dtype_size(t);
    if (!es)
        return dt__fail(DT_ERR_INVALID, "%s: invalid dtype %d", op, (int)t);
    if (peer < 0 || peer >= c->size)
        return dt__fail(DT_ERR_INVALID, "%s: peer %d is outside the communicator of %d ranks", op, peer, c->size);
    if (tag < 0 || tag > DT_TAG_MAX)
        return dt__fail(DT_ERR_INVALID, "%s: tag %d outside 0..%d", op, tag, DT_TAG_MAX);
    if (count && !buf)
        return dt__fail(DT_ERR_INVALID, "%s: buffer (buf) is NULL for %zu elements", op, count);
    size_t bytes;
    DT_CHECK(dt__coll_bytes(op, count, t, 1, &bytes));
    DT_CHECK(dt__nccl_begin(c, op));
    return dt__nccl_check_buffer(c, op, op[0] == 's' ? "send buffer" : "receive buffer", buf, bytes);
}

static dt_status new_req(dt_comm *c, bool is_send, size_t count, dt_dtype t, nccl_req **out)
{
    nccl_req *r = calloc(1, sizeof *r);
    if (!r)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    r->base.comm = c;
    r->base.elem = dt_dtype_size(t);
    r->is_send = is_send;
    r->len = count * r->base.elem;
    dt_status s = dt__nccl_cuda_error(cudaEventCreateWithFlags(&r->ev, cudaEventDisableTiming),
                                      is_send ? "send" : "recv");
    if (s != DT_OK) {
        free(r);
        return s;
    }
    *out = r;
    return DT_OK;
}

static void free_req(nccl_req *r)
{
    cudaEventDestroy(r->ev);
    free(r);
}

/* The staged data of a self send into a receive, on the stream; the
 * receive's event follows.  Under self_mu. */
static dt_status deliver(dt_comm *c, self_msg *send, nccl_req *r, void *buf)
{
    cudaStream_t st = dt__nccl_of(c)->stream;
    if (send->len > r->len) {
        r->fail = dt__fail(DT_ERR_TRUNCATE, "recv: a message of %zu bytes from this rank itself (tag %d) exceeds "
                                            "the receive buffer of %zu bytes",
                           send->len, send->tag, r->len);
        snprintf(r->why, sizeof r->why, "%s", dt_last_error());
        r->ready = true;
        if (send->data)
            cudaFreeAsync(send->data, st);
        return r->fail;
    }
    dt_status s = DT_OK;
    if (send->len)
        s = dt__nccl_cuda_error(cudaMemcpyAsync(buf, send->data, send->len, cudaMemcpyDeviceToDevice, st), "recv");
    if (send->data)
        cudaFreeAsync(send->data, st);
    if (s == DT_OK)
        s = dt__nccl_record(c, r->ev, "recv");
    r->got = send->len;
    r->ready = true;
    r->fail = s;
    if (s != DT_OK)
        snprintf(r->why, sizeof r->why, "%s", dt_last_error());
    return s;
}

static self_msg *take(self_msg **list, int tag)
{
    for (self_msg **p = list; *p; p = &(*p)->next)
        if ((*p)->tag == tag) {
            self_msg *m = *p;
            *p = m->next;
            return m;
        }
    return NULL;
}

static void append(self_msg **list, self_msg *m)
{
    while (*list)
        list = &(*list)->next;
    *list = m;
}

static dt_status self_send(dt_comm *c, const void *buf, size_t len, int tag, nccl_req *r)
{
    dt__nccl_comm *n = dt__nccl_of(c);
    self_msg *m = calloc(1, sizeof *m);
    if (!m)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    m->tag = tag;
    m->len = len;
    dt_status s = DT_OK;
    if (len)
        s = dt__nccl_cuda_error(cudaMallocAsync(&m->data, len, n->stream), "send");
    if (s == DT_OK && len)
        s = dt__nccl_cuda_error(cudaMemcpyAsync(m->data, buf, len, cudaMemcpyDeviceToDevice, n->stream), "send");
    if (s == DT_OK)
        s = dt__nccl_record(c, r->ev, "send");
    if (s != DT_OK) {
        if (m->data)
            cudaFreeAsync(m->data, n->stream);
        free(m);
        return s;
    }
    r->ready = true;
    pthread_mutex_lock(&n->self_mu);
    self_msg *waiting = take(&n->self_recvs, tag);
    if (waiting) {
        deliver(c, m, waiting->req, waiting->buf); /* its failure is the receive's */
        free(waiting);
        free(m);
    } else {
        append(&n->self_sends, m);
    }
    pthread_mutex_unlock(&n->self_mu);
    return DT_OK;
}

static dt_status self_recv(dt_comm *c, void *buf, int tag, nccl_req *r)
{
    dt__nccl_comm *n = dt__nccl_of(c);
    pthread_mutex_lock(&n->self_mu);
    self_msg *m = take(&n->self_sends, tag);
    dt_status s = DT_OK;
    if (m) {
        deliver(c, m, r, buf);
        free(m);
    } else {
        self_msg *w = calloc(1, sizeof *w);
        if (w) {
            w->tag = tag;
            w->req = r;
            w->buf = buf;
            append(&n->self_recvs, w);
        } else {
            s = dt__fail(DT_ERR_NOMEM, "out of memory");
        }
    }
    pthread_mutex_unlock(&n->self_mu);
    return s;
}

void dt__nccl_self_free(dt_comm *c)
{
    dt__nccl_comm *n = dt__nccl_of(c);
    for (self_msg *m = n->self_sends, *next; m; m = next) {
        next = m->next;
        cudaFree(m->data);
        free(m);
    }
    for (self_msg *m = n->self_recvs, *next; m; m = next) {
        next = m->next;
        free(m);
    }
    n->self_sends = n->self_recvs = NULL;
}

static dt_status post(dt_comm *c, bool is_send, void *buf, size_t count, dt_dtype t, int peer, int tag,
                      dt_request **out)
{
    const char *op = is_send ? "send" : "recv";
    if (!out)
        return dt__fail(DT_ERR_INVALID, "%s: request pointer is NULL", op);
    *out = NULL;
    DT_CHECK(check_post(c, op, buf, count, t, peer, tag));
    nccl_req *r = NULL;
    DT_CHECK(new_req(c, is_send, count, t, &r));
    dt_status s;
    if (peer == c->rank) {
        s = is_send ? self_send(c, buf, r->len, tag, r) : self_recv(c, buf, tag, r);
    } else if (!r->len) {
        s = dt__nccl_record(c, r->ev, op); /* nothing to move: NCCL's zero-byte p2p is a no-op anyway */
        r->ready = s == DT_OK;
    } else {
        dt__nccl_comm *n = dt__nccl_of(c);
        int64_t deadline = dt__deadline_after(c->timeout_s);
        ncclResult_t nr = is_send ? ncclSend(buf, r->len, ncclUint8, peer, n->comm, n->stream)
                                  : ncclRecv(buf, r->len, ncclUint8, peer, n->comm, n->stream);
        s = dt__nccl_settle(c, nr, op, deadline);
        if (s == DT_OK)
            s = dt__nccl_record(c, r->ev, op);
        r->ready = s == DT_OK;
        r->got = r->len;
    }
    if (s != DT_OK) {
        free_req(r);
        return s;
    }
    *out = &r->base;
    return DT_OK;
}

dt_status dt__nccl_isend(const void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c,
                         dt_request **req)
{
    return post(c, true, (void *)buf, count, t, peer, tag, req);
}

dt_status dt__nccl_irecv(void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c, dt_request **req)
{
    return post(c, false, buf, count, t, peer, tag, req);
}

/* One poll of r: *done when it completed (the request is then finished by
 * the caller); a failure is final. */
static dt_status poll_one(nccl_req *r, int64_t deadline, bool *done)
{
    dt_comm *c = r->base.comm;
    dt__nccl_comm *n = dt__nccl_of(c);
    const char *op = r->is_send ? "send" : "recv";
    *done = false;
    pthread_mutex_lock(&n->self_mu);
    bool ready = r->ready;
    dt_status fail = r->fail;
    pthread_mutex_unlock(&n->self_mu);
    if (fail != DT_OK) {
        *done = true;
        return dt__fail(fail, "%s", r->why);
    }
    if (!ready) { /* a self receive whose send has not come */
        if (dt__now_ns() > deadline)
            return dt__fail(DT_ERR_TIMEOUT, "recv: no message from this rank itself within %.0f s (DT_TIMEOUT)",
                            c->timeout_s);
        return DT_OK;
    }
    DT_CHECK(dt__nccl_cuda_error(cudaSetDevice(n->device), op));
    return dt__nccl_poll(c, r->ev, op, deadline, done);
}

static dt_status finish(nccl_req *r, dt_status s, size_t *received)
{
    if (received)
        *received = s == DT_OK && r->base.elem ? r->got / r->base.elem : 0;
    free_req(r);
    return s;
}

dt_status dt__nccl_wait(dt_request *req, size_t *received)
{
    nccl_req *r = (nccl_req *)req;
    int64_t deadline = dt__deadline_after(req->comm->timeout_s);
    for (int64_t spins = 0;; spins++) {
        bool done = false;
        dt_status s = poll_one(r, deadline, &done);
        if (s != DT_OK || done)
            return finish(r, s, received);
        dt__nccl_pause(spins);
    }
}

dt_status dt__nccl_test(dt_request *req, int *done, size_t *received)
{
    nccl_req *r = (nccl_req *)req;
    bool d = false;
    dt_status s = poll_one(r, INT64_MAX, &d); /* a test never times out; its caller decides */
    *done = d || s != DT_OK;
    return *done ? finish(r, s, received) : DT_OK;
}

dt_status dt__nccl_cancel(dt_request *req)
{
    nccl_req *r = (nccl_req *)req;
    if (r->is_send)
        return dt__fail(DT_ERR_INVALID, "dt_cancel: a send cannot be cancelled (wait for it)");
    dt__nccl_comm *n = dt__nccl_of(req->comm);
    pthread_mutex_lock(&n->self_mu);
    bool withdrawn = false;
    for (self_msg **p = &n->self_recvs; *p; p = &(*p)->next)
        if ((*p)->req == r) {
            self_msg *m = *p;
            *p = m->next;
            free(m);
            withdrawn = true;
            break;
        }
    pthread_mutex_unlock(&n->self_mu);
    if (withdrawn) {
        free_req(r);
        return DT_OK;
    }
    return dt__fail(DT_ERR_INVALID, "dt_cancel: DT_BACKEND=nccl cannot withdraw a receive NCCL already has "
                                    "(wait for it)");
}

dt_status dt__nccl_waitany(dt_request **reqs, int n, int *index, size_t *received)
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
            bool done = false;
            nccl_req *r = (nccl_req *)reqs[i];
            dt_status s = poll_one(r, deadline, &done);
            if (s != DT_OK || done) {
                reqs[i] = NULL;
                *index = i;
                return finish(r, s, received);
            }
        }
        dt__nccl_pause(spins);
    }
}
