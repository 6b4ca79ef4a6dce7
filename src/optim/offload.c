/* The optimizer state's file and its I/O thread (see offload.h).  Two slots
 * of one window each; jobs (read a window into a slot, write a slot back)
 * run in order on one thread, so a slot's write-back always precedes the
 * read that reuses it. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "optim/offload.h"

typedef struct {
    float *buf[DT__OFFLOAD_MAX_ARRAYS];
    int64_t window; /* -1: none */
    int pending;    /* jobs queued or running on it */
    bool dirty;     /* updated since read: written back before the slot is reused, or at a flush */
} slot;

typedef struct job {
    struct job *next;
    bool write;
    int slot;
    int64_t window;
} job;

struct dt__offload {
    const char *what; /* for messages: "optimizer offload", ... */
    int fd, arrays;
    int64_t numel, windows;
    char path[1024];
    slot slots[2];
    int last; /* the slot acquired last */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    job *head, *tail;
    bool stop;
    dt_status error; /* the first I/O failure, reported by every later call */
    char why[1400];
    uint64_t read, written;
};

static int64_t window_len(const dt__offload *f, int64_t w)
{
    int64_t left = f->numel - w * DT__OFFLOAD_WINDOW;
    return left < DT__OFFLOAD_WINDOW ? left : DT__OFFLOAD_WINDOW;
}

/* pread / pwrite all of it. */
static int io_all(int fd, bool write, float *buf, int64_t floats, int64_t at_float)
{
    char *p = (char *)buf;
    size_t left = (size_t)floats * sizeof(float);
    off_t at = (off_t)at_float * (off_t)sizeof(float);
    while (left) {
        ssize_t n = write ? pwrite(fd, p, left, at) : pread(fd, p, left, at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? errno : EIO;
        p += n;
        left -= (size_t)n;
        at += n;
    }
    return 0;
}

static void *io_main(void *arg)
{
    dt__offload *f = arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->head && !f->stop)
            pthread_cond_wait(&f->work, &f->mu);
        if (!f->head)
            break;
        job *j = f->head;
        f->head = j->next;
        if (!f->head)
            f->tail = NULL;
        pthread_mutex_unlock(&f->mu);
        slot *s = &f->slots[j->slot];
        int64_t len = window_len(f, j->window), err = 0;
        for (int a = 0; a < f->arrays && !err; a++)
            err = io_all(f->fd, j->write, s->buf[a], len, (int64_t)a * f->numel + j->window * DT__OFFLOAD_WINDOW);
        pthread_mutex_lock(&f->mu);
        if (err && f->error == DT_OK) {
            f->error = DT_ERR_SYSTEM;
            snprintf(f->why, sizeof f->why, "%s: %s %s: %s", f->what, j->write ? "writing" : "reading", f->path,
                     strerror((int)err));
        }
        *(j->write ? &f->written : &f->read) += (uint64_t)(len * f->arrays) * sizeof(float);
        s->pending--;
        free(j);
        pthread_cond_broadcast(&f->done);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* Queue a job on slot s (under mu). */
static dt_status enqueue(dt__offload *f, int s, int64_t w, bool write)
{
    job *j = calloc(1, sizeof *j);
    if (!j)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    *j = (job){NULL, write, s, w};
    if (f->tail)
        f->tail->next = j;
    else
        f->head = j;
    f->tail = j;
    f->slots[s].pending++;
    pthread_cond_signal(&f->work);
    return DT_OK;
}

/* Slot k to hold window w: its own window written back first when updated
 * (the same thread, in order, so the read comes after), then the read. */
static dt_status load(dt__offload *f, int k, int64_t w)
{
    slot *sl = &f->slots[k];
    if (sl->dirty) {
        sl->dirty = false;
        DT_CHECK(enqueue(f, k, sl->window, true));
    }
    sl->window = w;
    return enqueue(f, k, w, false);
}

static dt_status failed(dt__offload *f)
{
    return f->error == DT_OK ? DT_OK : dt__fail(f->error, "%s", f->why);
}

dt_status dt__offload_open(const char *dir, const char *what, int arrays, int64_t numel, const float *init, dt__offload **out)
{
    if (arrays < 1 || arrays > DT__OFFLOAD_MAX_ARRAYS || numel < 0)
        return dt__fail(DT_ERR_INVALID, "%s: %d arrays of %lld", what, arrays, (long long)numel);
    dt__offload *f = calloc(1, sizeof *f);
    if (!f)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    f->what = what;
    f->arrays = arrays;
    f->numel = numel;
    f->windows = (numel + DT__OFFLOAD_WINDOW - 1) / DT__OFFLOAD_WINDOW;
    f->fd = -1;
    snprintf(f->path, sizeof f->path, "%s/dtrain-offload-XXXXXX", dir && *dir ? dir : "/var/tmp");
    dt_status s = DT_OK;
    if ((f->fd = mkstemp(f->path)) < 0)
        s = dt__fail_errno(DT_ERR_SYSTEM, "%s: creating a file in %s", what, dir && *dir ? dir : "/var/tmp");
    else
        unlink(f->path); /* gone with the process */
    for (int k = 0; s == DT_OK && k < 2; k++) {
        f->slots[k].window = -1;
        for (int a = 0; a < arrays && s == DT_OK; a++)
            if (!(f->slots[k].buf[a] = malloc((size_t)DT__OFFLOAD_WINDOW * sizeof(float))))
                s = dt__fail(DT_ERR_NOMEM, "out of memory for the offload windows");
    }
    if (s == DT_OK && numel > 0) { /* the initial state; zeros where none is given */
        int err = 0;
        if (init)
            err = io_all(f->fd, true, (float *)init, (int64_t)arrays * numel, 0);
        else if (ftruncate(f->fd, (off_t)arrays * (off_t)numel * (off_t)sizeof(float)) != 0)
            err = errno;
        if (err)
            s = dt__fail(DT_ERR_SYSTEM, "%s: writing %s: %s", what, f->path, strerror(err));
        f->written += init ? (uint64_t)(arrays * numel) * sizeof(float) : 0;
    }
    if (s == DT_OK) {
        pthread_mutex_init(&f->mu, NULL);
        pthread_cond_init(&f->work, NULL);
        pthread_cond_init(&f->done, NULL);
        if (pthread_create(&f->thread, NULL, io_main, f) != 0) {
            pthread_mutex_destroy(&f->mu);
            pthread_cond_destroy(&f->work);
            pthread_cond_destroy(&f->done);
            s = dt__fail(DT_ERR_SYSTEM, "%s: cannot start its I/O thread", what);
        }
    }
    if (s != DT_OK) {
        if (f->fd >= 0)
            close(f->fd);
        for (int k = 0; k < 2; k++)
            for (int a = 0; a < DT__OFFLOAD_MAX_ARRAYS; a++)
                free(f->slots[k].buf[a]);
        free(f);
        return s;
    }
    *out = f;
    return DT_OK;
}

dt_status dt__offload_acquire(dt__offload *f, int64_t w, float **arrays, int64_t *count)
{
    if (w < 0 || w >= f->windows)
        return dt__fail(DT_ERR_INVALID, "%s: window %lld of %lld", f->what, (long long)w, (long long)f->windows);
    pthread_mutex_lock(&f->mu);
    dt_status s = DT_OK;
    int k = f->slots[0].window == w ? 0 : f->slots[1].window == w ? 1 : -1;
    if (k < 0) { /* not there nor on its way: read it into the slot not used last */
        k = 1 - f->last;
        s = load(f, k, w);
    }
    while (s == DT_OK && f->slots[k].pending > 0)
        pthread_cond_wait(&f->done, &f->mu);
    f->last = k;
    if (s == DT_OK && (s = failed(f)) == DT_OK && w + 1 < f->windows && f->slots[1 - k].window != w + 1)
        s = load(f, 1 - k, w + 1); /* the next one while this one computes */
    pthread_mutex_unlock(&f->mu);
    for (int a = 0; a < f->arrays; a++)
        arrays[a] = f->slots[k].buf[a];
    *count = window_len(f, w);
    return s;
}

dt_status dt__offload_release(dt__offload *f, int64_t w)
{
    pthread_mutex_lock(&f->mu);
    int k = f->slots[0].window == w ? 0 : f->slots[1].window == w ? 1 : -1;
    if (k >= 0)
        f->slots[k].dirty = true;
    pthread_mutex_unlock(&f->mu);
    return k >= 0 ? DT_OK : dt__fail(DT_ERR_INVALID, "%s: window %lld released but not held", f->what, (long long)w);
}

dt_status dt__offload_flush(dt__offload *f)
{
    pthread_mutex_lock(&f->mu);
    dt_status s = DT_OK;
    for (int k = 0; k < 2 && s == DT_OK; k++)
        if (f->slots[k].dirty) {
            f->slots[k].dirty = false;
            s = enqueue(f, k, f->slots[k].window, true);
        }
    while (f->slots[0].pending > 0 || f->slots[1].pending > 0)
        pthread_cond_wait(&f->done, &f->mu);
    s = s != DT_OK ? s : failed(f);
    pthread_mutex_unlock(&f->mu);
    return s;
}

static dt_status whole(dt__offload *f, float *data, bool write)
{
    DT_CHECK(dt__offload_flush(f));
    pthread_mutex_lock(&f->mu);
    for (int k = 0; k < 2; k++) /* the windows in memory may be stale after a write of the whole */
        f->slots[k].window = write ? -1 : f->slots[k].window;
    int err = io_all(f->fd, write, data, (int64_t)f->arrays * f->numel, 0);
    *(write ? &f->written : &f->read) += (uint64_t)(f->arrays * f->numel) * sizeof(float);
    pthread_mutex_unlock(&f->mu);
    return err ? dt__fail(DT_ERR_SYSTEM, "%s: %s %s: %s", f->what, write ? "writing" : "reading", f->path,
                          strerror(err))
               : DT_OK;
}

dt_status dt__offload_read_all(dt__offload *f, float *out) { return whole(f, out, false); }

dt_status dt__offload_read_range(dt__offload *f, int a, int64_t at, int64_t n, float *out)
{
    if (a < 0 || a >= f->arrays || at < 0 || n < 0 || at + n > f->numel)
        return dt__fail(DT_ERR_INVALID, "%s: elements [%lld, %lld) of array %d: outside %d arrays of %lld",
                        f->what, (long long)at, (long long)(at + n), a, f->arrays, (long long)f->numel);
    DT_CHECK(dt__offload_flush(f));
    int err = io_all(f->fd, false, out, n, (int64_t)a * f->numel + at); /* pread: beside the I/O thread */
    pthread_mutex_lock(&f->mu);
    f->read += (uint64_t)n * sizeof(float);
    pthread_mutex_unlock(&f->mu);
    return err ? dt__fail(DT_ERR_SYSTEM, "%s: reading %s: %s", f->what, f->path, strerror(err)) : DT_OK;
}
dt_status dt__offload_write_all(dt__offload *f, const float *in) { return whole(f, (float *)in, true); }

void dt__offload_io(const dt__offload *f, uint64_t *read, uint64_t *written)
{
    pthread_mutex_lock((pthread_mutex_t *)&f->mu);
    *read = f->read;
    *written = f->written;
    pthread_mutex_unlock((pthread_mutex_t *)&f->mu);
}

void dt__offload_close(dt__offload *f)
{
    if (!f)
        return;
    dt__offload_flush(f);
    pthread_mutex_lock(&f->mu);
    f->stop = true;
    pthread_cond_signal(&f->work);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->work);
    pthread_cond_destroy(&f->done);
    close(f->fd);
    for (int k = 0; k < 2; k++)
        for (int a = 0; a < DT__OFFLOAD_MAX_ARRAYS; a++)
            free(f->slots[k].buf[a]);
    free(f);
}
