/* The background checkpoint writer: the training thread copies the state at
 * a step boundary (a memcpy, milliseconds) and goes on; this thread writes
 * the copy, prunes old checkpoints and reports.  One write is in flight at a
 * time: a submit while the previous one still writes waits for it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrain_cli.h"

struct dtrain_ckpt_writer {
    const dtrain_config *c;
    dt_params *p;
    dt_optimizer *o;
    float *values, *m, *v; /* the snapshot */
    dtrain_progress pr;
    char label[64];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool pending, busy, stop, any_failed;
    int64_t last_good; /* step of the newest checkpoint written, -1: none */
    char last_good_dir[2048];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void write_one(dtrain_ckpt_writer *w)
{
    dtrain_state st = {w->values, w->m, w->v};
    char where[2048];
    double t0 = now_s();
    if (dtrain_checkpoint_save(w->c->checkpoint_dir, w->c, w->p, &st, &w->pr, where, sizeof where) == DT_OK) {
        dtrain_checkpoint_prune(w->c->checkpoint_dir, (int)w->c->checkpoint_keep);
        dtrain_progress_line("checkpoint %s%s (%.2f s in the background)\n", where, w->label, now_s() - t0);
        w->last_good = w->pr.step;
        snprintf(w->last_good_dir, sizeof w->last_good_dir, "%s", where);
        return;
    }
    w->any_failed = true;
    if (w->last_good >= 0)
        fprintf(stderr, "dtrain: checkpoint at step %lld failed (above); training continues, the checkpoint of step %lld "
                        "is kept (%s)\n", (long long)w->pr.step, (long long)w->last_good, w->last_good_dir);
    else
        fprintf(stderr, "dtrain: checkpoint at step %lld failed (above); training continues\n", (long long)w->pr.step);
}

static void *writer_main(void *arg)
{
    dtrain_ckpt_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->pending && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->pending)
            break;
        w->pending = false;
        w->busy = true;
        pthread_mutex_unlock(&w->mu);
        write_one(w);
        pthread_mutex_lock(&w->mu);
        w->busy = false;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void writer_free(dtrain_ckpt_writer *w)
{
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->values);
    free(w->m);
    free(w->v);
    free(w);
}

dt_status dtrain_ckpt_writer_start(const dtrain_config *c, dt_params *p, dt_optimizer *o, int64_t kept_step,
                                   const char *kept_dir, dtrain_ckpt_writer **out)
{
    dtrain_ckpt_writer *w = calloc(1, sizeof *w);
    dtrain_state live = dtrain_state_live(p, o);
    size_t bytes = (size_t)dt_params_numel(p) * sizeof(float);
    if (w) {
        w->values = malloc(bytes);
        w->m = live.m ? malloc(bytes) : NULL;
        w->v = live.v ? malloc(bytes) : NULL;
    }
    if (!w || !w->values || (live.m && !w->m) || (live.v && !w->v)) {
        if (w) {
            free(w->values);
            free(w->m);
            free(w->v);
        }
        free(w);
        fprintf(stderr, "dtrain: out of memory for the checkpoint snapshot (%zu bytes)\n", 3 * bytes);
        return DT_ERR_NOMEM;
    }
    w->c = c;
    w->p = p;
    w->o = o;
    w->last_good = kept_step;
    snprintf(w->last_good_dir, sizeof w->last_good_dir, "%s", kept_dir ? kept_dir : "");
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
        fprintf(stderr, "dtrain: cannot start the checkpoint writer thread\n");
        writer_free(w);
        return DT_ERR_SYSTEM;
    }
    *out = w;
    return DT_OK;
}

dt_status dtrain_ckpt_writer_submit(dtrain_ckpt_writer *w, const dtrain_progress *pr, const char *label,
                                    double *stall_s)
{
    double t0 = now_s();
    pthread_mutex_lock(&w->mu);
    while (w->pending || w->busy)
        pthread_cond_wait(&w->cv, &w->mu);
    dtrain_state live = dtrain_state_live(w->p, w->o);
    size_t bytes = (size_t)dt_params_numel(w->p) * sizeof(float);
    memcpy(w->values, live.values, bytes);
    if (w->m)
        memcpy(w->m, live.m, bytes);
    if (w->v)
        memcpy(w->v, live.v, bytes);
    w->pr = *pr;
    snprintf(w->label, sizeof w->label, "%s", label ? label : "");
    w->pending = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (stall_s)
        *stall_s = now_s() - t0;
    return DT_OK;
}

bool dtrain_ckpt_writer_flush(dtrain_ckpt_writer *w)
{
    pthread_mutex_lock(&w->mu);
    while (w->pending || w->busy)
        pthread_cond_wait(&w->cv, &w->mu);
    bool ok = !w->any_failed;
    pthread_mutex_unlock(&w->mu);
    return ok;
}

int64_t dtrain_ckpt_writer_last_good(dtrain_ckpt_writer *w, char *dir, size_t len)
{
    pthread_mutex_lock(&w->mu);
    while (w->pending || w->busy)
        pthread_cond_wait(&w->cv, &w->mu);
    int64_t step = w->last_good;
    snprintf(dir, len, "%s", w->last_good_dir);
    pthread_mutex_unlock(&w->mu);
    return step;
}

void dtrain_ckpt_writer_stop(dtrain_ckpt_writer *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL); /* a pending write still completes */
    writer_free(w);
}
