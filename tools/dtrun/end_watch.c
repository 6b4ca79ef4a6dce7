/* Wake the supervision the moment another node ends the generation, instead
 * of at its next look at the store (every 0.2 s): a thread with a store
 * connection of its own waits on dtrun/g<G>/why, which the node that ends
 * the generation writes (rounds.c), and wakes the supervise loop when it
 * appears.  The periodic look stays, for what this cannot see (the store
 * silent, a node waiting to join an elastic job).
 *
 * It is joined once the generation's end is known (rounds.c): by then the
 * key is written, except when every rank exited 0, where the join waits for
 * the end of one wait of at most WAIT_S (joined, so that no thread is in
 * the store client, or holds its TLS state, when dtrun exits). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrun.h"

#define WAIT_S 0.25 /* one wait on the key; the stop flag is looked at between waits */

struct dtrun_end_watch {
    pthread_t thread;
    int stop, seen; /* atomic */
    char host[256], token[256], key[96];
    int port;
};

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
    return NULL;
}

dtrun_end_watch *dtrun_end_watch_start(const dtrun_opts *o, int generation)
{
    dtrun_end_watch *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    snprintf(w->host, sizeof w->host, "%s", o->master_host);
    snprintf(w->token, sizeof w->token, "%s", o->token);
    snprintf(w->key, sizeof w->key, "dtrun/g%d/why", generation);
    w->port = o->master_port;
    if (pthread_create(&w->thread, NULL, watch_main, w) != 0) { /* the periodic look alone */
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
    pthread_join(w->thread, NULL);
    free(w);
}
