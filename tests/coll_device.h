/* coll_check --device emu|cuda: every buffer handed to a collective or a
 * point-to-point call is a device copy of the test's host buffer, made just
 * before the call and copied back after it (for nonblocking calls, at their
 * completion).  Included by coll_check.c after dtrain.h; the macros at the
 * end route the file's calls through the wrappers, so every check of the
 * host run runs unchanged on device buffers and must give the same bits.
 * Calls the library must refuse (NULL buffers, counts past the limits) go
 * through as they are. */
#ifndef COLL_DEVICE_H
#define COLL_DEVICE_H

#include "tensor/backend.h"

static const dt_device *dv; /* NULL: host buffers (no --device) */
#define DV_MAX ((size_t)1 << 30)

static size_t dv_bytes(size_t count, dt_dtype t, size_t mult)
{
    size_t es = dt_dtype_size(t);
    if (es == 0 || count > DV_MAX / es / (mult ? mult : 1))
        return SIZE_MAX;
    return count * es * mult;
}

static void *dv_up(const void *h, size_t bytes)
{
    void *d = dv->alloc(bytes ? bytes : 1);
    if (!d || (bytes && dt_device_upload(dv, d, h, bytes) != DT_OK)) {
        fprintf(stderr, "coll_check --device: cannot stage %zu bytes: %s\n", bytes, dt_last_error());
        exit(3);
    }
    return d;
}

static void dv_down(void *h, const void *d, size_t bytes)
{
    if (bytes && dt_device_download(dv, h, d, bytes) != DT_OK) {
        fprintf(stderr, "coll_check --device: cannot copy back %zu bytes: %s\n", bytes, dt_last_error());
        exit(3);
    }
}

/* Device copies of send (sb bytes) and recv (rb bytes), one when in place;
 * false: the call goes through as it came. */
typedef struct {
    void *ds, *dr;
    size_t rb;
} dvpair;

static bool dv_pair(const void *s, size_t sb, void *r, size_t rb, dvpair *p)
{
    if (!dv || !s || !r || sb > DV_MAX || rb > DV_MAX || (sb == 0 && rb == 0))
        return false;
    if (s == r) {
        p->rb = sb > rb ? sb : rb;
        p->ds = p->dr = dv_up(r, p->rb);
    } else {
        p->rb = rb;
        p->ds = dv_up(s, sb);
        p->dr = dv_up(r, rb);
    }
    return true;
}

static void dv_pair_done(dvpair *p, void *r, dt_status s)
{
    if (s == DT_OK)
        dv_down(r, p->dr, p->rb);
    if (p->ds != p->dr)
        dv->free(p->ds);
    dv->free(p->dr);
}

#define DV_CALL2(s, sb, r, rb, real_call, dev_call) \
    do { \
        dvpair p_; \
        if (!dv_pair(s, sb, r, rb, &p_)) \
            return real_call; \
        void *ds = p_.ds, *dr = p_.dr; \
        (void)ds, (void)dr; \
        dt_status st_ = dev_call; \
        dv_pair_done(&p_, r, st_); \
        return st_; \
    } while (0)

static dt_status dv_broadcast(void *b, size_t n, dt_dtype t, int root, dt_comm *c)
{
    size_t nb = dv_bytes(n, t, 1);
    DV_CALL2(b, nb, b, nb, dt_broadcast(b, n, t, root, c), dt_broadcast(dr, n, t, root, c));
}
static dt_status dv_reduce(const void *s, void *r, size_t n, dt_dtype t, dt_redop op, int root, dt_comm *c)
{
    size_t nb = dv_bytes(n, t, 1);
    DV_CALL2(s, nb, r, nb, dt_reduce(s, r, n, t, op, root, c), dt_reduce(ds, dr, n, t, op, root, c));
}
static dt_status dv_allreduce(const void *s, void *r, size_t n, dt_dtype t, dt_redop op, dt_comm *c)
{
    size_t nb = dv_bytes(n, t, 1);
    DV_CALL2(s, nb, r, nb, dt_allreduce(s, r, n, t, op, c), dt_allreduce(ds, dr, n, t, op, c));
}
static dt_status dv_allreduce_half(const float *s, float *r, size_t n, dt_dtype w, dt_redop op, dt_comm *c)
{
    size_t nb = dv_bytes(n, DT_F32, 1);
    DV_CALL2(s, nb, r, nb, dt_allreduce_half(s, r, n, w, op, c), dt_allreduce_half(ds, dr, n, w, op, c));
}
static dt_status dv_reduce_scatter(const void *s, void *r, size_t n, dt_dtype t, dt_redop op, dt_comm *c)
{
    size_t all = dv_bytes(n, t, (size_t)dt_comm_size(c)), nb = dv_bytes(n, t, 1);
    DV_CALL2(s, all, r, nb, dt_reduce_scatter(s, r, n, t, op, c), dt_reduce_scatter(ds, dr, n, t, op, c));
}
static dt_status dv_allgather(const void *s, void *r, size_t n, dt_dtype t, dt_comm *c)
{
    size_t all = dv_bytes(n, t, (size_t)dt_comm_size(c)), nb = dv_bytes(n, t, 1);
    DV_CALL2(s, nb, r, all, dt_allgather(s, r, n, t, c), dt_allgather(ds, dr, n, t, c));
}
static dt_status dv_gather(const void *s, void *r, size_t n, dt_dtype t, int root, dt_comm *c)
{
    size_t all = dv_bytes(n, t, (size_t)dt_comm_size(c)), nb = dv_bytes(n, t, 1);
    DV_CALL2(s, nb, r, all, dt_gather(s, r, n, t, root, c), dt_gather(ds, dr, n, t, root, c));
}
static dt_status dv_scatter(const void *s, void *r, size_t n, dt_dtype t, int root, dt_comm *c)
{
    size_t all = dv_bytes(n, t, (size_t)dt_comm_size(c)), nb = dv_bytes(n, t, 1);
    DV_CALL2(s, all, r, nb, dt_scatter(s, r, n, t, root, c), dt_scatter(ds, dr, n, t, root, c));
}
static dt_status dv_alltoall(const void *s, void *r, size_t n, dt_dtype t, dt_comm *c)
{
    size_t all = dv_bytes(n, t, (size_t)dt_comm_size(c));
    DV_CALL2(s, all, r, all, dt_alltoall(s, r, n, t, c), dt_alltoall(ds, dr, n, t, c));
}
static dt_status dv_send(const void *b, size_t n, dt_dtype t, int peer, int tag, dt_comm *c)
{
    size_t nb = dv_bytes(n, t, 1);
    DV_CALL2(b, nb, (void *)b, nb, dt_send(b, n, t, peer, tag, c), dt_send(ds, n, t, peer, tag, c));
}
static dt_status dv_recv(void *b, size_t n, dt_dtype t, int peer, int tag, dt_comm *c, size_t *got)
{
    size_t nb = dv_bytes(n, t, 1);
    DV_CALL2(b, nb, b, nb, dt_recv(b, n, t, peer, tag, c, got), dt_recv(dr, n, t, peer, tag, c, got));
}

/* Nonblocking calls: the device copies live until the request completes. */
typedef struct {
    dt_request *r;
    dvpair p;
    void *h;
} dvpend;
static dvpend dv_pend[256];

static void dv_track(dt_request *r, const dvpair *p, void *h)
{
    for (int i = 0; i < 256; i++)
        if (!dv_pend[i].r) {
            dv_pend[i] = (dvpend){r, *p, h};
            return;
        }
    fprintf(stderr, "coll_check --device: more than 256 requests in flight\n");
    exit(3);
}

static void dv_finish(dt_request *r, dt_status s)
{
    for (int i = 0; r && i < 256; i++)
        if (dv_pend[i].r == r) {
            dv_pair_done(&dv_pend[i].p, dv_pend[i].h, s);
            dv_pend[i].r = NULL;
            return;
        }
}

#define DV_START(s, sb, r, rb, real_call, dev_call) \
    do { \
        dvpair p_; \
        if (!dv_pair(s, sb, r, rb, &p_)) \
            return real_call; \
        void *ds = p_.ds, *dr = p_.dr; \
        (void)ds, (void)dr; \
        dt_status st_ = dev_call; \
        if (st_ == DT_OK) \
            dv_track(*req, &p_, r); \
        else \
            dv_pair_done(&p_, r, st_); \
        return st_; \
    } while (0)

static dt_status dv_isend(const void *b, size_t n, dt_dtype t, int peer, int tag, dt_comm *c, dt_request **req)
{
    size_t nb = dv_bytes(n, t, 1);
    DV_START(b, nb, (void *)b, nb, dt_isend(b, n, t, peer, tag, c, req), dt_isend(ds, n, t, peer, tag, c, req));
}
static dt_status dv_irecv(void *b, size_t n, dt_dtype t, int peer, int tag, dt_comm *c, dt_request **req)
{
    size_t nb = dv_bytes(n, t, 1);
    DV_START(b, nb, b, nb, dt_irecv(b, n, t, peer, tag, c, req), dt_irecv(dr, n, t, peer, tag, c, req));
}
static dt_status dv_iallreduce(const void *s, void *r, size_t n, dt_dtype t, dt_redop op, dt_comm *c,
                               dt_request **req)
{
    size_t nb = dv_bytes(n, t, 1);
    DV_START(s, nb, r, nb, dt_iallreduce(s, r, n, t, op, c, req), dt_iallreduce(ds, dr, n, t, op, c, req));
}
static dt_status dv_iallreduce_half(const float *s, float *r, size_t n, dt_dtype w, dt_redop op, dt_comm *c,
                                    dt_request **req)
{
    size_t nb = dv_bytes(n, DT_F32, 1);
    DV_START(s, nb, r, nb, dt_iallreduce_half(s, r, n, w, op, c, req),
             dt_iallreduce_half(ds, dr, n, w, op, c, req));
}
static dt_status dv_ibroadcast(void *b, size_t n, dt_dtype t, int root, dt_comm *c, dt_request **req)
{
    size_t nb = dv_bytes(n, t, 1);
    DV_START(b, nb, b, nb, dt_ibroadcast(b, n, t, root, c, req), dt_ibroadcast(dr, n, t, root, c, req));
}
static dt_status dv_iallgather(const void *s, void *r, size_t n, dt_dtype t, dt_comm *c, dt_request **req)
{
    size_t all = dv_bytes(n, t, (size_t)dt_comm_size(c)), nb = dv_bytes(n, t, 1);
    DV_START(s, nb, r, all, dt_iallgather(s, r, n, t, c, req), dt_iallgather(ds, dr, n, t, c, req));
}
static dt_status dv_ireduce_scatter(const void *s, void *r, size_t n, dt_dtype t, dt_redop op, dt_comm *c,
                                    dt_request **req)
{
    size_t all = dv_bytes(n, t, (size_t)dt_comm_size(c)), nb = dv_bytes(n, t, 1);
    DV_START(s, all, r, nb, dt_ireduce_scatter(s, r, n, t, op, c, req),
             dt_ireduce_scatter(ds, dr, n, t, op, c, req));
}
static dt_status dv_wait(dt_request *r, size_t *got)
{
    dt_status s = dt_wait(r, got);
    dv_finish(r, s);
    return s;
}
static dt_status dv_test(dt_request *r, int *done, size_t *got)
{
    dt_status s = dt_test(r, done, got);
    if (done && *done)
        dv_finish(r, s);
    return s;
}
static dt_status dv_waitany(dt_request **reqs, int n, int *index, size_t *got)
{
    dt_request *saved[1024] = {0};
    for (int i = 0; reqs && i < n && i < 1024; i++)
        saved[i] = reqs[i];
    if (index)
        *index = -1; /* a refusal leaves it: nothing completed */
    dt_status s = dt_waitany(reqs, n, index, got);
    if (index && *index >= 0 && *index < 1024)
        dv_finish(saved[*index], s);
    return s;
}
static dt_status dv_cancel(dt_request *r)
{
    dt_status s = dt_cancel(r);
    if (s == DT_OK)
        dv_finish(r, DT_ERR_INVALID); /* nothing arrived: nothing to copy back */
    return s;
}

#define dt_broadcast dv_broadcast
#define dt_reduce dv_reduce
#define dt_allreduce dv_allreduce
#define dt_allreduce_half dv_allreduce_half
#define dt_reduce_scatter dv_reduce_scatter
#define dt_allgather dv_allgather
#define dt_gather dv_gather
#define dt_scatter dv_scatter
#define dt_alltoall dv_alltoall
#define dt_send dv_send
#define dt_recv dv_recv
#define dt_isend dv_isend
#define dt_irecv dv_irecv
#define dt_iallreduce dv_iallreduce
#define dt_iallreduce_half dv_iallreduce_half
#define dt_ibroadcast dv_ibroadcast
#define dt_iallgather dv_iallgather
#define dt_ireduce_scatter dv_ireduce_scatter
#define dt_wait dv_wait
#define dt_test dv_test
#define dt_waitany dv_waitany
#define dt_cancel dv_cancel

#endif
