/* The stall inspector (docs/observability.md), as Horovod's: a collective
 * that has waited longer than DT_STALL_S names the ranks that have not
 * arrived at it.
 *
 * Every public collective counts itself on its communicator here (a few
 * relaxed atomic operations and a coarse clock read: ~10 ns against a
 * collective's microseconds at least).
 * Each heartbeat the beat thread (transport/heartbeat.c, every
 * DT_HEARTBEAT_TIMEOUT/10 s) publishes this rank's counts in the store as
 * <prefix>/at/<rank>, "host id:count id:count ...", when they changed.  A
 * collective still running DT_STALL_S after it started makes the beat
 * thread read its members' counts: the members whose count on that
 * communicator is below this rank's have not arrived.  The lowest arrived
 * rank prints one line, and again every DT_STALL_S while the wait lasts;
 * the others stop reading at the first lower rank that arrived, so that in
 * a large job each waiting rank reads as many keys as there are missing
 * ranks below it, plus one, not every member's.
 * The counts the others published may be a heartbeat period old, so a rank
 * that arrived within the last period can still be listed: DT_STALL_S
 * should be at least two periods (the default, 60 s, is four). */
#include "comm/stall.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/status.h"
#include "transport/heartbeat.h"

#define SLOTS 64 /* communicators followed (more are not inspected) */

/* One communicator's record.  id..ranks are set once, under mu; the rest
 * is written by the threads that run its collectives with relaxed atomics
 * (no lock on a collective's path: ~10 ns) and read by the beat thread,
 * which tolerates a call's fields caught mid-update (a report one beat
 * late, or naming the next call's size). */
typedef struct {
    uint32_t id;
    int size, rank;
    int *ranks; /* comm rank -> world rank, copied */
    _Atomic uint64_t count; /* public collectives started */
    _Atomic int depth;      /* > 0: one is running (a nested call counts once) */
    _Atomic int64_t start_ns; /* CLOCK_MONOTONIC_COARSE: ~5 ns to read, a few ms coarse */
    _Atomic(const char *) op; /* the public call's name (a string literal) */
    _Atomic size_t bytes;
    int64_t reported_ns;     /* the beat thread's */
    uint64_t reported_count; /* the call reported_ns is about */
} slot;

struct dt__stall {
    pthread_mutex_t mu; /* n and the slots' constant fields */
    double stall_s;
    slot slots[SLOTS];
    int n;
    char host[64];
    char published[2048]; /* beat thread only */
};

dt_status dt__stall_create(dt__world *w)
{
    w->stall = NULL;
    if (!w->heartbeat)
        return DT_OK;
    int64_t s;
    DT_CHECK(dt__env_int("DT_STALL_S", 0, 86400 * 7, &s));
    if (s == 0)
        return DT_OK;
    dt__stall *st = calloc(1, sizeof *st);
    if (!st)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&st->mu, NULL);
    st->stall_s = (double)s;
    if (gethostname(st->host, sizeof st->host - 1) != 0)
        snprintf(st->host, sizeof st->host, "?");
    for (char *p = st->host; *p; p++) /* one word in the published text */
        if (*p == ' ' || *p == ':')
            *p = '_';
    w->stall = st;
    dt__heartbeat_set_hook(w->heartbeat, dt__stall_beat, w);
    return DT_OK;
}

void dt__stall_destroy(dt__stall *st)
{
    if (!st)
        return;
    for (int i = 0; i < st->n; i++)
        free(st->slots[i].ranks);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

/* c's slot: cached in c after the first call (slots never move). */
static slot *slot_of(dt__stall *st, dt_comm *c)
{
    slot *s = __atomic_load_n(&c->stall_slot, __ATOMIC_ACQUIRE);
    if (s)
        return s;
    pthread_mutex_lock(&st->mu);
    for (int i = 0; i < st->n && !s; i++)
        if (st->slots[i].id == c->id)
            s = &st->slots[i];
    int *ranks = s || st->n == SLOTS ? NULL : malloc((size_t)c->size * sizeof *ranks);
    if (ranks) {
        memcpy(ranks, c->ranks, (size_t)c->size * sizeof *ranks);
        s = &st->slots[st->n++];
        s->id = c->id;
        s->size = c->size;
        s->rank = c->rank;
        s->ranks = ranks;
    }
    pthread_mutex_unlock(&st->mu);
    if (s)
        __atomic_store_n(&c->stall_slot, s, __ATOMIC_RELEASE);
    return s;
}

static int64_t coarse_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

void dt__stall_enter(dt_comm *c, const char *op, size_t bytes)
{
    dt__stall *st = c->world->stall;
    if (!st || c->size < 2)
        return;
    slot *s = slot_of(st, c);
    if (!s || atomic_fetch_add_explicit(&s->depth, 1, memory_order_relaxed) != 0)
        return;
    atomic_store_explicit(&s->op, op, memory_order_relaxed);
    atomic_store_explicit(&s->bytes, bytes, memory_order_relaxed);
    atomic_store_explicit(&s->start_ns, coarse_ns(), memory_order_relaxed);
    atomic_fetch_add_explicit(&s->count, 1, memory_order_release);
}

void dt__stall_leave(dt_comm *c)
{
    slot *s = c->world->stall ? __atomic_load_n(&c->stall_slot, __ATOMIC_ACQUIRE) : NULL;
    if (s && atomic_load_explicit(&s->depth, memory_order_relaxed) > 0)
        atomic_fetch_sub_explicit(&s->depth, 1, memory_order_relaxed);
}

/* What inspect() needs of a stalled slot, copied. */
typedef struct {
    uint32_t id;
    int size, rank;
    int *ranks;
    uint64_t count;
    const char *op;
    size_t bytes;
    int64_t start_ns;
} stalled_call;

/* rank's count on communicator id from its published text; 0 when absent. */
static uint64_t count_in(const char *text, uint32_t id, char *host, size_t host_len)
{
    const char *p = strchr(text, ' ');
    snprintf(host, host_len, "%.*s", p ? (int)(p - text) : (int)strlen(text), text);
    while (p && *p) {
        unsigned long long cid, n;
        if (sscanf(p, " %llu:%llu", &cid, &n) == 2 && cid == id)
            return n;
        p = strchr(p + 1, ' ');
    }
    return 0;
}

static void inspect(dt__world *w, dt__heartbeat *h, const stalled_call *s, double waited)
{
    dt__stall *st = w->stall;
    char missing[1024] = "", host[64];
    size_t used = 0;
    int nmissing = 0;
    for (int r = 0; r < s->size; r++) {
        if (r == s->rank)
            continue;
        char text[2048];
        if (dt__heartbeat_read(h, "at", s->ranks[r], text, sizeof text) != DT_OK)
            return; /* the store did not answer: the heartbeat reports it */
        uint64_t n = count_in(text, s->id, host, sizeof host);
        if (n >= s->count) {
            if (r < s->rank) /* a lower rank arrived: it speaks, and this one reads no further */
                return;
            continue;
        }
        nmissing++;
        char seen[64] = "not seen at a collective on it yet";
        if (n)
            snprintf(seen, sizeof seen, "last seen at #%llu", (unsigned long long)n);
        if (used < sizeof missing)
            used += (size_t)snprintf(missing + used, sizeof missing - used, "%srank %d (%s, %s)", used ? ", " : "",
                                     s->ranks[r], host[0] ? host : "host unknown", seen);
    }
    if (!nmissing)
        return;
    char where[96] = "";
    if (s->id != 1)
        snprintf(where, sizeof where, " on communicator %u (%d ranks)", s->id, s->size);
    fprintf(stderr,
            "dtrain: stall: rank %d (%s) has waited %.0f s in %s #%llu (%zu bytes)%s; not arrived: %s "
            "(DT_STALL_S=%.0f)\n",
            s->ranks[s->rank], st->host, waited, s->op, (unsigned long long)s->count, s->bytes, where, missing,
            st->stall_s);
    fflush(stderr);
}

void dt__stall_beat(void *arg, dt__heartbeat *h)
{
    dt__world *w = arg;
    dt__stall *st = w->stall;
    char text[sizeof st->published];
    stalled_call stalled[4];
    int nstalled = 0;
    int64_t now = dt__now_ns(), limit = (int64_t)(st->stall_s * 1e9);
    pthread_mutex_lock(&st->mu);
    size_t used = (size_t)snprintf(text, sizeof text, "%s", st->host);
    for (int i = 0; i < st->n; i++) {
        slot *s = &st->slots[i];
        uint64_t count = atomic_load_explicit(&s->count, memory_order_acquire);
        if (used < sizeof text)
            used += (size_t)snprintf(text + used, sizeof text - used, " %u:%llu", s->id, (unsigned long long)count);
        int64_t start = atomic_load_explicit(&s->start_ns, memory_order_relaxed);
        if (count != s->reported_count) {
            s->reported_count = count;
            s->reported_ns = 0;
        }
        if (atomic_load_explicit(&s->depth, memory_order_relaxed) > 0 && now - start >= limit &&
            now - s->reported_ns >= limit && nstalled < 4) {
            int *ranks = malloc((size_t)s->size * sizeof *ranks);
            if (!ranks)
                continue;
            memcpy(ranks, s->ranks, (size_t)s->size * sizeof *ranks);
            s->reported_ns = now;
            stalled[nstalled++] = (stalled_call){.id = s->id, .size = s->size, .rank = s->rank, .ranks = ranks,
                                                 .count = count, .op = atomic_load_explicit(&s->op, memory_order_relaxed),
                                                 .bytes = atomic_load_explicit(&s->bytes, memory_order_relaxed),
                                                 .start_ns = start};
        }
    }
    pthread_mutex_unlock(&st->mu);
    if (strcmp(text, st->published) && dt__heartbeat_publish(h, "at", text) == DT_OK)
        memcpy(st->published, text, sizeof text);
    for (int i = 0; i < nstalled; i++) {
        inspect(w, h, &stalled[i], (double)(now - stalled[i].start_ns) / 1e9);
        free(stalled[i].ranks);
    }
}
