/* Device buffers through host memory (stage.h).  A call's device buffers
 * are staged whole (copy in, the host collective, copy out), except the
 * large ones of broadcast, allgather and point-to-point sends, which go
 * chunk by chunk (below, "chunked staging"; a send as a chunked message,
 * p2p_chunk.h): the host collective runs, or the chunk is posted, once per
 * chunk while the device copies the next chunks in or the previous ones
 * out; a device receive copies each piece of its message as it arrives.  Reductions
 * stay whole: their host algorithms split a buffer by its length (ring
 * segments, halving-doubling halves), so per-chunk calls would add the
 * ranks' values in another order and change the bits (docs/gpu.md). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/devmem.h"
#include "base/status.h"
#include "base/clock.h"
#include "comm/backend.h"
#include "comm/p2p_chunk.h"
#include "transport/frame.h"
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

/* c's staging buffer, of at least `total` bytes, from first's allocator. */
static dt_status stage_host(dt_comm *c, const char *op, const dt__devmem *first, size_t total, char **out)
{
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
    *out = sb->p;
    return DT_OK;
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
    char *host;
    DT_CHECK(stage_host(c, op, first, total, &host));
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (!b[i].mem)
            continue;
        b[i].host = host + off;
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

/* ---- chunked staging ----
 *
 * A device buffer of at least two chunks (c->stage_chunk bytes, rounded
 * down to whole elements) moves through the host chunk by chunk, with the
 * asynchronous copies of base/devmem.h:
 *  - copy in (a broadcast's root, an allgather's send buffer): the copies of
 *    the first QAHEAD chunks start at once; before chunk i goes to the host
 *    collective, the copy of chunk i+QAHEAD starts, so the device copies the
 *    next chunks while the transport sends this one;
 *  - copy out (a broadcast's other ranks, an allgather's receive buffer):
 *    the copy of chunk i to the device starts as soon as its host
 *    collective returns, and runs while the transport receives chunk i+1.
 * Each chunk has its own region of the staging buffer (the same size as
 * whole staging), so no copy waits for a region to be free.  The host
 * collective's calls are the same on every rank (their counts come from the
 * byte count and DT_STAGE_CHUNK), and a copy is not a reduction, so the
 * bits are the whole call's.  A rank whose buffer is host memory while
 * another's is device memory makes one call where the other makes several:
 * the mismatch check reports it (the counts differ). */

#define QAHEAD 4   /* copies in started ahead of the chunk being sent */
#define QCAP 64    /* tickets in flight; the oldest is waited for beyond */

/* Copies in flight, oldest first, each with the chunk it belongs to. */
typedef struct {
    const dt__devmem *mem;
    void *t[QCAP];
    size_t id[QCAP];
    int head, n;
    dt_status s; /* the first failure */
} tickets;

static void tk_wait_oldest(tickets *q)
{
    dt_status s = dt__devmem_copy_wait(q->mem, q->t[q->head]);
    q->head = (q->head + 1) % QCAP;
    q->n--;
    if (q->s == DT_OK)
        q->s = s;
}

/* Start a copy for chunk `id` (to_host: device src -> host dst). */
static void tk_begin(tickets *q, size_t id, bool to_host, void *dst, const void *src, size_t bytes)
{
    if (q->s != DT_OK)
        return;
    if (q->n == QCAP)
        tk_wait_oldest(q);
    void *t = NULL;
    dt_status s = dt__devmem_copy_begin(q->mem, to_host, dst, src, bytes, &t);
    if (s != DT_OK && q->s == DT_OK)
        q->s = s;
    if (t) {
        int k = (q->head + q->n) % QCAP;
        q->t[k] = t;
        q->id[k] = id;
        q->n++;
    }
}

/* Wait for the copies of every chunk up to `id`; the first failure. */
static dt_status tk_wait_upto(tickets *q, size_t id)
{
    while (q->n && q->id[q->head] <= id)
        tk_wait_oldest(q);
    return q->s;
}

static dt_status tk_drain(tickets *q)
{
    while (q->n)
        tk_wait_oldest(q);
    return q->s;
}

size_t dt__stage_chunk_elems(size_t chunk_bytes, size_t elem) { return chunk_bytes >= elem ? chunk_bytes / elem : 1; }

size_t dt__stage_nchunks(size_t count, size_t chunk_elems)
{
    if (chunk_elems == 0 || count / chunk_elems < 2)
        return 0; /* whole: fewer than two chunks */
    return count / chunk_elems + (count % chunk_elems != 0);
}

/* The chunks of `count` elements of c's staging, or 0: staged whole. */
static size_t chunks_of(const dt_comm *c, size_t count, dt_dtype t, size_t *per)
{
    size_t es = dt_dtype_size(t);
    if (es == 0 || c->backend->device_buffers != DT__DEVBUF_STAGE)
        return 0;
    *per = dt__stage_chunk_elems(c->stage_chunk, es);
    return dt__stage_nchunks(count, *per);
}

/* Broadcast of a device buffer in n chunks of `per` elements. */
static dt_status chunked_broadcast(void *buf, size_t count, dt_dtype t, int root, dt_comm *c,
                                   const dt__devmem *mem, size_t n, size_t per)
{
    size_t es = dt_dtype_size(t), cb = per * es;
    char *host;
    DT_CHECK(stage_host(c, "broadcast", mem, count * es, &host));
    tickets q = {.mem = mem};
    dt_status s = DT_OK;
    size_t len = count * es;
#define CHUNK_LEN(i) ((i) + 1 < n ? cb : len - (i) * cb)
    if (c->rank == root) {
        for (size_t i = 0; i < n && i < QAHEAD; i++)
            tk_begin(&q, i, true, host + i * cb, (const char *)buf + i * cb, CHUNK_LEN(i));
        for (size_t i = 0; i < n && s == DT_OK; i++) {
            s = tk_wait_upto(&q, i);
            if (s != DT_OK) { /* this rank leaves the collective: its peers meet their deadline */
                s = dt__wrap(s, "broadcast: copying the buffer from %s: ", mem->name);
                break;
            }
            if (i + QAHEAD < n)
                tk_begin(&q, i + QAHEAD, true, host + (i + QAHEAD) * cb, (const char *)buf + (i + QAHEAD) * cb,
                         CHUNK_LEN(i + QAHEAD));
            s = c->backend->broadcast(host + i * cb, CHUNK_LEN(i) / es, t, root, c);
        }
        dt_status d = tk_drain(&q);
        return s != DT_OK ? s : d;
    }
    for (size_t i = 0; i < n && s == DT_OK; i++) {
        s = c->backend->broadcast(host + i * cb, CHUNK_LEN(i) / es, t, root, c);
        if (s == DT_OK)
            tk_begin(&q, i, false, (char *)buf + i * cb, host + i * cb, CHUNK_LEN(i));
    }
    dt_status d = tk_drain(&q);
    if (s == DT_OK && d != DT_OK)
        s = dt__wrap(d, "broadcast: copying the buffer back to %s: ", mem->name);
    return s;
#undef CHUNK_LEN
}

/* Allgather of a device send buffer into a device receive buffer (the same
 * device, not overlapping), in n chunks of `per` elements of each rank's
 * part: chunk j's host collective gathers [rank][chunk j] into its region
 * of the staging buffer, and each rank's piece is copied to its place. */
static dt_status chunked_allgather(const void *send, void *recv, size_t sendcount, dt_dtype t, dt_comm *c,
                                   const dt__devmem *mem, size_t n, size_t per)
{
    size_t es = dt_dtype_size(t), cb = per * es, len = sendcount * es, p = (size_t)c->size;
    size_t hs_bytes = (len + 63) & ~(size_t)63;
    char *host;
    DT_CHECK(stage_host(c, "allgather", mem, hs_bytes + len * p, &host));
    char *hs = host, *hr = host + hs_bytes;
    tickets in = {.mem = mem}, out = {.mem = mem};
    dt_status s = DT_OK;
#define CHUNK_LEN(i) ((i) + 1 < n ? cb : len - (i) * cb)
    for (size_t i = 0; i < n && i < QAHEAD; i++)
        tk_begin(&in, i, true, hs + i * cb, (const char *)send + i * cb, CHUNK_LEN(i));
    for (size_t i = 0; i < n && s == DT_OK; i++) {
        size_t l = CHUNK_LEN(i), o = i * cb;
        s = tk_wait_upto(&in, i);
        if (s != DT_OK) {
            s = dt__wrap(s, "allgather: copying the send buffer from %s: ", mem->name);
            break;
        }
        if (i + QAHEAD < n)
            tk_begin(&in, i + QAHEAD, true, hs + (i + QAHEAD) * cb, (const char *)send + (i + QAHEAD) * cb,
                     CHUNK_LEN(i + QAHEAD));
        s = c->backend->allgather(hs + o, hr + p * o, l / es, t, c);
        for (size_t r = 0; r < p && s == DT_OK; r++)
            tk_begin(&out, i, false, (char *)recv + r * len + o, hr + p * o + r * l, l);
    }
    dt_status d = tk_drain(&in);
    dt_status e = tk_drain(&out);
    if (s == DT_OK && d != DT_OK)
        s = dt__wrap(d, "allgather: copying the send buffer from %s: ", mem->name);
    if (s == DT_OK && e != DT_OK)
        s = dt__wrap(e, "allgather: copying the receive buffer back to %s: ", mem->name);
    return s;
#undef CHUNK_LEN
}

static bool disjoint(const void *a, size_t na, const void *b, size_t nb)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x + na <= y || y + nb <= x;
}

dt_status dt__stage_broadcast(void *buf, size_t count, dt_dtype t, int root, dt_comm *c)
{
    sbuf b[1] = {{"buffer", buf, bytes_of(count, t, 1), c->rank == root, c->rank != root, NULL, NULL}};
    size_t per = 0, n = b[0].bytes == SIZE_MAX ? 0 : chunks_of(c, count, t, &per);
    const dt__devmem *mem = n ? dt__devmem_of(buf) : NULL;
    if (mem)
        return chunked_broadcast(buf, count, t, root, c, mem, n, per);
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
    size_t per = 0, n = b[1].bytes == SIZE_MAX ? 0 : chunks_of(c, sendcount, t, &per);
    const dt__devmem *mem = n ? dt__devmem_of(send) : NULL;
    if (mem && dt__devmem_of(recv) == mem && disjoint(send, b[0].bytes, recv, b[1].bytes))
        return chunked_allgather(send, recv, sendcount, t, c, mem, n, per);
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

/* A send of a device buffer of at least two chunks, as a chunked message
 * (p2p_chunk.h): chunk j goes to the transport as soon as the device has
 * copied it, while the device copies the next ones; the call returns with
 * every chunk posted, as a whole send returns with its message posted. */
static dt_status chunked_isend(const void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c,
                               const dt__devmem *mem, size_t per, dt_request **req)
{
    size_t es = dt_dtype_size(t), cb = per * es, len = count * es, frames = len / cb;
    struct dt__p2pstage *st = p2p_new(mem, len, NULL, es);
    if (!st)
        return dt__fail(DT_ERR_NOMEM, "send: cannot allocate %zu bytes of host memory to stage a %s buffer", len,
                        mem->name);
    char *host = st->host;
    const char *dev = buf;
#define PIECE(j) ((j) * cb < len ? (len - (j) * cb < cb ? len - (j) * cb : cb) : 0)
    tickets q = {.mem = mem};
    for (size_t j = 0; j <= frames && j < QAHEAD; j++)
        tk_begin(&q, j, true, host + j * cb, dev + j * cb, PIECE(j));
    dt_status s = DT_OK;
    for (size_t j = 0; j <= frames && s == DT_OK; j++) {
        s = tk_wait_upto(&q, j);
        if (s != DT_OK) {
            s = dt__wrap(s, "send: copying the buffer from %s: ", mem->name);
            break;
        }
        if (j + QAHEAD <= frames)
            tk_begin(&q, j + QAHEAD, true, host + (j + QAHEAD) * cb, dev + (j + QAHEAD) * cb, PIECE(j + QAHEAD));
        s = j == 0 ? dt__p2p_isend_chunked(host, len, cb, t, peer, tag, c, req)
                   : dt__p2p_send_more(*req, j, host + j * cb);
    }
#undef PIECE
    dt_status d = tk_drain(&q);
    if (s == DT_OK && d != DT_OK)
        s = dt__wrap(d, "send: copying the buffer from %s: ", mem->name);
    if (s != DT_OK) {
        if (*req) /* the chunks posted read st's memory: let them go (the receiver meets its deadline) */
            (void)c->backend->wait(*req, NULL);
        *req = NULL;
        p2p_free(st);
        return s;
    }
    (*req)->stage = st;
    return DT_OK;
}

dt_status dt__stage_isend(const void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c,
                          dt_request **req)
{
    size_t bytes = bytes_of(count, t, 1);
    const dt__devmem *mem;
    DT_CHECK(p2p_kind(c, "send", buf, bytes, &mem));
    if (!mem)
        return c->backend->isend(buf, count, t, peer, tag, c, req);
    size_t per = 0, n = bytes <= DT_FRAME_MAX_PAYLOAD && peer >= 0 && peer < c->size && tag >= 0 && tag <= DT_TAG_MAX
                            ? chunks_of(c, count, t, &per)
                            : 0;
    if (n)
        return chunked_isend(buf, count, t, peer, tag, c, mem, per, req);
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

/* A receive into a device buffer: each piece of the message (p2p_chunk.h;
 * one for a plain message) is copied to the device as it arrives, while the
 * transport receives the next. */
static dt_status recv_pieces(dt_request *r, struct dt__p2pstage *st, size_t *received)
{
    int64_t deadline = dt__deadline_after(r->comm->timeout_s);
    tickets q = {.mem = st->mem};
    dt_status s = DT_OK;
    bool more = true;
    size_t taken = dt__p2p_recv_taken(r); /* pieces a dt_test took already */
    tk_begin(&q, 0, false, st->dev, st->host, taken);
    for (size_t id = 1; more; id++) {
        bool got;
        size_t off, len;
        s = dt__p2p_recv_next(r, true, deadline, &got, &off, &len, &more);
        if (s != DT_OK || !got || r->req.status != DT_OK)
            break; /* the end of r reports it */
        tk_begin(&q, id, false, (char *)st->dev + off, (char *)st->host + off, len);
    }
    dt_status d = tk_drain(&q);
    size_t got = 0;
    dt_status w = r->comm->backend->wait(r, &got); /* the message is complete: the count, and frees r */
    p2p_free(st);
    if (s == DT_OK)
        s = w;
    if (s == DT_OK && d != DT_OK)
        s = dt__wrap(d, "recv: copying the message to %s: ", q.mem->name);
    if (received && s == DT_OK)
        *received = got;
    return s;
}

dt_status dt__stage_wait(dt_request *r, size_t *received)
{
    struct dt__p2pstage *st = r->stage;
    if (st->dev && r->comm->backend->device_buffers == DT__DEVBUF_STAGE)
        return recv_pieces(r, st, received);
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
