/* Device buffers through host memory (stage.h).  The first version: the
 * whole of each device buffer is staged at once (copy in, the host
 * collective, copy out); the chunked pipeline that overlaps the copy of
 * chunk i+1 with the send of chunk i is not built yet (docs/gpu.md). */
#include <stdint.h>
#include <stdlib.h>

#include "base/devmem.h"
#include "base/status.h"
#include "comm/backend.h"
#include "comm/stage.h"

/* Byte counts past this are refused by the backend (comm.h: 2^56); they are
 * passed to it unstaged, and it refuses them before touching any buffer. */
#define MAX_BYTES ((size_t)1 << 56)

struct dt__stagebuf {
    void *p;
    size_t size;
    const dt__devmem *mem; /* whose allocator made p */
};

struct dt__p2pstage {
    const dt__devmem *mem;
    void *host;
    void *dev; /* a receive's destination; NULL for a send */
    size_t elem;
};

/* One buffer of a call. */
typedef struct {
    const char *name;  /* "send buffer", ... : names it in a refusal */
    const void *user;  /* the caller's pointer */
    size_t bytes;      /* significant bytes on this rank (0: unused here) */
    bool in, out;      /* read by the collective / written by it */
    const dt__devmem *mem;
    void *host;        /* what the backend gets */
} sbuf;

/* count * elem * mult bytes, or SIZE_MAX past MAX_BYTES (or an unknown dtype). */
static size_t bytes_of(size_t count, dt_dtype t, size_t mult)
{
    size_t es = dt_dtype_size(t);
    if (es == 0 || mult == 0)
        return SIZE_MAX;
    if (count > MAX_BYTES / es / mult)
        return SIZE_MAX;
    return count * es * mult;
}

static dt_status refuse(dt_comm *c, const char *op, const char *what, const void *p, const dt__devmem *mem)
{
    return dt__fail(DT_ERR_INVALID,
                    "%s: the %s (%p) is %s device memory, which the %s backend cannot take (DT_BACKEND=native "
                    "stages device buffers through host memory)",
                    op, what, p, mem->name, c->backend->name);
}

/* Classify b[0..n): *staged = false when the backend gets the call as it
 * came (no device buffer here, a byte count it refuses, or PASS); else
 * host copies are set up and filled. */
static dt_status stage_in(dt_comm *c, const char *op, sbuf *b, int n, bool *staged)
{
    *staged = false;
    const dt__devmem *first = NULL;
    for (int i = 0; i < n; i++) {
        b[i].host = (void *)b[i].user;
        if (b[i].bytes == SIZE_MAX)
            return DT_OK; /* the backend refuses the count */
        b[i].mem = b[i].bytes ? dt__devmem_of(b[i].user) : NULL;
        if (b[i].mem && !first)
            first = b[i].mem;
    }
    if (!first || c->backend->device_buffers == DT__DEVBUF_PASS)
        return DT_OK;
    if (c->backend->device_buffers == DT__DEVBUF_REFUSE)
        for (int i = 0; i < n; i++)
            if (b[i].mem)
                return refuse(c, op, b[i].name, b[i].user, b[i].mem);
    /* In place (the same pointer twice): one host copy, as large as the
     * larger use, read and written as either is, so that the backend sees
     * the same pointer twice too. */
    if (n == 2 && b[0].user == b[1].user) {
        b[0].bytes = b[0].bytes > b[1].bytes ? b[0].bytes : b[1].bytes;
        b[0].in |= b[1].in;
        b[0].out |= b[1].out;
        b[0].mem = b[0].mem ? b[0].mem : b[1].mem;
        b[1].bytes = 0;
        b[1].mem = NULL;
    }
    size_t total = 0;
    for (int i = 0; i < n; i++)
        if (b[i].mem)
            total += (b[i].bytes + 63) & ~(size_t)63;
    /* The buffer is the communicator's: a nonblocking collective running on
     * its progress thread may hold it, so wait for those first. */
    dt__progress_drain(c);
    struct dt__stagebuf *sb = c->stage;
    if (!sb) {
        sb = calloc(1, sizeof *sb);
        if (!sb)
            return dt__fail(DT_ERR_NOMEM, "%s: out of memory for the staging buffer", op);
        c->stage = sb;
    }
    if (sb->size < total) {
        dt__devmem_host_free(sb->mem, sb->p);
        sb->p = dt__devmem_host_alloc(first, total);
        sb->mem = first;
        sb->size = sb->p ? total : 0;
        if (!sb->p)
            return dt__fail(DT_ERR_NOMEM, "%s: cannot allocate %zu bytes of host memory to stage %s buffers", op,
                            total, first->name);
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (!b[i].mem)
            continue;
        b[i].host = (char *)sb->p + off;
        off += (b[i].bytes + 63) & ~(size_t)63;
        dt_status s = b[i].in ? b[i].mem->to_host(b[i].host, b[i].user, b[i].bytes) : DT_OK;
        if (s != DT_OK) /* this rank leaves the collective: its peers meet their deadline */
            return dt__wrap(s, "%s: copying the %s from %s: ", op, b[i].name, b[i].mem->name);
    }
    if (n == 2 && b[0].user == b[1].user)
        b[1].host = b[0].host;
    *staged = true;
    return DT_OK;
}

/* After the host collective: its results back to the device buffers. */
static dt_status stage_out(const char *op, sbuf *b, int n, dt_status s)
{
    if (s != DT_OK)
        return s;
    for (int i = 0; i < n; i++) {
        s = b[i].mem && b[i].out ? b[i].mem->to_device((void *)b[i].user, b[i].host, b[i].bytes) : DT_OK;
        if (s != DT_OK)
            return dt__wrap(s, "%s: copying the %s back to %s: ", op, b[i].name, b[i].mem->name);
    }
    return DT_OK;
}

#define STAGED(op, b, n, call_user, call_host) \
    do { \
        bool staged_; \
        DT_CHECK(stage_in(c, op, b, n, &staged_)); \
        if (!staged_) \
            return (call_user); \
        return stage_out(op, b, n, (call_host)); \
    } while (0)

dt_status dt__stage_broadcast(void *buf, size_t count, dt_dtype t, int root, dt_comm *c)
{
    sbuf b[1] = {{"buffer", buf, bytes_of(count, t, 1), c->rank == root, c->rank != root, NULL, NULL}};
    STAGED("broadcast", b, 1, c->backend->broadcast(buf, count, t, root, c),
           c->backend->broadcast(b[0].host, count, t, root, c));
}

dt_status dt__stage_reduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, int root,
                           dt_comm *c)
{
    size_t n = bytes_of(count, t, 1);
    sbuf b[2] = {{"send buffer", send, n, true, false, NULL, NULL},
                 {"receive buffer", recv, c->rank == root ? n : 0, false, true, NULL, NULL}};
    STAGED("reduce", b, 2, c->backend->reduce(send, recv, count, t, op, root, c),
           c->backend->reduce(b[0].host, b[1].host, count, t, op, root, c));
}

dt_status dt__stage_allreduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, dt_comm *c)
{
    size_t n = bytes_of(count, t, 1);
    sbuf b[2] = {{"send buffer", send, n, true, false, NULL, NULL},
                 {"receive buffer", recv, n, false, true, NULL, NULL}};
    STAGED("allreduce", b, 2, c->backend->allreduce(send, recv, count, t, op, c),
           c->backend->allreduce(b[0].host, b[1].host, count, t, op, c));
}

dt_status dt__stage_reduce_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, dt_redop op,
                                   dt_comm *c)
{
    sbuf b[2] = {{"send buffer", send, bytes_of(recvcount, t, (size_t)c->size), true, false, NULL, NULL},
                 {"receive buffer", recv, bytes_of(recvcount, t, 1), false, true, NULL, NULL}};
    STAGED("reduce_scatter", b, 2, c->backend->reduce_scatter(send, recv, recvcount, t, op, c),
           c->backend->reduce_scatter(b[0].host, b[1].host, recvcount, t, op, c));
}

dt_status dt__stage_allgather(const void *send, void *recv, size_t sendcount, dt_dtype t, dt_comm *c)
{
    sbuf b[2] = {{"send buffer", send, bytes_of(sendcount, t, 1), true, false, NULL, NULL},
                 {"receive buffer", recv, bytes_of(sendcount, t, (size_t)c->size), false, true, NULL, NULL}};
    STAGED("allgather", b, 2, c->backend->allgather(send, recv, sendcount, t, c),
           c->backend->allgather(b[0].host, b[1].host, sendcount, t, c));
}

dt_status dt__stage_gather(const void *send, void *recv, size_t sendcount, dt_dtype t, int root, dt_comm *c)
{
    size_t all = c->rank == root ? bytes_of(sendcount, t, (size_t)c->size) : 0;
    sbuf b[2] = {{"send buffer", send, bytes_of(sendcount, t, 1), true, false, NULL, NULL},
                 {"receive buffer", recv, all, false, true, NULL, NULL}};
    STAGED("gather", b, 2, c->backend->gather(send, recv, sendcount, t, root, c),
           c->backend->gather(b[0].host, b[1].host, sendcount, t, root, c));
}

dt_status dt__stage_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, int root, dt_comm *c)
{
    size_t all = c->rank == root ? bytes_of(recvcount, t, (size_t)c->size) : 0;
    sbuf b[2] = {{"send buffer", send, all, true, false, NULL, NULL},
                 {"receive buffer", recv, bytes_of(recvcount, t, 1), false, true, NULL, NULL}};
    STAGED("scatter", b, 2, c->backend->scatter(send, recv, recvcount, t, root, c),
           c->backend->scatter(b[0].host, b[1].host, recvcount, t, root, c));
}

dt_status dt__stage_alltoall(const void *send, void *recv, size_t count, dt_dtype t, dt_comm *c)
{
    size_t all = bytes_of(count, t, (size_t)c->size);
    sbuf b[2] = {{"send buffer", send, all, true, false, NULL, NULL},
                 {"receive buffer", recv, all, false, true, NULL, NULL}};
    STAGED("alltoall", b, 2, c->backend->alltoall(send, recv, count, t, c),
           c->backend->alltoall(b[0].host, b[1].host, count, t, c));
}

dt_status dt__stage_allreduce_half(const float *send, float *recv, size_t count, dt_dtype wire, dt_redop op,
                                   dt_comm *c)
{
    size_t n = bytes_of(count, DT_F32, 1);
    sbuf b[2] = {{"send buffer", send, n, true, false, NULL, NULL},
                 {"receive buffer", recv, n, false, true, NULL, NULL}};
    STAGED("allreduce_half", b, 2, c->backend->allreduce_half(send, recv, count, wire, op, c),
           c->backend->allreduce_half(b[0].host, b[1].host, count, wire, op, c));
}

/* ---- point to point: a host copy per request ---- */

/* The device owning buf's bytes, checked against c's backend: *mem NULL
 * when the backend gets the call as it came. */
static dt_status p2p_kind(dt_comm *c, const char *op, const void *buf, size_t bytes, const dt__devmem **mem)
{
    *mem = NULL;
    if (bytes == 0 || bytes == SIZE_MAX)
        return DT_OK;
    const dt__devmem *m = dt__devmem_of(buf);
    if (!m || c->backend->device_buffers == DT__DEVBUF_PASS)
        return DT_OK;
    if (c->backend->device_buffers == DT__DEVBUF_REFUSE)
        return refuse(c, op, "buffer", buf, m);
    *mem = m;
    return DT_OK;
}

static struct dt__p2pstage *p2p_new(const dt__devmem *mem, size_t bytes, void *dev, size_t elem)
{
    struct dt__p2pstage *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->host = dt__devmem_host_alloc(mem, bytes);
    if (!st->host) {
        free(st);
        return NULL;
    }
    st->mem = mem;
    st->dev = dev;
    st->elem = elem;
    return st;
}

static void p2p_free(struct dt__p2pstage *st)
{
    dt__devmem_host_free(st->mem, st->host);
    free(st);
}

dt_status dt__stage_isend(const void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c,
                          dt_request **req)
{
    size_t bytes = bytes_of(count, t, 1);
    const dt__devmem *mem;
    DT_CHECK(p2p_kind(c, "send", buf, bytes, &mem));
    if (!mem)
        return c->backend->isend(buf, count, t, peer, tag, c, req);
    struct dt__p2pstage *st = p2p_new(mem, bytes, NULL, dt_dtype_size(t));
    if (!st)
        return dt__fail(DT_ERR_NOMEM, "send: cannot allocate %zu bytes of host memory to stage a %s buffer", bytes,
                        mem->name);
    dt_status s = mem->to_host(st->host, buf, bytes);
    if (s != DT_OK)
        s = dt__wrap(s, "send: copying the buffer from %s: ", mem->name);
    else
        s = c->backend->isend(st->host, count, t, peer, tag, c, req);
    if (s != DT_OK) {
        p2p_free(st);
        return s;
    }
    (*req)->stage = st;
    return DT_OK;
}

dt_status dt__stage_irecv(void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c, dt_request **req)
{
    size_t bytes = bytes_of(count, t, 1);
    const dt__devmem *mem;
    DT_CHECK(p2p_kind(c, "recv", buf, bytes, &mem));
    if (!mem)
        return c->backend->irecv(buf, count, t, peer, tag, c, req);
    struct dt__p2pstage *st = p2p_new(mem, bytes, buf, dt_dtype_size(t));
    if (!st)
        return dt__fail(DT_ERR_NOMEM, "recv: cannot allocate %zu bytes of host memory to stage a %s buffer", bytes,
                        mem->name);
    dt_status s = c->backend->irecv(st->host, count, t, peer, tag, c, req);
    if (s != DT_OK) {
        p2p_free(st);
        return s;
    }
    (*req)->stage = st;
    return DT_OK;
}

/* The request of st has completed with s (and `got` elements received). */
static dt_status p2p_done(struct dt__p2pstage *st, dt_status s, size_t got, size_t *received)
{
    if (s == DT_OK && st->dev && got) {
        s = st->mem->to_device(st->dev, st->host, got * st->elem);
        if (s != DT_OK)
            s = dt__wrap(s, "recv: copying the message to %s: ", st->mem->name);
    }
    p2p_free(st);
    if (received)
        *received = got;
    return s;
}

dt_status dt__stage_wait(dt_request *r, size_t *received)
{
    struct dt__p2pstage *st = r->stage;
    size_t got = 0;
    dt_status s = r->comm->backend->wait(r, &got); /* frees r */
    return p2p_done(st, s, got, received);
}

dt_status dt__stage_test(dt_request *r, int *done, size_t *received)
{
    struct dt__p2pstage *st = r->stage;
    size_t got = 0;
    dt_status s = r->comm->backend->test(r, done, &got);
    if (!*done)
        return s; /* r and its copy stay */
    return p2p_done(st, s, got, received);
}

dt_status dt__stage_cancel(dt_request *r)
{
    struct dt__p2pstage *st = r->stage;
    dt_status s = r->comm->backend->cancel(r);
    if (s == DT_OK)
        p2p_free(st);
    return s;
}

dt_status dt__stage_waitany(dt_request **reqs, int n, int *index, size_t *received)
{
    struct dt__p2pstage **st = calloc((size_t)n + 1, sizeof *st);
    if (!st)
        return dt__fail(DT_ERR_NOMEM, "dt_waitany: out of memory");
    const struct dt__backend *b = NULL;
    for (int i = 0; i < n; i++)
        if (reqs[i]) {
            st[i] = reqs[i]->stage;
            b = b ? b : reqs[i]->comm->backend;
        }
    size_t got = 0;
    dt_status s = b->waitany(reqs, n, index, &got);
    if (*index >= 0 && *index < n && st[*index])
        s = p2p_done(st[*index], s, got, NULL);
    if (received)
        *received = got;
    free(st);
    return s;
}

void dt__stage_free(dt_comm *c)
{
    if (!c->stage)
        return;
    dt__devmem_host_free(c->stage->mem, c->stage->p);
    free(c->stage);
    c->stage = NULL;
}
