/* Wake the supervision the moment another node ends the generation, instead
 * of at its next look at the store (every 0.2 s): a thread with a store
 * connection of its own waits on dtrun/g<G>/why, which the node that ends
 * the generation writes (rounds.c), and wakes the supervise loop when it
 * appears.  The periodic look stays, for what this cannot see (the store
 * silent, a node waiting to join an elastic job).
 *
 * The thread is detached: when the generation ends otherwise (every rank
 * exited 0) it may still be inside a wait of at most WAIT_S, and nobody
 * waits for it; the context is freed by whichever of the two lets go last. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrun.h"

#define WAIT_S 0.5 /* one wait on the key; the stop flag is looked at between waits */

struct dtrun_end_watch {
    int refs; /* atomic: the thread's and the owner's */
    int stop, seen; /* atomic */
    char host[256], token[256], key[96];
    int port;
};

static void release(dtrun_end_watch *w)
{
    if (__atomic_sub_fetch(&w->refs, 1, __ATOMIC_ACQ_REL) == 0)
        free(w);
}

static void *watch_main(void *arg)
{
    dtrun_end_watch *w = arg;
    dt_store_client *st = NULL;
    if (dt_store_connect(w->host, w->port, w->token, 2.0, &st) == DT_OK) {
        dt_store_set_io_timeout(st, 2.0);
        while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
            void *v = NULL;
            size_t n = 0;
            dt_status s = dt_store_get(st, w->key, WAIT_S, &v, &n);
            free(v);
            if (s == DT_OK) {
                __atomic_store_n(&w->seen, 1, __ATOMIC_RELEASE);
                dt_phase_mark("dtrun saw %s", w->key);
                dtrun_supervise_wake();
                break;
            }
            if (s != DT_ERR_TIMEOUT)
                break; /* the periodic look reports a silent store */
        }
        dt_store_close(st);
    }
    release(w);
    return NULL;
}

dtrun_end_watch *dtrun_end_watch_start(const dtrun_opts *o, int generation)
{
    dtrun_end_watch *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->refs = 2;
    snprintf(w->host, sizeof w->host, "%s", o->master_host);
    snprintf(w->token, sizeof w->token, "%s", o->token);
    snprintf(w->key, sizeof w->key, "dtrun/g%d/why", generation);
    w->port = o->master_port;
    pthread_t th;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    bool started = pthread_create(&th, &a, watch_main, w) == 0;
    pthread_attr_destroy(&a);
    if (!started) { /* the periodic look alone */
        free(w);
        return NULL;
    }
    return w;
}

bool dtrun_end_watch_seen(const dtrun_end_watch *w)
{
    return w && __atomic_load_n(&w->seen, __ATOMIC_ACQUIRE);
}

void dtrun_end_watch_stop(dtrun_end_watch *w)
{
    if (!w)
        return;
    __atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
    release(w);
}
