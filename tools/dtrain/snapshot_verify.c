/* A restart's memory snapshot verified while the rank joins the job: the
 * check of the newest snapshot in this node's directory (its files' CRC-32s,
 * the manifest's configuration, a model built from it for the shapes; 0.5 s
 * of a gpt-mini restart on a loaded host) needs nothing from the other
 * ranks, so the node's verifier (local rank 0) runs it on a thread started
 * before dt_comm_init_env, and dtrain_snapshot_choose takes its result
 * after (snapshot.c).  Without the thread (not a restart, not the
 * verifier, no memory) the check runs there as before. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_run.h"

struct snapshot_verify {
    pthread_t thread;
    char root[1024];
    int64_t train_samples;
    int64_t step; /* the result: -1 none */
    dt_ckpt_progress pr;
};

static void *verify_main(void *arg)
{
    snapshot_verify *v = arg;
    char dir[2048];
    dtrain_config saved;
    v->step = -1;
    if (dt_ckpt_newest(v->root) >= 0 &&
        dtrain_checkpoint_open(v->root, v->train_samples, dir, sizeof dir, &saved, &v->pr) == DT_OK)
        v->step = v->pr.step;
    dtrain_phase("snapshot verified (its thread)");
    return NULL;
}

void dtrain_snapshot_verify_start(train_run *t, const dtrain_config *c)
{
    const char *root = getenv("DT_SNAPSHOT_DIR"), *restart = getenv("DT_RESTART"), *lr = getenv("DT_LOCAL_RANK");
    if (c->memory_checkpoint_interval <= 0 || !root || !*root || !restart || atoi(restart) <= 0 ||
        (lr && *lr && atoi(lr) != 0))
        return;
    if (c->zero_stage > 0 && c->tp <= 1 && c->pp <= 1 && c->servers == 0)
        return; /* its shards may first be put together from other nodes (snapshot_assemble.c) */
    snapshot_verify *v = calloc(1, sizeof *v);
    if (!v)
        return; /* verified later, on the main thread */
    snprintf(v->root, sizeof v->root, "%s", root);
    v->train_samples = t->d.train_samples;
    if (pthread_create(&v->thread, NULL, verify_main, v) != 0) {
        free(v);
        return;
    }
    t->snap_verify = v;
}

bool dtrain_snapshot_verify_take(train_run *t, int64_t *step, dt_ckpt_progress *pr)
{
    snapshot_verify *v = t->snap_verify;
    if (!v)
        return false;
    pthread_join(v->thread, NULL);
    *step = v->step;
    if (v->step >= 0)
        *pr = v->pr;
    free(v);
    t->snap_verify = NULL;
    return true;
}
