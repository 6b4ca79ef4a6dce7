/* The IPC path of device buffers (ipc.h): the protocol, written once for
 * the four collectives, which differ only in what each rank exports and
 * what it reads. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/devmem.h"
#include "base/log.h"
#include "base/status.h"
#include "comm/backend.h"
#include "comm/coll.h"
#include "comm/colltrace.h"
#include "comm/ipc.h"
#include "comm/stage.h"

#define REC_MAGIC 0x43504964u /* "dIPC" */

/* A rank's record of round 1. */
typedef struct {
    uint32_t magic;
    int32_t state; /* 1: exported (or nothing to export); 0: this rank stages the call */
    uint64_t off;  /* the input's offset in the allocation */
    dt__ipc_handle h;
} rec_t;

/* A communicator's IPC state (c->ipc), made at its first IPC call. */
struct dt__ipcstate {
    const dt__devmem_ipc *ipc;
    void *stream;
    void *tmp;
    size_t tmp_size;
    bool told;      /* the fallback was logged once */
    bool announced; /* the path's first use was logged */
};

typedef enum { K_ALLREDUCE, K_REDUCE_SCATTER, K_ALLGATHER, K_BROADCAST } kind_t;

/* One call, as this rank sees it. */
typedef struct {
    const char *name;
    kind_t kind;
    size_t count; /* the public call's count */
    dt_dtype t;
    dt_redop op;  /* -1 when none */
    int root;     /* -1 when none */
    size_t bytes; /* one block: count (allreduce, broadcast) or one rank's share */
    const void *in; /* what this rank exports (NULL: nothing) */
    size_t in_bytes;
    void *out;    /* what this rank writes */
    bool temp;    /* out is also an input others read: through a temporary */
} call_t;

static atomic_uint_fast64_t calls;

uint64_t dt__ipc_calls(void) { return (uint64_t)atomic_load(&calls); }

/* The resolver of the call's buffers when every one is device memory of
 * one device with IPC entries that DT_DEVICE_IPC allows; else NULL. */
static const dt__devmem *ipc_device(const call_t *k, const dt__devmem_ipc **ipc, int *mode, dt_status *err)
{
    *err = DT_OK;
    if ((*err = dt__device_ipc_mode(mode)) != DT_OK || *mode == 0)
        return NULL;
    const dt__devmem *m = dt__devmem_of(k->out);
    if (!m || (k->in && dt__devmem_of(k->in) != m))
        return NULL;
    if (*mode < 0 && !strcmp(m->name, "emu")) /* emu exports only under DT_DEVICE_IPC=1 */
        return NULL;
    *ipc = dt__devmem_ipc_of(m);
    return *ipc ? m : NULL;
}

/* Whether k takes the IPC path on c (the same answer on every rank of a
 * matching call: see ipc.h). */
static bool eligible(dt_comm *c, const call_t *k, dt__coll_kind ck, size_t total, const dt__devmem_ipc **ipc,
                     int *mode, dt_status *err)
{
    *err = DT_OK;
    if (c->backend != &dt__native_backend || c->size < 2 || k->bytes == 0 || !c->arena)
        return false;
    if (!ipc_device(k, ipc, mode, err))
        return false;
    dt__alg a = dt__coll_pick(c, ck, total);
    dt__coll_last_alg = -1;
    return a == DT__ALG_SHM;
}

static dt_status state_of(dt_comm *c, const dt__devmem_ipc *ipc, struct dt__ipcstate **out)
{
    struct dt__ipcstate *st = c->ipc;
    if (st && st->ipc != ipc) { /* another device's buffers: a fresh stream */
        dt__ipc_comm_free(c, false);
        st = NULL;
    }
    if (!st) {
        st = calloc(1, sizeof *st);
        if (!st)
            return dt__fail(DT_ERR_NOMEM, "ipc: out of memory");
        st->ipc = ipc;
        dt_status s = ipc->stream_create(&st->stream);
        if (s != DT_OK) {
            free(st);
            return s;
        }
        c->ipc = st;
    }
    *out = st;
    return DT_OK;
}

void dt__ipc_comm_free(dt_comm *c, bool world)
{
    struct dt__ipcstate *st = c->ipc;
    dt__ipc_cache_release(c->id, world);
    if (!st)
        return;
    if (st->tmp)
        st->ipc->dev_free(st->tmp);
    st->ipc->stream_destroy(st->stream);
    free(st);
    c->ipc = NULL;
}

/* Every rank sends every other rank `len` bytes of mine and receives
 * theirs into all[r * len] (all[me] = mine): one round, sub-tag `round`. */
static dt_status exchange(dt__coll *k, uint32_t round, const void *mine, void *all, size_t len)
{
    dt_comm *c = k->c;
    int n = c->size, me = c->rank;
    memcpy((char *)all + (size_t)me * len, mine, len);
    dt__req *rq = malloc(2 * (size_t)n * sizeof *rq);
    if (!rq)
        return dt__fail(DT_ERR_NOMEM, "ipc: out of memory");
    size_t m = 0;
    dt_status s = DT_OK;
    for (int j = 0; s == DT_OK && j < n; j++)
        if (j != me)
            s = dt__coll_recv(k, &rq[m++], j, round, (char *)all + (size_t)j * len, len);
    for (int d = 1; s == DT_OK && d < n; d++) /* each rank starts with its next peer, not all with rank 0 */
        s = dt__coll_send(k, &rq[m++], (me + d) % n, round, mine, len);
    if (s == DT_OK)
        s = dt__coll_wait(k, rq, m);
    free(rq);
    return s;
}

/* The first rank whose byte in flags[0..n) is 0, or -1. */
static int first_no(const uint8_t *flags, int n)
{
    for (int j = 0; j < n; j++)
        if (!flags[j])
            return j;
    return -1;
}

/* Step 3: this rank's reads, queued on the stream, then waited for. */
static dt_status compute(const call_t *k, struct dt__ipcstate *st, dt_comm *c, void *const *ptr, void *dst)
{
    const dt__devmem_ipc *ipc = st->ipc;
    int n = c->size, me = c->rank;
    dt_status s = DT_OK;
    switch (k->kind) {
    case K_ALLREDUCE:
    case K_REDUCE_SCATTER: {
        size_t at = k->kind == K_REDUCE_SCATTER ? (size_t)me * k->bytes : 0;
        size_t count = k->bytes / dt_dtype_size(k->t);
        const void *src[DT__IPC_MAX_SRCS];
        for (int i = 0; s == DT_OK && i < n; i += DT__IPC_MAX_SRCS) {
            int m = n - i < DT__IPC_MAX_SRCS ? n - i : DT__IPC_MAX_SRCS;
            for (int j = 0; j < m; j++)
                src[j] = (const char *)ptr[i + j] + at;
            s = ipc->reduce(st->stream, dst, src, m, i > 0, count, k->t, k->op, i + m == n ? n : 0);
        }
        break;
    }
    case K_ALLGATHER:
        for (int j = 0; s == DT_OK && j < n; j++)
            if (ptr[j] != (char *)k->out + (size_t)j * k->bytes) /* in place: my block is there already */
                s = ipc->copy(st->stream, (char *)k->out + (size_t)j * k->bytes, ptr[j], k->bytes);
        break;
    case K_BROADCAST:
        if (me != k->root)
            s = ipc->copy(st->stream, k->out, ptr[k->root], k->bytes);
        break;
    }
    dt_status w = ipc->wait(st->stream);
    return s != DT_OK ? s : w;
}

/* The protocol of ipc.h for call k.  *taken false: nothing happened that
 * the caller's staged call would notice (every rank decided to stage). */
static dt_status run(dt_comm *c, const call_t *k, dt__coll_kind ck, size_t total, bool *taken)
{
    *taken = false;
    const dt__devmem_ipc *ipc = NULL;
    dt_status err;
    int mode;
    if (!eligible(c, k, ck, total, &ipc, &mode, &err))
        return err;
    dt__coll co;
    DT_CHECK(dt__coll_begin(&co, c, k->name));
    DT_CHECK(dt__coll_trace(&co, k->count, k->t, (int)k->op, k->root));
    int n = c->size, me = c->rank;

    /* Round 1: my input is complete; its handle to every peer.  Whatever
     * fails here makes this rank say "stage", never leave the protocol
     * (its peers would meet their deadline instead). */
    struct dt__ipcstate *st = NULL;
    rec_t mine = {REC_MAGIC, 1, 0, {{0}, {0}, 0}};
    dt_status s = state_of(c, ipc, &st);
    if (s == DT_OK)
        s = ipc->ready();
    if (s == DT_OK && k->in)
        s = ipc->export_ptr(k->in, k->in_bytes, &mine.h, &mine.off);
    if (s != DT_OK) {
        if (!st || !st->told) /* a warning where DT_DEVICE_IPC=1 asked for the path */
            dt__log(mode == 1 ? DT_LOG_WARN : DT_LOG_INFO, "%s: device buffers staged through host memory: %s",
                    k->name, dt_last_error());
        if (st)
            st->told = true;
        mine.state = 0;
        s = DT_OK;
    }
    rec_t *recs = calloc((size_t)n, sizeof *recs);
    void **ptr = calloc((size_t)n, sizeof *ptr);
    int *slot = malloc((size_t)n * sizeof *slot);
    uint8_t *flags = malloc((size_t)n), ok = 1;
    if (!recs || !ptr || !slot || !flags) {
        s = dt__coll_error(&co, dt__fail(DT_ERR_NOMEM, "ipc: out of memory"));
        goto out;
    }
    for (int j = 0; j < n; j++)
        slot[j] = -1;
    s = exchange(&co, 0, &mine, recs, sizeof mine);
    if (s != DT_OK) {
        s = dt__coll_error(&co, s);
        goto out;
    }
    for (int j = 0; j < n; j++)
        if (recs[j].magic != REC_MAGIC || (recs[j].state != 0 && recs[j].state != 1)) {
            s = dt__coll_error(&co, dt__fail(DT_ERR_PROTOCOL, "rank %d sent a malformed device-buffer record", j));
            goto out;
        }
    for (int j = 0; j < n; j++)
        if (!recs[j].state)
            goto out; /* some rank stages: all do (after round 1, nothing else was sent) */

    /* Round 2: open the peers' inputs. */
    for (int j = 0; ok && j < n; j++) {
        bool exports = k->kind != K_BROADCAST || j == k->root;
        if (!exports)
            continue;
        if (j == me) {
            ptr[j] = (void *)k->in;
            continue;
        }
        void *base = NULL;
        if (dt__ipc_cache_get(ipc, &recs[j].h, c->id, &base, &slot[j]) != DT_OK) {
            if (!st->told)
                dt__log(mode == 1 ? DT_LOG_WARN : DT_LOG_INFO,
                        "%s: device buffers staged through host memory: opening rank %d's: %s", k->name, j,
                        dt_last_error());
            st->told = true;
            ok = 0;
        } else {
            ptr[j] = (char *)base + recs[j].off;
        }
    }
    s = exchange(&co, 1, &ok, flags, 1);
    if (s != DT_OK) {
        s = dt__coll_error(&co, s);
        goto out;
    }
    if (first_no(flags, n) >= 0)
        goto out; /* every rank stages */

    /* Round 3: read, then the closing barrier. */
    *taken = true;
    void *dst = k->out;
    if (k->temp) {
        if (st->tmp_size < k->bytes) {
            if (st->tmp)
                ipc->dev_free(st->tmp);
            st->tmp = ipc->dev_alloc(k->bytes);
            st->tmp_size = st->tmp ? k->bytes : 0;
        }
        dst = st->tmp;
    }
    dt_status mine_s = dst ? compute(k, st, c, ptr, dst)
                           : dt__fail(DT_ERR_NOMEM, "cannot allocate a %zu-byte device temporary", k->bytes);
    ok = mine_s == DT_OK;
    s = exchange(&co, 2, &ok, flags, 1);
    if (s != DT_OK) {
        s = dt__coll_error(&co, s);
        goto out;
    }
    if (mine_s != DT_OK) {
        s = dt__wrap(mine_s, "%s: reading the peers' device buffers: ", k->name);
        goto out;
    }
    int bad = first_no(flags, n);
    if (bad >= 0) {
        s = dt__fail(DT_ERR_PEER, "%s: rank %d failed to read the peers' device buffers (its own message says why)",
                     k->name, bad);
        goto out;
    }
    if (k->temp) {
        s = ipc->copy(st->stream, k->out, dst, k->bytes);
        dt_status w = ipc->wait(st->stream);
        s = s != DT_OK ? s : w;
        if (s != DT_OK)
            s = dt__wrap(s, "%s: copying the result to the receive buffer: ", k->name);
    }
    if (s == DT_OK) {
        atomic_fetch_add(&calls, 1);
        if (!st->announced)
            DT_INFO("%s: device buffers read by IPC between the %d ranks of this host (communicator %u)", k->name,
                    n, c->id);
        st->announced = true;
    }
out:
    for (int j = 0; slot && j < n; j++)
        dt__ipc_cache_put(slot[j]);
    free(recs);
    free(ptr);
    free(slot);
    free(flags);
    return s;
}

/* count x element size x mult, or 0 past the backend's limit or for an
 * unknown dtype (then the call is staged, and refused there). */
static size_t nbytes(size_t count, dt_dtype t, size_t mult)
{
    size_t es = dt_dtype_size(t);
    if (es == 0 || count > DT__MAX_BUFFER_BYTES / es / mult)
        return 0;
    return count * es;
}

dt_status dt__ipc_allreduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, dt_comm *c)
{
    size_t b = nbytes(count, t, 1);
    bool taken = false;
    if (b && dt__check_dtype_op("allreduce", t, op) == DT_OK &&
        dt__coll_check_buffers("allreduce", send, b, recv, b) == DT_OK) {
        call_t k = {"allreduce", K_ALLREDUCE, count, t, op, -1, b, send, b, recv, send == recv};
        DT_CHECK(run(c, &k, DT__COLL_ALLREDUCE, b, &taken));
    }
    return taken ? DT_OK : dt__stage_allreduce(send, recv, count, t, op, c);
}

dt_status dt__ipc_reduce_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, dt_redop op,
                                 dt_comm *c)
{
    size_t n = (size_t)c->size, b = nbytes(recvcount, t, n);
    bool taken = false;
    if (b && dt__check_dtype_op("reduce_scatter", t, op) == DT_OK &&
        dt__coll_check_buffers("reduce_scatter", send, n * b, recv, send == recv ? n * b : b) == DT_OK) {
        call_t k = {"reduce_scatter", K_REDUCE_SCATTER, recvcount, t, op, -1, b, send, n * b, recv, send == recv};
        DT_CHECK(run(c, &k, DT__COLL_REDUCE_SCATTER, n * b, &taken));
    }
    return taken ? DT_OK : dt__stage_reduce_scatter(send, recv, recvcount, t, op, c);
}

dt_status dt__ipc_allgather(const void *send, void *recv, size_t sendcount, dt_dtype t, dt_comm *c)
{
    size_t n = (size_t)c->size, b = nbytes(sendcount, t, n);
    bool taken = false;
    if (b && dt__coll_check_buffers("allgather", send, b, recv, n * b) == DT_OK) {
        /* In place, this rank's block is already at its place in recv. */
        const void *in = send == recv ? (const char *)recv + (size_t)c->rank * b : send;
        call_t k = {"allgather", K_ALLGATHER, sendcount, t, (dt_redop)-1, -1, b, in, b, recv, false};
        DT_CHECK(run(c, &k, DT__COLL_ALLGATHER, n * b, &taken));
    }
    return taken ? DT_OK : dt__stage_allgather(send, recv, sendcount, t, c);
}

dt_status dt__ipc_broadcast(void *buf, size_t count, dt_dtype t, int root, dt_comm *c)
{
    size_t b = nbytes(count, t, 1);
    bool taken = false;
    if (b && buf && root >= 0 && root < c->size) {
        call_t k = {"broadcast", K_BROADCAST, count, t, (dt_redop)-1, root, b, c->rank == root ? buf : NULL, b,
                    buf, false};
        DT_CHECK(run(c, &k, DT__COLL_BROADCAST, b, &taken));
    }
    return taken ? DT_OK : dt__stage_broadcast(buf, count, t, root, c);
}
