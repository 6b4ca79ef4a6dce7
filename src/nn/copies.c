/* The copies' turns (nn/copies.h): one mutex and condition variable guard
 * whose turn it is; threads are started once per runner and park between
 * runs.  A run costs two wake-ups per exchange (the next copy's, then this
 * one's), tens of microseconds against exchanges of milliseconds. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/trace.h"
#include "nn/copies.h"

typedef struct {
    dt__copies *r;
    int k;
} copy_thread;

struct dt__copies {
    int max, started;
    pthread_t *threads;
    copy_thread *args;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* the run (mu) */
    unsigned generation; /* a new run; the threads wait for it to change */
    bool stop;
    int n, turn, running; /* copies in the run, whose turn (-1: none), not yet finished */
    bool *done;
    dt__copy_fn fn;
    void *arg;
    dt_status failed; /* the first failure in turn order */
    int failed_copy;
    char error[DT__ERROR_LEN];
};

static _Thread_local copy_thread *self; /* this thread's copy, NULL elsewhere */
static _Thread_local int64_t turn_began;  /* the timeline's span of this copy's turn */

/* The timeline shows each turn a copy holds as a span "copy k" (category
 * copy) on the copy's thread: the gaps between them are its exchanges. */
static void turn_begin(void) { turn_began = dt__trace_begin(); }

static void turn_end(int k)
{
    if (turn_began) {
        char name[16];
        snprintf(name, sizeof name, "copy %d", k);
        dt__trace_end("copy", name, turn_began, "\"copy\":%d", k);
    }
    turn_began = 0;
}

bool dt__copies_inside(void) { return self != NULL; }

/* The next copy after k not finished, in round-robin order (mu held). */
static void pass_turn(dt__copies *r, int k)
{
    r->turn = -1;
    for (int i = 1; i <= r->n; i++) {
        int j = (k + i) % r->n;
        if (!r->done[j]) {
            r->turn = j;
            break;
        }
    }
    pthread_cond_broadcast(&r->cv);
}

static void *copy_main(void *p)
{
    copy_thread *me = p;
    dt__copies *r = me->r;
    char name[32];
    snprintf(name, sizeof name, "copy %d", me->k);
    dt__trace_thread_name(name);
    unsigned seen = 0;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (r->generation == seen && !r->stop)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->stop)
            break;
        seen = r->generation;
        if (me->k >= r->n)
            continue;
        while (r->turn != me->k)
            pthread_cond_wait(&r->cv, &r->mu);
        dt_status s = DT_OK;
        if (r->failed == DT_OK) {
            pthread_mutex_unlock(&r->mu);
            self = me;
            turn_begin();
            s = r->fn(r->arg, me->k);
            turn_end(me->k);
            self = NULL;
            pthread_mutex_lock(&r->mu);
        }
        if (s != DT_OK && r->failed == DT_OK) {
            r->failed = s;
            r->failed_copy = me->k;
            snprintf(r->error, sizeof r->error, "%s", dt_last_error());
        }
        r->done[me->k] = true;
        r->running--;
        pass_turn(r, me->k);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

dt_status dt__copies_create(int max, dt__copies **out)
{
    if (max < 1 || max > DT_ARENA_COMPANIONS)
        return dt__fail(DT_ERR_INVALID, "copies: %d copies (1..%d)", max, DT_ARENA_COMPANIONS);
    dt__copies *r = calloc(1, sizeof *r);
    if (!r || !(r->threads = calloc((size_t)max, sizeof *r->threads)) ||
        !(r->args = calloc((size_t)max, sizeof *r->args)) || !(r->done = calloc((size_t)max, sizeof *r->done))) {
        if (r) {
            free(r->threads);
            free(r->args);
        }
        free(r);
        return dt__fail(DT_ERR_NOMEM, "copies: out of memory");
    }
    r->max = max;
    r->turn = -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    *out = r;
    return DT_OK;
}

void dt__copies_destroy(dt__copies *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    for (int k = 0; k < r->started; k++)
        pthread_join(r->threads[k], NULL);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r->threads);
    free(r->args);
    free(r->done);
    free(r);
}

dt_status dt__copies_run(dt__copies *r, int n, dt__copy_fn fn, void *arg)
{
    if (n < 1 || n > r->max)
        return dt__fail(DT_ERR_INVALID, "copies: a run of %d copies on a runner of %d", n, r->max);
    if (self)
        return dt__fail(DT_ERR_INVALID, "copies: a run from inside copy %d (copies do not nest)", self->k);
    pthread_mutex_lock(&r->mu);
    while (r->started < n) {
        copy_thread *c = &r->args[r->started];
        *c = (copy_thread){r, r->started};
        if (pthread_create(&r->threads[r->started], NULL, copy_main, c) != 0) {
            pthread_mutex_unlock(&r->mu);
            return dt__fail(DT_ERR_NOMEM, "copies: cannot start the thread of copy %d", r->started);
        }
        r->started++;
    }
    r->n = n;
    r->fn = fn;
    r->arg = arg;
    r->failed = DT_OK;
    r->running = n;
    memset(r->done, 0, (size_t)r->max * sizeof *r->done);
    r->turn = 0;
    r->generation++;
    pthread_cond_broadcast(&r->cv);
    while (r->running > 0)
        pthread_cond_wait(&r->cv, &r->mu);
    dt_status s = r->failed;
    int who = r->failed_copy;
    pthread_mutex_unlock(&r->mu);
    if (s != DT_OK)
        return dt__fail(s, "copy %d of %d: %s", who, n, r->error);
    return DT_OK;
}

dt_status dt__copies_await(dt_status (*wait)(void *user, void *req), void *user, void *req)
{
    copy_thread *me = self;
    if (!me)
        return wait(user, req);
    dt__copies *r = me->r;
    turn_end(me->k);
    pthread_mutex_lock(&r->mu);
    pass_turn(r, me->k);
    pthread_mutex_unlock(&r->mu);
    dt_status s = wait(user, req);
    pthread_mutex_lock(&r->mu);
    while (r->turn != me->k)
        pthread_cond_wait(&r->cv, &r->mu);
    bool stopped = r->failed != DT_OK;
    int who = r->failed_copy;
    pthread_mutex_unlock(&r->mu);
    turn_begin();
    if (s != DT_OK)
        return s;
    return stopped ? dt__fail(DT_ERR_INVALID, "stopped: copy %d failed", who) : DT_OK;
}
