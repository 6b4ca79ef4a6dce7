#include "transport/heartbeat.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/status.h"
#include "dtrain/store.h"

typedef struct {
    int64_t value;      /* last counter read */
    int64_t changed_ns; /* when it was first seen with that value; 0: never read */
    int64_t checked_ns; /* last read */
} peer_beat;

struct dt__heartbeat {
    dt__heartbeat_config cfg;
    char host[256], token[256], prefix[64];
    double period_s;
    dt_store_client *beat, *check; /* one each: the thread must never wait behind a check */
    peer_beat *peers;
    /* The last evidence that the store is alive: any exchange with it that
     * got an answer (a beat, a check, a connection made), by either thread.
     * Silence is measured from here, never from the last check: checks run
     * only while a rank waits, so the last one may be minutes old. */
    _Atomic int64_t store_ok_ns;
    /* When the store answered again after a silence of more than two
     * periods: no peer could beat through it meanwhile, so a peer's counter
     * standing still over that time says nothing about the peer. */
    _Atomic int64_t store_back_ns;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    bool stop, running;
    char note[1024];        /* guarded by mu */
    dt__heartbeat_hook hook; /* guarded by mu */
    void *hook_arg;
    uint64_t note_version;  /* guarded by mu */
};

/* <prefix>/<what>/<rank>: "hb" the counter, "coll" the DT_DEBUG=coll note. */
static void key_of(const dt__heartbeat *h, const char *what, int rank, char *key, size_t len)
{
    snprintf(key, len, "%s/%s/%d", h->prefix, what, rank);
}

static void store_answered(dt__heartbeat *h)
{
    int64_t now = dt__now_ns(), seen = atomic_load(&h->store_ok_ns);
    while (seen < now && !atomic_compare_exchange_weak(&h->store_ok_ns, &seen, now))
        ;
    if (now - seen > (int64_t)(2 * h->period_s * 1e9))
        atomic_store(&h->store_back_ns, now);
}

/* Connect *c if it is not (first use, or dropped after a failed request),
 * trying for up to `seconds`: a refused or dropped attempt (a store still
 * starting, a loaded machine, a full backlog) is retried, a wrong token is not. */
static dt_status connect_within(dt__heartbeat *h, dt_store_client **c, double seconds)
{
    if (*c)
        return DT_OK;
    int64_t deadline = dt__deadline_after(seconds);
    for (;;) {
        double left = (double)(deadline - dt__now_ns()) / 1e9;
        dt_status s = dt_store_connect(h->host, h->cfg.port, h->token, left > 0.05 ? left : 0.05, c);
        if (s == DT_OK)
            break;
        if (s == DT_ERR_AUTH || dt__now_ns() + 50000000 >= deadline)
            return s;
        struct timespec pause = {0, 50000000};
        nanosleep(&pause, NULL);
    }
    dt_store_set_io_timeout(*c, h->period_s);
    store_answered(h);
    return DT_OK;
}

static dt_status connected(dt__heartbeat *h, dt_store_client **c) { return connect_within(h, c, h->period_s); }

/* A client whose connection broke (a request timed out) is replaced. */
static dt_status request_add(dt__heartbeat *h, dt_store_client **c, const char *key, int64_t delta, int64_t *value)
{
    DT_CHECK(connected(h, c));
    dt_status s = dt_store_add(*c, key, delta, value);
    if (s != DT_OK) {
        dt_store_close(*c);
        *c = NULL;
    } else {
        store_answered(h);
    }
    return s;
}

/* Publish the note through client c when it changed since *published. */
static void publish_note(dt__heartbeat *h, dt_store_client *c, uint64_t *published)
{
    char note[sizeof h->note], key[128];
    pthread_mutex_lock(&h->mu);
    uint64_t version = h->note_version;
    memcpy(note, h->note, sizeof note);
    pthread_mutex_unlock(&h->mu);
    if (version == *published || !c)
        return;
    key_of(h, "coll", h->cfg.rank, key, sizeof key);
    if (dt_store_set(c, key, note, strlen(note) + 1) == DT_OK)
        *published = version;
}

static void *beat_loop(void *arg)
{
    dt__heartbeat *h = arg;
    char key[128];
    uint64_t published = 0;
    key_of(h, "hb", h->cfg.rank, key, sizeof key);
    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        pthread_mutex_unlock(&h->mu);
        int64_t v;
        if (request_add(h, &h->beat, key, 1, &v) != DT_OK)
            DT_INFO("heartbeat: %s", dt_last_error());
        publish_note(h, h->beat, &published);
        pthread_mutex_lock(&h->mu);
        dt__heartbeat_hook hook = h->hook;
        void *hook_arg = h->hook_arg;
        pthread_mutex_unlock(&h->mu);
        if (hook)
            hook(hook_arg, h);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        int64_t ns = until.tv_nsec + (int64_t)(h->period_s * 1e9);
        until.tv_sec += (time_t)(ns / 1000000000);
        until.tv_nsec = (long)(ns % 1000000000);
        pthread_mutex_lock(&h->mu);
        if (!h->stop)
            pthread_cond_timedwait(&h->wake, &h->mu, &until);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

dt_status dt__heartbeat_start(const dt__heartbeat_config *cfg, dt__heartbeat **out)
{
    *out = NULL;
    if (strlen(cfg->host) >= 256 || strlen(cfg->token) >= 256 || strlen(cfg->key_prefix) >= 64)
        return dt__fail(DT_ERR_INVALID, "heartbeat: store address, token or key prefix too long");
    dt__heartbeat *h = calloc(1, sizeof *h);
    if (!h || !(h->peers = calloc((size_t)cfg->size, sizeof *h->peers))) {
        free(h);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    h->cfg = *cfg;
    snprintf(h->host, sizeof h->host, "%s", cfg->host);
    snprintf(h->token, sizeof h->token, "%s", cfg->token);
    snprintf(h->prefix, sizeof h->prefix, "%s", cfg->key_prefix);
    h->period_s = cfg->timeout_s / 10;
    atomic_init(&h->store_ok_ns, dt__now_ns());
    atomic_init(&h->store_back_ns, 0);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->wake, NULL);
    char key[128];
    int64_t v;
    key_of(h, "hb", cfg->rank, key, sizeof key);
    /* The first beat before anyone checks.  Start-up on a loaded machine may
     * take a while: the connection may take the whole timeout, not a period. */
    dt_status s = connect_within(h, &h->beat, cfg->timeout_s);
    if (s == DT_OK)
        s = request_add(h, &h->beat, key, 1, &v);
    if (s == DT_OK && pthread_create(&h->thread, NULL, beat_loop, h) != 0)
        s = dt__fail(DT_ERR_SYSTEM, "heartbeat: cannot start its thread");
    if (s != DT_OK) {
        dt__heartbeat_stop(h);
        return dt__wrap(s, "heartbeat: ");
    }
    h->running = true;
    *out = h;
    return DT_OK;
}

void dt__heartbeat_stop(dt__heartbeat *h)
{
    if (!h)
        return;
    if (h->running) {
        pthread_mutex_lock(&h->mu);
        h->stop = true;
        pthread_cond_signal(&h->wake);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->thread, NULL);
    }
    dt_store_close(h->beat);
    dt_store_close(h->check);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->wake);
    free(h->peers);
    free(h);
}

double dt__heartbeat_period(const dt__heartbeat *h) { return h->period_s; }

dt_status dt__heartbeat_check(dt__heartbeat *h, int peer, const char *peer_name)
{
    if (peer < 0 || peer >= h->cfg.size || peer == h->cfg.rank)
        return DT_OK;
    peer_beat *p = &h->peers[peer];
    int64_t now = dt__now_ns(), period_ns = (int64_t)(h->period_s * 1e9);
    if (p->checked_ns && now - p->checked_ns < period_ns)
        return DT_OK;
    /* Declared only after the full timeout of silence, measured from the
     * last evidence of life, so the silence reported is at least the timeout
     * and is what was seen, never a guess. */
    int64_t limit_ns = (int64_t)(h->cfg.timeout_s * 1e9);
    char key[128];
    int64_t v = 0;
    key_of(h, "hb", peer, key, sizeof key);
    dt_status s = request_add(h, &h->check, key, 0, &v);
    now = dt__now_ns(); /* the request may have taken up to a period */
    p->checked_ns = now;
    if (s != DT_OK) {
        int64_t silent_ns = now - atomic_load(&h->store_ok_ns);
        char why[512];
        snprintf(why, sizeof why, "%s", dt_last_error()); /* dt__fail writes where dt_last_error() points */
        if (silent_ns >= limit_ns)
            return dt__fail(DT_ERR_PEER,
                            "waiting for %s, this rank could not reach the rendezvous store at %s:%d for %.1f s to "
                            "read its heartbeat (DT_HEARTBEAT_TIMEOUT=%.0f): this host or the store's host lost "
                            "its network, or the store's process is frozen: %s",
                            peer_name, h->host, h->cfg.port, (double)silent_ns / 1e9, h->cfg.timeout_s, why);
        return DT_OK;
    }
    if (!p->changed_ns || v != p->value) {
        p->value = v;
        p->changed_ns = now;
        return DT_OK;
    }
    int64_t since = p->changed_ns, back = atomic_load(&h->store_back_ns);
    if (back > since)
        since = back;
    if (now - since >= limit_ns) {
        /* For the launcher: the rank that noticed exits first, but the one
         * to name is the silent one (dtrun reads <prefix>/dead). */
        char dead[256];
        snprintf(key, sizeof key, "%s/dead", h->prefix);
        snprintf(dead, sizeof dead, "%s sent no heartbeat for %.1f s or more", peer_name, (double)(now - since) / 1e9);
        dt_store_set(h->check, key, dead, strlen(dead) + 1);
        return dt__fail(DT_ERR_PEER,
                        "%s sent no heartbeat for %.1f s or more (DT_HEARTBEAT_TIMEOUT=%.0f) while this rank waited on it: "
                        "the process is stopped or frozen, or its host lost its network",
                        peer_name, (double)(now - since) / 1e9, h->cfg.timeout_s);
    }
    return DT_OK;
}

void dt__heartbeat_set_note(dt__heartbeat *h, const char *text)
{
    pthread_mutex_lock(&h->mu);
    snprintf(h->note, sizeof h->note, "%s", text);
    h->note_version++;
    pthread_mutex_unlock(&h->mu);
}

void dt__heartbeat_publish_note(dt__heartbeat *h)
{
    uint64_t published = 0;
    if (connected(h, &h->check) == DT_OK)
        publish_note(h, h->check, &published);
}

void dt__heartbeat_set_hook(dt__heartbeat *h, dt__heartbeat_hook fn, void *arg)
{
    pthread_mutex_lock(&h->mu);
    h->hook = fn;
    h->hook_arg = arg;
    pthread_mutex_unlock(&h->mu);
}

int dt__heartbeat_rank(const dt__heartbeat *h) { return h->cfg.rank; }

dt_status dt__heartbeat_publish(dt__heartbeat *h, const char *what, const char *text)
{
    char key[128];
    key_of(h, what, h->cfg.rank, key, sizeof key);
    DT_CHECK(connected(h, &h->beat));
    dt_status s = dt_store_set(h->beat, key, text, strlen(text) + 1);
    if (s != DT_OK) {
        dt_store_close(h->beat);
        h->beat = NULL;
    }
    return s;
}

dt_status dt__heartbeat_read(dt__heartbeat *h, const char *what, int rank, char *buf, size_t len)
{
    char key[128];
    void *v = NULL;
    size_t n = 0;
    buf[0] = '\0';
    key_of(h, what, rank, key, sizeof key);
    DT_CHECK(connected(h, &h->beat));
    dt_status s = dt_store_get(h->beat, key, 0, &v, &n);
    if (s == DT_ERR_TIMEOUT) /* no such key: the rank never published */
        return DT_OK;
    if (s != DT_OK) {
        dt_store_close(h->beat);
        h->beat = NULL;
        return s;
    }
    snprintf(buf, len, "%.*s", (int)n, (const char *)v);
    free(v);
    return DT_OK;
}

dt_status dt__heartbeat_read_note(dt__heartbeat *h, int rank, char *buf, size_t len)
{
    char key[128];
    void *v = NULL;
    size_t n = 0;
    buf[0] = '\0';
    key_of(h, "coll", rank, key, sizeof key);
    DT_CHECK(connected(h, &h->check));
    dt_status s = dt_store_get(h->check, key, 0, &v, &n);
    if (s == DT_ERR_TIMEOUT) /* no such key: the rank never published */
        return DT_OK;
    if (s != DT_OK)
        return s;
    snprintf(buf, len, "%.*s", (int)n, (const char *)v);
    free(v);
    return DT_OK;
}
