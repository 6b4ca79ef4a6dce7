#include "comm/colltrace.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/log.h"
#include "base/status.h"
#include "transport/shm_arena.h"
#include "transport/heartbeat.h"
#include "transport/socket.h"

#define RING 16      /* entries kept */
#define PUBLISHED 4  /* newest entries handed to the heartbeat thread */
#define DESC_WIRE 96 /* bytes of a descriptor on the wire */
#define TRACE_SUBTAG (DT__SUBTAG_MAX - 3)

struct dt__colltrace {
    pthread_mutex_t mu; /* communicators record from their own threads */
    dt__colldesc ring[RING];
    uint64_t n; /* entries ever recorded */
};

dt_status dt__colltrace_create(dt__colltrace **out)
{
    *out = NULL;
    const char *d = dt__env_str("DT_DEBUG");
    if (!d || !strstr(d, "coll"))
        return DT_OK;
    *out = calloc(1, sizeof **out);
    if (!*out)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&(*out)->mu, NULL);
    return DT_OK;
}

void dt__colltrace_destroy(dt__colltrace *t)
{
    if (t)
        pthread_mutex_destroy(&t->mu);
    free(t);
}

void dt__colldesc_format(const dt__colldesc *d, char *buf, size_t len)
{
    const char *dt = dt_dtype_name((dt_dtype)d->dtype);
    if (!strcmp(d->op, "barrier")) {
        snprintf(buf, len, "#%llu barrier()%s%s%s", (unsigned long long)d->seq, d->tag[0] ? " '" : "", d->tag,
                 d->tag[0] ? "'" : "");
        return;
    }
    int n = snprintf(buf, len, "#%llu %s(%llu x %s", (unsigned long long)d->seq, d->op,
                     (unsigned long long)d->count, dt ? dt : "?");
    if (d->redop >= 0 && n >= 0 && (size_t)n < len) {
        const char *op = dt_redop_name((dt_redop)d->redop);
        n += snprintf(buf + n, len - (size_t)n, ", %s", op ? op : "?");
    }
    if (d->root >= 0 && n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, ", root %d", d->root);
    if (n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, ")%s%s%s", d->tag[0] ? " '" : "", d->tag, d->tag[0] ? "'" : "");
    if (d->comm_id != 1 && n >= 0 && (size_t)n < len) /* not the world */
        snprintf(buf + n, len - (size_t)n, " on communicator %u (%d ranks)", d->comm_id, d->comm_size);
}

/* The newest entries, oldest first, separated by " | ". */
static void format_recent(const dt__colltrace *t, int max, char *buf, size_t len)
{
    buf[0] = '\0';
    uint64_t first = t->n > (uint64_t)max ? t->n - (uint64_t)max : 0;
    size_t used = 0;
    for (uint64_t i = first; i < t->n && used < len; i++) {
        char one[256];
        dt__colldesc_format(&t->ring[i % RING], one, sizeof one);
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i > first ? " | " : "", one);
    }
}

static void pack(const dt__colldesc *d, uint8_t *w)
{
    memset(w, 0, DESC_WIRE);
    memcpy(w, d->op, DT__COLLTRACE_OP);
    dt__put_u64(w + 24, d->count);
    dt__put_u32(w + 32, (uint32_t)d->dtype);
    dt__put_u32(w + 36, (uint32_t)d->redop);
    dt__put_u32(w + 40, (uint32_t)d->root);
    dt__put_u32(w + 44, d->comm_id);
    dt__put_u32(w + 48, (uint32_t)d->comm_size);
    dt__put_u64(w + 52, d->seq);
    memcpy(w + 60, d->tag, DT__COLLTRACE_TAG);
}

static void unpack(const uint8_t *w, dt__colldesc *d)
{
    memcpy(d->op, w, DT__COLLTRACE_OP);
    d->op[DT__COLLTRACE_OP - 1] = '\0';
    d->count = dt__get_u64(w + 24);
    d->dtype = (int32_t)dt__get_u32(w + 32);
    d->redop = (int32_t)dt__get_u32(w + 36);
    d->root = (int32_t)dt__get_u32(w + 40);
    d->comm_id = dt__get_u32(w + 44);
    d->comm_size = (int32_t)dt__get_u32(w + 48);
    d->seq = dt__get_u64(w + 52);
    memcpy(d->tag, w + 60, DT__COLLTRACE_TAG);
    d->tag[DT__COLLTRACE_TAG - 1] = '\0';
}

static bool same_call(const dt__colldesc *a, const dt__colldesc *b)
{
    return !strcmp(a->op, b->op) && a->count == b->count && a->dtype == b->dtype && a->redop == b->redop &&
           a->root == b->root;
}

/* Every rank sends its descriptor to every other: one round, debug only. */
static dt_status exchange(dt__coll *k, const dt__colldesc *mine, dt__colldesc *all)
{
    int n = k->c->size, me = k->c->rank;
    uint8_t *wire = calloc((size_t)n, DESC_WIRE);
    dt__req *rq = calloc(2 * (size_t)n, sizeof *rq);
    dt_status s = wire && rq ? DT_OK : dt__fail(DT_ERR_NOMEM, "out of memory");
    size_t nreq = 0;
    if (s == DT_OK)
        pack(mine, wire + (size_t)me * DESC_WIRE);
    for (int r = 0; r < n && s == DT_OK; r++) {
        if (r == me)
            continue;
        s = dt__coll_recv(k, &rq[nreq++], r, TRACE_SUBTAG, wire + (size_t)r * DESC_WIRE, DESC_WIRE);
        if (s == DT_OK)
            s = dt__coll_send(k, &rq[nreq++], r, TRACE_SUBTAG, wire + (size_t)me * DESC_WIRE, DESC_WIRE);
    }
    if (s == DT_OK)
        s = dt__coll_wait(k, rq, nreq);
    for (int r = 0; r < n && s == DT_OK; r++)
        if (r != me)
            unpack(wire + (size_t)r * DESC_WIRE, &all[r]);
    if (s == DT_OK)
        all[me] = *mine;
    free(wire);
    free(rq);
    return s;
}

dt_status dt__coll_trace(dt__coll *k, size_t count, dt_dtype dtype, int redop, int root)
{
    uint64_t sig = dt__coll_sig(k->op, count, dtype, redop, root);
    k->c->coll_sig = sig;
    /* On one host, peers waiting in an arena round see which call this is,
     * even when it goes as messages that never reach them (shm_coll.c). */
    if (k->c->arena)
        dt__arena_publish_call(k->c->arena, k->c->rank, k->c->id, k->seq, sig);
    dt__colltrace *t = k->c->world->trace;
    if (!t) {
        k->sig = sig;
        return DT_OK;
    }
    /* The descriptor exchange below goes unsigned, so that its full report
     * (with tags) comes before the signature check's. */
    dt__colldesc d = {.count = count, .dtype = (int32_t)dtype, .redop = redop, .root = root,
                      .comm_id = k->c->id, .comm_size = k->c->size, .seq = k->seq};
    snprintf(d.op, sizeof d.op, "%s", k->op);
    snprintf(d.tag, sizeof d.tag, "%s", k->c->tag);
    char note[1024];
    pthread_mutex_lock(&t->mu);
    t->ring[t->n++ % RING] = d;
    format_recent(t, PUBLISHED, note, sizeof note);
    pthread_mutex_unlock(&t->mu);
    if (k->c->world->heartbeat)
        dt__heartbeat_set_note(k->c->world->heartbeat, note);
    if (k->c->size == 1) {
        k->sig = sig;
        return DT_OK;
    }
    dt__colldesc *all = calloc((size_t)k->c->size, sizeof *all);
    if (!all)
        return dt__coll_error(k, dt__fail(DT_ERR_NOMEM, "out of memory"));
    dt_status s = exchange(k, &d, all);
    for (int r = 1; r < k->c->size && s == DT_OK; r++) {
        if (same_call(&all[0], &all[r]))
            continue;
        char a[256], b[256];
        dt__colldesc_format(&all[0], a, sizeof a);
        dt__colldesc_format(&all[r], b, sizeof b);
        s = dt__fail(DT_ERR_INVALID,
                     "collective mismatch (DT_DEBUG=coll): rank 0 calls %s but rank %d calls %s; every rank of a "
                     "communicator must issue the same collectives in the same order",
                     a, r, b);
    }
    free(all);
    k->sig = sig;
    return dt__coll_error(k, s);
}

void dt__colltrace_dump(void *arg, dt_status code, const char *why)
{
    dt__world *w = arg;
    (void)code;
    (void)why;
    if (!w->trace)
        return;
    char mine[4096], recent[1024];
    pthread_mutex_lock(&w->trace->mu);
    format_recent(w->trace, RING, mine, sizeof mine);
    format_recent(w->trace, PUBLISHED, recent, sizeof recent);
    pthread_mutex_unlock(&w->trace->mu);
    int rank = dt__engine_rank(w->eng), size = dt__engine_size(w->eng);
    if (w->heartbeat) { /* for the ranks that read it after this one */
        dt__heartbeat_set_note(w->heartbeat, recent);
        dt__heartbeat_publish_note(w->heartbeat);
    }
    fprintf(stderr, "dtrain rank %d: DT_DEBUG=coll: recent collectives, oldest first:\n  rank %d (this rank): %s\n",
            rank, rank, mine[0] ? mine : "(none)");
    for (int r = 0; r < size && w->heartbeat; r++) {
        if (r == rank)
            continue;
        char note[1024];
        if (dt__heartbeat_read_note(w->heartbeat, r, note, sizeof note) != DT_OK) {
            fprintf(stderr, "  (the other ranks' records are in the store, which did not answer: %s)\n",
                    dt_last_error());
            break;
        }
        fprintf(stderr, "  rank %d (its newest %d, as published up to a heartbeat period ago): %s\n", r,
                PUBLISHED, note[0] ? note : "(none yet)");
    }
    fflush(stderr);
}
