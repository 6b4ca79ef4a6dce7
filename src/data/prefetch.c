/* A prefetch thread that prepares the next batch while the current one
 * trains: two slots, the thread fills one while the caller uses the other.
 * The sampler is read only by this thread once started, so the batch order
 * and the (epoch, position) recorded with each batch are the sampler's own. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/trace.h"
#include "dtrain/data.h"

enum { FREE = 0, READY = 1, IN_USE = 2 };

struct dt_prefetcher {
    dt_sampler *sampler;
    dt_batch_fill_fn fill;
    void *user;
    int64_t batch_size;
    dt_batch slots[2];
    int state[2], next_fill, next_take;
    bool stop, started;
    int64_t *idx;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void fill(dt_prefetcher *p, dt_batch *b)
{
    b->n = dt_sampler_next(p->sampler, p->batch_size, p->idx);
    if (b->n == 0) /* an epoch ended exactly at the last batch: the next call starts the next one */
        b->n = dt_sampler_next(p->sampler, p->batch_size, p->idx);
    p->fill(p->user, p->idx, b->n, b->x, b->y);
    b->epoch = p->sampler->epoch;
    b->position = p->sampler->position;
}

static void *producer(void *arg)
{
    dt__trace_thread_name("data prefetch");
    dt_prefetcher *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        int slot = p->next_fill;
        while (p->state[slot] != FREE && !p->stop)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop)
            break;
        pthread_mutex_unlock(&p->mu);
        fill(p, &p->slots[slot]); /* outside the lock: this is the work that overlaps compute */
        pthread_mutex_lock(&p->mu);
        p->state[slot] = READY;
        p->next_fill = 1 - slot;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

dt_status dt_prefetch_start(dt_sampler *s, int64_t batch_size, int64_t x_per_sample, int64_t y_per_sample,
                            dt_batch_fill_fn fn, void *user, dt_prefetcher **out)
{
    if (!s || !fn || !out || batch_size < 1 || x_per_sample < 1 || y_per_sample < 1 ||
        batch_size > (INT64_MAX / 8) / (x_per_sample > y_per_sample ? x_per_sample : y_per_sample))
        return dt__fail(DT_ERR_INVALID, "prefetch_start: batch %lld of %lld inputs and %lld targets per sample%s",
                        (long long)batch_size, (long long)x_per_sample, (long long)y_per_sample,
                        !s || !fn || !out ? ", or a NULL argument" : "");
    dt_prefetcher *p = calloc(1, sizeof *p);
    if (!p)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    p->sampler = s;
    p->fill = fn;
    p->user = user;
    p->batch_size = batch_size;
    p->idx = malloc((size_t)batch_size * sizeof *p->idx);
    bool ok = p->idx != NULL;
    for (int i = 0; i < 2; i++) {
        p->slots[i].x = malloc((size_t)(batch_size * x_per_sample) * sizeof(float));
        p->slots[i].y = malloc((size_t)(batch_size * y_per_sample) * sizeof(int32_t));
        ok = ok && p->slots[i].x && p->slots[i].y;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    dt_status st = ok ? DT_OK : dt__fail(DT_ERR_NOMEM, "out of memory for two batches of %lld samples", (long long)batch_size);
    if (st == DT_OK && pthread_create(&p->thread, NULL, producer, p) != 0)
        st = dt__fail(DT_ERR_SYSTEM, "cannot start the prefetch thread");
    p->started = st == DT_OK;
    if (st != DT_OK) {
        dt_prefetch_stop(p);
        return st;
    }
    *out = p;
    return DT_OK;
}

const dt_batch *dt_prefetch_next(dt_prefetcher *p)
{
    int64_t t0 = dt__trace_begin(); /* the timeline's "data wait": how long training waited for this batch */
    pthread_mutex_lock(&p->mu);
    int prev = 1 - p->next_take;
    if (p->state[prev] == IN_USE) { /* the batch handed out last time is free again */
        p->state[prev] = FREE;
        pthread_cond_broadcast(&p->cv);
    }
    int slot = p->next_take;
    while (p->state[slot] != READY)
        pthread_cond_wait(&p->cv, &p->mu);
    p->state[slot] = IN_USE;
    p->next_take = 1 - slot;
    pthread_mutex_unlock(&p->mu);
    if (t0)
        dt__trace_end("data", "data wait", t0, "\"samples\":%lld", (long long)p->slots[slot].n);
    return &p->slots[slot];
}

void dt_prefetch_stop(dt_prefetcher *p)
{
    if (!p)
        return;
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
    }
    for (int i = 0; i < 2; i++) {
        free(p->slots[i].x);
        free(p->slots[i].y);
    }
    free(p->idx);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}
