/* Membership through the rendezvous store, one generation at a time (the
 * first run is generation 0, each restart the next).  Every dtrun registers
 * "nproc hostname" under dtrun/g<G>/node/<node rank>; node 0 decides who
 * takes part and publishes dtrun/g<G>/members:
 *
 *   "run N id:nproc id:nproc ..."   the N nodes of this generation, in order
 *   "stop REASON"                    the job ends
 *
 * A node that registers after the decision is not in it: it joins the next
 * generation (and node 0, seeing it wait, starts that generation). */
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

/* Node 0: collect the registrations of generation g and publish the
 * decision; *decided gets it (caller frees; NULL on failure), so that node 0
 * need not read it back from the store (a round trip of the restart). */
static dt_status decide(const dtrun_opts *o, dt_store_client *store, int g, const char *stop_reason, char **decided)
{
    *decided = NULL;
    char key[96], *members = malloc(16 * (size_t)o->nnodes + 600);
    int *nproc = calloc((size_t)o->nnodes, sizeof *nproc);
    if (!members || !nproc) {
        free(members);
        free(nproc);
        return DT_ERR_NOMEM;
    }
    double start = now_s(), last_note = start;
    int joined = 0;
    dt_status s = DT_OK;
    bool elastic = o->nnodes_min < o->nnodes;
    while (!stop_reason && joined < o->nnodes) {
        /* The first missing node is waited for in the store (woken the
         * moment it registers; before, a look every 0.1 s), the others
         * only looked at: each node joins within milliseconds of the one
         * before, or not for a while. */
        bool looked = false;
        for (int i = 0; i < o->nnodes; i++) {
            if (nproc[i])
                continue;
            void *v = NULL;
            size_t len = 0;
            snprintf(key, sizeof key, "dtrun/g%d/node/%d", g, i);
            s = dt_store_get(store, key, looked ? 0 : 0.25, &v, &len);
            looked = true;
            if (s == DT_OK) {
                int np = atoi(v);
                nproc[i] = np > 0 ? np : 1;
                joined++;
                free(v);
            } else if (s != DT_ERR_TIMEOUT)
                goto out;
        }
        s = DT_OK;
        double waited = now_s() - start;
        if (joined >= o->nnodes || (elastic && joined >= o->nnodes_min && waited >= o->rejoin_timeout))
            break;
        char missing[512];
        if (waited >= o->join_timeout) {
            list_missing(nproc, o->nnodes, missing, sizeof missing);
            snprintf(members, 600, "stop node(s) %s of %d did not join within %.0f s (--join-timeout)%s", missing,
                     o->nnodes, o->join_timeout, elastic ? ", fewer than the minimum" : "");
            goto publish;
        }
        if (now_s() - last_note > 10) {
            list_missing(nproc, o->nnodes, missing, sizeof missing);
            fprintf(stderr, "dtrun: node 0: %d of %d nodes joined%s; waiting for node(s) %s\n", joined, o->nnodes,
                    g ? " the restart" : "", missing);
            last_note = now_s();
        }
    }
    if (stop_reason) {
        snprintf(members, 600, "stop %s", stop_reason);
    } else {
        size_t used = (size_t)sprintf(members, "run %d", joined);
        for (int i = 0; i < o->nnodes; i++)
            if (nproc[i])
                used += (size_t)sprintf(members + used, " %d:%d", i, nproc[i]);
        if (joined < o->nnodes) {
            char missing[512];
            list_missing(nproc, o->nnodes, missing, sizeof missing);
            fprintf(stderr, "dtrun: node(s) %s did not join within %.0f s (--rejoin-timeout); going on with %d of %d "
                            "nodes\n", missing, o->rejoin_timeout, joined, o->nnodes);
        }
    }
publish:
    dt_phase_mark("dtrun node 0 decided generation %d's members", g);
    snprintf(key, sizeof key, "dtrun/g%d/members", g);
    s = dt_store_set(store, key, members, strlen(members) + 1);
    if (s == DT_OK) {
        *decided = members;
        members = NULL;
    }
out:
    free(members);
    free(nproc);
    return s;
}

/* Parse "run N id:np ..." into this node's layout; false when not a member. */
static bool place(const char *members, int node, int g, dtrun_layout *out)
{
    const char *p = members + 3;
    char *end;
    out->nodes = (int)strtol(p, &end, 10);
    out->world_size = out->first_rank = 0;
    out->generation = g;
    bool found = false;
    for (p = end; *p == ' ';) {
        int id = (int)strtol(p + 1, &end, 10);
        if (*end != ':')
            break;
        int np = (int)strtol(end + 1, &end, 10);
        if (id == node)
            found = true;
        if (id < node)
            out->first_rank += np;
        out->world_size += np;
        p = end;
    }
    return found;
}

dtrun_join_result dtrun_join(const dtrun_opts *o, dt_store_client *store, int g, const char *stop_reason,
                             dtrun_layout *out, char *why, size_t why_len)
{
    char key[96], val[320], host[256] = "?";
    gethostname(host, sizeof host - 1);
    int64_t claims = 0;
    snprintf(key, sizeof key, "dtrun/g%d/claim/%d", g, o->node_rank);
    if (dt_store_add(store, key, 1, &claims) != DT_OK)
        goto lost;
    if (claims > 1) {
        snprintf(why, why_len, "node rank %d joined twice: another dtrun already runs with --node-rank %d",
                 o->node_rank, o->node_rank);
        return DTRUN_STOP;
    }
    snprintf(key, sizeof key, "dtrun/g%d/node/%d", g, o->node_rank);
    snprintf(val, sizeof val, "%d %s", o->nproc, host);
    if (dt_store_set(store, key, val, strlen(val) + 1) != DT_OK)
        goto lost;
    snprintf(key, sizeof key, "dtrun/g%d/registered", g); /* node 0 watches this for nodes waiting to join */
    if (dt_store_add(store, key, 1, &claims) != DT_OK)
        goto lost;
    dt_phase_mark("dtrun node %d registered for generation %d", o->node_rank, g);
    void *v = NULL;
    size_t len = 0;
    if (o->node_rank == 0) {
        char *decided;
        if (decide(o, store, g, stop_reason, &decided) != DT_OK)
            goto lost;
        v = decided;
        len = strlen(decided) + 1;
    }
    snprintf(key, sizeof key, "dtrun/g%d/members", g);
    /* Node 0 decides within its join timeout; a late node may wait for the
     * whole of the current generation, so it waits without limit. */
    while (!v) {
        void *got = NULL;
        dt_status s = dt_store_get(store, key, 1.0, &got, &len);
        if (s == DT_OK)
            v = got;
        else if (s != DT_ERR_TIMEOUT)
            goto lost;
    }
    dtrun_join_result r;
    const char *m = v;
    if (len < 5 || m[len - 1] != '\0') {
        snprintf(why, why_len, "node 0 published a malformed membership");
        r = DTRUN_STOP;
    } else if (!strncmp(m, "stop ", 5)) {
        snprintf(why, why_len, "%s", m + 5);
        r = DTRUN_STOP;
    } else if (!strncmp(m, "run ", 4) && place(m, o->node_rank, g, out)) {
        r = DTRUN_JOINED;
    } else {
        snprintf(why, why_len, "generation %d started without this node", g);
        r = DTRUN_LATE;
    }
    free(v);
    return r;
lost:
    snprintf(why, why_len, "lost the rendezvous store: %s", dt_last_error());
    return DTRUN_LOST;
}
