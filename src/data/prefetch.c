/* A prefetch thread that prepares the next batch while the current one
 * trains: two slots, the thread fills one while the caller uses the other.
 * The sampler is read only by this thread once started, so the batch order
 * and the (epoch, position) recorded with each batch are the sampler's own.
 *
 * On a device (dt_prefetch_start_on) each slot also owns device buffers:
 * the thread fills the slot's page-locked host buffers, queues their upload
 * on a copy stream of its own and records the slot's `uploaded` event; the
 * consumer's compute stream waits for that event (queued, the host does not
 * wait), so the step finds its batch in device memory and copies nothing.
 * When the consumer hands a slot back, an event on the compute stream marks
 * the end of the work that read it; the next upload into the slot waits for
 * it on the copy stream, and the host waits for the slot's previous upload
 * before it refills the host buffers the copy reads. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/trace.h"
#include "dtrain/data.h"
#include "tensor/backend.h"

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
    /* on a device (dev NULL: host batches only) */
    const dt_compute_ops *dev;
    void *copy_stream, *uploaded[2], *consumed[2];
    bool upload_pending[2], consumed_set[2];
    size_t x_bytes, y_bytes;
    dt_status err[2]; /* the slot's upload failed: dt_prefetch_next reports it */
    char why[2][DT__ERROR_LEN];
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

/* The slot's host buffers to its device buffers, on the copy stream. */
static dt_status upload(dt_prefetcher *p, int slot)
{
    const dt_compute_ops *d = p->dev;
    dt_batch *b = &p->slots[slot];
    if (p->consumed_set[slot]) /* the compute stream's last reads of these device buffers come first */
        DT_CHECK(d->stream_wait_event(p->copy_stream, p->consumed[slot]));
    size_t n = (size_t)b->n, x_bytes = p->x_bytes / (size_t)p->batch_size * n; /* a short last batch: its n */
    DT_CHECK(d->upload_async(b->x_dev, b->x, x_bytes, p->copy_stream));
    DT_CHECK(d->upload_async(b->y_dev, b->y, p->y_bytes / (size_t)p->batch_size * n, p->copy_stream));
    DT_CHECK(d->event_record(p->uploaded[slot], p->copy_stream));
    p->upload_pending[slot] = true;
    return DT_OK;
}

static void fill_slot(dt_prefetcher *p, int slot)
{
    p->err[slot] = DT_OK;
    if (p->dev && p->upload_pending[slot]) { /* the copy still reading the host buffers is done first */
        p->upload_pending[slot] = false;
        p->err[slot] = p->dev->event_sync(p->uploaded[slot]);
    }
    if (p->err[slot] == DT_OK)
        fill(p, &p->slots[slot]);
    if (p->err[slot] == DT_OK && p->dev)
        p->err[slot] = upload(p, slot);
    if (p->err[slot] != DT_OK)
        dt__error_save(p->why[slot]);
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
        fill_slot(p, slot); /* outside the lock: this is the work that overlaps compute */
        pthread_mutex_lock(&p->mu);
        p->state[slot] = READY;
        p->next_fill = 1 - slot;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* The slots' device side: buffers, the copy stream and the events. */
static dt_status device_slots(dt_prefetcher *p)
{
    const dt_compute_ops *d = p->dev;
    if (!(p->copy_stream = d->stream_create()))
        return dt__wrap(DT_ERR_SYSTEM, "prefetch on %s: the copy stream: ", d->name);
    for (int i = 0; i < 2; i++) {
        if (!(p->uploaded[i] = d->event_create()) || !(p->consumed[i] = d->event_create()))
            return dt__wrap(DT_ERR_SYSTEM, "prefetch on %s: an event: ", d->name);
        if (!(p->slots[i].x_dev = d->alloc(p->x_bytes)) || !(p->slots[i].y_dev = d->alloc(p->y_bytes)))
            return dt__wrap(DT_ERR_NOMEM, "prefetch on %s: a batch of %zu + %zu bytes: ", d->name, p->x_bytes,
                            p->y_bytes);
    }
    return DT_OK;
}

dt_status dt_prefetch_start_on(const struct dt_compute_ops *device, dt_sampler *s, int64_t batch_size,
                               int64_t x_per_sample, int64_t y_per_sample, dt_batch_fill_fn fn, void *user,
                               dt_prefetcher **out)
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
    p->dev = device && !device->host ? device : NULL;
    p->x_bytes = (size_t)(batch_size * x_per_sample) * sizeof(float);
    p->y_bytes = (size_t)(batch_size * y_per_sample) * sizeof(int32_t);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->idx = malloc((size_t)batch_size * sizeof *p->idx);
    bool ok = p->idx != NULL;
    for (int i = 0; i < 2; i++) { /* a device's copies read page-locked memory: truly asynchronous */
        p->slots[i].x = p->dev ? p->dev->host_alloc(p->x_bytes) : malloc(p->x_bytes);
        p->slots[i].y = p->dev ? p->dev->host_alloc(p->y_bytes) : malloc(p->y_bytes);
        ok = ok && p->slots[i].x && p->slots[i].y;
    }
    dt_status st = ok ? DT_OK : dt__fail(DT_ERR_NOMEM, "out of memory for two batches of %lld samples", (long long)batch_size);
    if (st == DT_OK && p->dev)
        st = device_slots(p);
    if (st == DT_OK && pthread_create(&p->thread, NULL, producer, p) != 0)
        st = dt__fail(DT_ERR_SYSTEM, "cannot start the prefetch thread");
    p->started = st == DT_OK;
    if (st != DT_OK) {
        char why[DT__ERROR_LEN];
        dt__error_save(why);
        dt_prefetch_stop(p);
        return dt__error_restore(st, why);
    }
    *out = p;
    return DT_OK;
}

dt_status dt_prefetch_start(dt_sampler *s, int64_t batch_size, int64_t x_per_sample, int64_t y_per_sample,
                            dt_batch_fill_fn fn, void *user, dt_prefetcher **out)
{
    return dt_prefetch_start_on(NULL, s, batch_size, x_per_sample, y_per_sample, fn, user, out);
}

const dt_batch *dt_prefetch_next(dt_prefetcher *p)
{
    int64_t t0 = dt__trace_begin(); /* the timeline's "data wait": how long training waited for this batch */
    pthread_mutex_lock(&p->mu);
    int prev = 1 - p->next_take;
    dt_status st = DT_OK;
    if (p->state[prev] == IN_USE) { /* the batch handed out last time is free again */
        if (p->dev) { /* once the compute stream's work so far, which may read it, is done */
            st = p->dev->event_record(p->consumed[prev], NULL);
            p->consumed_set[prev] = st == DT_OK;
        }
        p->state[prev] = FREE;
        pthread_cond_broadcast(&p->cv);
    }
    int slot = p->next_take;
    while (p->state[slot] != READY)
        pthread_cond_wait(&p->cv, &p->mu);
    p->state[slot] = IN_USE;
    p->next_take = 1 - slot;
    dt_status up = p->err[slot];
    pthread_mutex_unlock(&p->mu);
    if (up != DT_OK) {
        (void)dt__error_restore(up, p->why[slot]);
        return NULL;
    }
    if (st == DT_OK && p->dev) /* the compute stream's next work waits for this batch's upload */
        st = p->dev->stream_wait_event(NULL, p->uploaded[slot]);
    if (st != DT_OK)
        return NULL;
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
    const dt_compute_ops *d = p->dev;
    if (d && p->copy_stream)
        d->stream_destroy(p->copy_stream); /* waits for its copies */
    for (int i = 0; i < 2; i++) {
        if (d) {
            d->free(p->slots[i].x_dev); /* waits for the compute stream's reads */
            d->free(p->slots[i].y_dev);
            d->event_destroy(p->uploaded[i]);
            d->event_destroy(p->consumed[i]);
        }
        (d ? d->host_free : free)(p->slots[i].x);
        (d ? d->host_free : free)(p->slots[i].y);
    }
    free(p->idx);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}
