/* Multi-node join through the rendezvous store: every dtrun claims its node
 * rank, publishes "nproc hostname" and waits for the others, so each knows
 * the world size and where its ranks start. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dtrun.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void list_missing(const int *nproc, int n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used + 16 < len; i++)
        if (nproc[i] == 0)
            used += (size_t)snprintf(buf + used, len - used, "%s%d", used ? ", " : "", i);
}

dt_status dtrun_join(const dtrun_opts *o, dt_store_client *store, dtrun_layout *out)
{
    char key[64], val[320], host[256] = "?";
    gethostname(host, sizeof host - 1);
    int64_t claims = 0;
    snprintf(key, sizeof key, "dtrun/claim/%d", o->node_rank);
    dt_status s = dt_store_add(store, key, 1, &claims);
    if (s != DT_OK)
        return s;
    if (claims > 1) {
        fprintf(stderr, "dtrun: node rank %d joined twice: another dtrun already runs with --node-rank %d\n",
                o->node_rank, o->node_rank);
        return DT_ERR_INVALID;
    }
    snprintf(key, sizeof key, "dtrun/node/%d", o->node_rank);
    snprintf(val, sizeof val, "%d %s", o->nproc, host);
    if ((s = dt_store_set(store, key, val, strlen(val) + 1)) != DT_OK)
        return s;
    int *nproc = calloc((size_t)o->nnodes, sizeof *nproc);
    if (!nproc)
        return DT_ERR_NOMEM;
    double start = now_s(), last_note = start;
    int joined = 0;
    while (joined < o->nnodes && now_s() - start < o->join_timeout) {
        for (int i = 0; i < o->nnodes; i++) {
            if (nproc[i])
                continue;
            void *v = NULL;
            size_t len = 0;
            snprintf(key, sizeof key, "dtrun/node/%d", i);
            s = dt_store_get(store, key, 0.2, &v, &len);
            if (s == DT_OK) {
                int np = atoi(v);
                nproc[i] = np > 0 ? np : 1;
                joined++;
                free(v);
            } else if (s != DT_ERR_TIMEOUT) {
                free(nproc);
                return s;
            }
        }
        if (joined < o->nnodes && now_s() - last_note > 10) {
            char missing[512];
            list_missing(nproc, o->nnodes, missing, sizeof missing);
            fprintf(stderr, "dtrun: node %d: %d of %d nodes joined; waiting for node(s) %s\n", o->node_rank,
                    joined, o->nnodes, missing);
            last_note = now_s();
        }
    }
    if (joined < o->nnodes) {
        char missing[512];
        list_missing(nproc, o->nnodes, missing, sizeof missing);
        fprintf(stderr, "dtrun: node(s) %s of %d did not join within %.0f s (--join-timeout); giving up\n", missing,
                o->nnodes, o->join_timeout);
        free(nproc);
        return DT_ERR_TIMEOUT;
    }
    out->world_size = 0;
    out->first_rank = 0;
    for (int i = 0; i < o->nnodes; i++) {
        if (i < o->node_rank)
            out->first_rank += nproc[i];
        out->world_size += nproc[i];
    }
    free(nproc);
    return DT_OK;
}

void dtrun_finish(const dtrun_opts *o, dt_store_client *store, bool ok)
{
    if (o->nnodes == 1 || !store)
        return;
    /* The store may be unreachable (a failed node, a dead link): try briefly. */
    dt_store_set_io_timeout(store, ok ? 5 : 1);
    int64_t done = 0;
    if (dt_store_add(store, "dtrun/done", 1, &done) != DT_OK || o->node_rank != 0)
        return;
    /* Node 0 serves the store: keep it up briefly so the other nodes can finish. */
    double start = now_s();
    while (done < o->nnodes && now_s() - start < 10) {
        nanosleep(&(struct timespec){0, 100000000L}, NULL);
        if (dt_store_add(store, "dtrun/done", 0, &done) != DT_OK)
            return;
    }
}
