/* The stall inspector (docs/observability.md), as Horovod's: a collective
 * that has waited longer than DT_STALL_S names the ranks that have not
 * arrived at it.
 *
 * Every public collective counts itself on its communicator here (a mutex
 * and a few stores: ~50 ns against a collective's microseconds at least).
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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/status.h"
#include "transport/heartbeat.h"

#define SLOTS 64 /* communicators followed (more are not inspected) */

typedef struct {
    uint32_t id;
    int size, rank;
    int *ranks; /* comm rank -> world rank, copied */
    uint64_t count; /* public collectives started */
    int depth;      /* > 0: one is running (a nested call counts once) */
    int64_t start_ns, reported_ns;
    char op[24];
    size_t bytes;
} slot;

struct dt__stall {
    pthread_mutex_t mu;
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

static slot *find(dt__stall *st, const dt_comm *c)
{
    for (int i = 0; i < st->n; i++)
        if (st->slots[i].id == c->id)
            return &st->slots[i];
    if (st->n == SLOTS)
        return NULL;
    int *ranks = malloc((size_t)c->size * sizeof *ranks);
    if (!ranks)
        return NULL;
    memcpy(ranks, c->ranks, (size_t)c->size * sizeof *ranks);
    slot *s = &st->slots[st->n++];
    *s = (slot){.id = c->id, .size = c->size, .rank = c->rank, .ranks = ranks};
    return s;
}

void dt__stall_enter(dt_comm *c, const char *op, size_t bytes)
{
    dt__stall *st = c->world->stall;
    if (!st || c->size < 2)
        return;
    pthread_mutex_lock(&st->mu);
    slot *s = find(st, c);
    if (s && s->depth++ == 0) {
        s->count++;
        s->start_ns = dt__now_ns();
        s->reported_ns = 0;
        snprintf(s->op, sizeof s->op, "%s", op);
        s->bytes = bytes;
    }
    pthread_mutex_unlock(&st->mu);
}

void dt__stall_leave(dt_comm *c)
{
    dt__stall *st = c->world->stall;
    if (!st || c->size < 2)
        return;
    pthread_mutex_lock(&st->mu);
    slot *s = find(st, c);
    if (s && s->depth > 0)
        s->depth--;
    pthread_mutex_unlock(&st->mu);
}

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

static void inspect(dt__world *w, dt__heartbeat *h, const slot *s, double waited)
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
    slot stalled[4];
    int nstalled = 0;
    int64_t now = dt__now_ns(), limit = (int64_t)(st->stall_s * 1e9);
    pthread_mutex_lock(&st->mu);
    size_t used = (size_t)snprintf(text, sizeof text, "%s", st->host);
    for (int i = 0; i < st->n; i++) {
        slot *s = &st->slots[i];
        if (used < sizeof text)
            used += (size_t)snprintf(text + used, sizeof text - used, " %u:%llu", s->id, (unsigned long long)s->count);
        if (s->depth > 0 && now - s->start_ns >= limit && now - s->reported_ns >= limit && nstalled < 4) {
            s->reported_ns = now;
            stalled[nstalled] = *s;
            stalled[nstalled].ranks = malloc((size_t)s->size * sizeof(int));
            if (stalled[nstalled].ranks) {
                memcpy(stalled[nstalled].ranks, s->ranks, (size_t)s->size * sizeof(int));
                nstalled++;
            }
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
