/* The job as a sequence of generations: join, spawn, supervise, and then
 * either the end (every rank of every node exited 0), or a restart.
 *
 * Store keys of generation G (besides those of nodes.c):
 *   dtrun/g<G>/ended  counter: the first node to end G (a failure, a signal, a
 *                     node waiting to join) adds 1 and gets 1; it writes
 *                     dtrun/g<G>/why and moves dtrun/gen on to G+1
 *   dtrun/g<G>/done   nodes whose ranks all exited 0
 *   dtrun/g<G>/left   nodes that saw the job succeed (node 0 keeps the store
 *                     up until they all did, or 10 s)
 *   dtrun/finished    set by node 0 when the job succeeded
 * Every node watches dtrun/g<G>/ended while its ranks run and stops them when
 * another node ends the generation.  Node 0 counts the failures and ends the
 * job when --max-restarts are spent. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrun.h"

#define WATCH_IO_TIMEOUT 1.0 /* seconds one look at the store may take while ranks run */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void nap(double s) { nanosleep(&(struct timespec){(time_t)s, (long)((s - (long)s) * 1e9)}, NULL); }

static int64_t counter(dt_store_client *st, int g, const char *what, int64_t add, bool *ok)
{
    char key[96];
    int64_t v = 0;
    snprintf(key, sizeof key, "dtrun/g%d/%s", g, what);
    if (dt_store_add(st, key, add, &v) != DT_OK)
        *ok = false;
    return v;
}

/* End generation g with `why` unless another node did first; false when the
 * store did not answer. */
static bool end_generation(dt_store_client *st, int g, const char *why)
{
    bool ok = true;
    if (counter(st, g, "ended", 1, &ok) != 1 || !ok)
        return ok;
    char key[96];
    int64_t gen;
    snprintf(key, sizeof key, "dtrun/g%d/why", g);
    dt_store_set(st, key, why, strlen(why) + 1);
    return dt_store_add(st, "dtrun/gen", 1, &gen) == DT_OK;
}

static void read_why(dt_store_client *st, int g, char *why, size_t len)
{
    char key[96];
    void *v = NULL;
    size_t n = 0;
    snprintf(key, sizeof key, "dtrun/g%d/why", g);
    if (dt_store_get(st, key, 2.0, &v, &n) == DT_OK && n > 0 && ((char *)v)[n - 1] == '\0')
        snprintf(why, len, "%s", (char *)v);
    else
        snprintf(why, len, "another node ended generation %d", g);
    free(v);
}

typedef struct {
    const dtrun_opts *o;
    dt_store_client **store; /* the watch may replace a broken one */
    const dtrun_layout *layout;
    bool lost, scale_up;
    double last_answer, silence_limit;
    dtrun_end_watch *ended; /* wakes us when another node ends the generation */
    double next_look;       /* the periodic look at the store */
} watch_ctx;

/* How long the store may be silent while ranks run before this node gives
 * it up and stops them: the ranks' own limits (DT_HEARTBEAT_TIMEOUT, when
 * on, and DT_TIMEOUT), at most 10 s.  Malformed values are the ranks' to
 * report. */
static double store_silence_limit(void)
{
    double limit = DTRUN_STORE_IO_TIMEOUT;
    const char *names[] = {"DT_HEARTBEAT_TIMEOUT", "DT_TIMEOUT"};
    for (int i = 0; i < 2; i++) {
        const char *v = getenv(names[i]);
        char *end;
        double t = v ? strtod(v, &end) : 0;
        if (v && *v && !*end && t > 0 && t < limit)
            limit = t;
    }
    return limit;
}

/* A rank that exits after declaring a silent peer dead (heartbeats) left the
 * peer's name in w<g>/dead: name that rank, not the one that noticed.
 * what: "rank 0 (pid 745) exited with status 3" -> "rank 1 (10.0.0.2:4000)
 * sent no heartbeat for 30.0 s or more; declared dead by rank 0 (pid 745),
 * which exited with status 3". */
static void name_declared_dead(dt_store_client *st, int g, char *what, size_t len)
{
    char key[64];
    snprintf(key, sizeof key, "w%d/dead", g);
    void *val = NULL;
    size_t n = 0;
    if (dt_store_get(st, key, 0, &val, &n) != DT_OK)
        return;
    char noticed[512];
    snprintf(noticed, sizeof noticed, "%s", what);
    char *after_pid = strstr(noticed, ") ");
    if (after_pid) {
        *after_pid = '\0';
        if (snprintf(what, len, "%.*s; declared dead by %s), which %s", (int)n, (const char *)val, noticed,
                     after_pid + 2) < 0)
            what[0] = '\0';
    } else if (snprintf(what, len, "%.*s; declared dead by %s", (int)n, (const char *)val, noticed) < 0) {
        what[0] = '\0';
    }
    free(val);
}

/* While ranks run: has another node ended the generation?  Node 0 of an
 * elastic job below its maximum also ends it when a node waits to join. */
static bool watch(void *arg)
{
    watch_ctx *w = arg;
    bool ok = true;
    int g = w->layout->generation;
    double now = now_s();
    if (dtrun_end_watch_seen(w->ended))
        return true;
    if (now < w->next_look)
        return false;
    w->next_look = now + 0.2;
    /* Each look waits at most a second (WATCH_IO_TIMEOUT), so the ranks stay
     * supervised; the store is given up only after silence_limit without an
     * answer (a cut-off node used to wait a fixed 10 s per request, after its
     * ranks had already seen the silence: twice a 5 s heartbeat timeout). */
    if (dt_store_broken(*w->store)) {
        const dtrun_opts *o = w->o;
        dt_store_client *fresh = NULL;
        if (dt_store_connect(o->master_host, o->master_port, o->token, WATCH_IO_TIMEOUT, &fresh) == DT_OK) {
            dt_store_close(*w->store);
            *w->store = fresh;
            dt_store_set_io_timeout(fresh, WATCH_IO_TIMEOUT);
        } else {
            ok = false;
        }
    }
    int64_t ended = ok ? counter(*w->store, g, "ended", 0, &ok) : 0;
    if (ok && ended > 0)
        return true;
    if (ok && w->o->node_rank == 0 && w->layout->nodes < w->o->nnodes &&
        counter(*w->store, g + 1, "registered", 0, &ok) > 0) {
        w->scale_up = true;
        return true;
    }
    now = now_s();
    if (ok) {
        w->last_answer = now;
        return false;
    }
    if (now - w->last_answer < w->silence_limit)
        return false;
    fprintf(stderr, "dtrun: node %d: the rendezvous store has not answered for %.1f s (the limit: %.0f s, the smallest "
            "of DT_HEARTBEAT_TIMEOUT, DT_TIMEOUT and %.0f s); stopping the ranks\n", w->o->node_rank,
            now - w->last_answer, w->silence_limit, DTRUN_STORE_IO_TIMEOUT);
    w->lost = true;
    return true;
}

/* Every rank here exited 0: wait until all nodes say so (success) or another
 * node ends the generation (false: a restart). */
static bool wait_success(const dtrun_opts *o, dt_store_client *st, const dtrun_layout *l, bool *lost)
{
    bool ok = true;
    counter(st, l->generation, "done", 1, &ok);
    while (ok) {
        if (counter(st, l->generation, "done", 0, &ok) >= l->nodes && ok)
            break;
        if (counter(st, l->generation, "ended", 0, &ok) > 0)
            return false;
        nap(0.1);
    }
    if (!ok) {
        *lost = true;
        return false;
    }
    if (o->node_rank != 0) {
        counter(st, l->generation, "left", 1, &ok);
        return true;
    }
    dt_store_set(st, "dtrun/finished", "1", 2);
    double start = now_s(); /* keep the store up until the others have seen it */
    while (ok && counter(st, l->generation, "left", 0, &ok) < l->nodes - 1 && now_s() - start < 10)
        nap(0.05);
    return true;
}

/* Connect again (after the store stopped answering) and continue with the
 * generation now running, or `next` when the store cannot say: *g is set so
 * that the loop's g++ lands on it. */
static dt_status reconnect(const dtrun_opts *o, dt_store_client **store, int next, int *g)
{
    fprintf(stderr, "dtrun: node %d: reconnecting to the rendezvous store at %s:%d (up to %.0f s)\n", o->node_rank,
            o->master_host, o->master_port, o->join_timeout);
    dt_store_close(*store);
    *store = NULL;
    dt_status s = dt_store_connect(o->master_host, o->master_port, o->token, o->join_timeout, store);
    if (s != DT_OK) {
        fprintf(stderr, "dtrun: node %d: the rendezvous store is gone: %s\n", o->node_rank, dt_last_error());
        return s;
    }
    dt_store_set_io_timeout(*store, DTRUN_STORE_IO_TIMEOUT);
    int64_t now_gen = next;
    dt_store_add(*store, "dtrun/gen", 0, &now_gen);
    *g = (int)now_gen - 1;
    return DT_OK;
}

/* Spawn and supervise one generation's ranks. */
static int run_ranks(const dtrun_opts *o, const dtrun_layout *l, watch_ctx *w, dtrun_outcome *outcome, char *what,
                     size_t what_len)
{
    dtrun_child *kids = calloc((size_t)o->nproc, sizeof *kids);
    int code = 1, started = 0;
    snprintf(what, what_len, "node %d could not start its ranks", o->node_rank);
    *outcome = DTRUN_FAILED;
    if (kids && dtrun_spawn(o, l, kids, &started) == DT_OK) {
        code = dtrun_supervise(o, kids, o->nproc, watch, w, outcome, what, what_len);
    } else if (started > 0) { /* stop whatever did start */
        for (int i = 0; i < started; i++)
            kill(kids[i].pid, SIGTERM);
        dtrun_supervise(o, kids, started, NULL, NULL, NULL, NULL, 0);
    }
    free(kids);
    return code;
}

int dtrun_run(const dtrun_opts *o, dt_store_client **store)
{
    bool restartable = o->max_restarts > 0 || o->nnodes_min < o->nnodes;
    int64_t gen = 0;
    if (dt_store_add(*store, "dtrun/gen", 0, &gen) != DT_OK) {
        fprintf(stderr, "dtrun: node %d: the rendezvous store: %s\n", o->node_rank, dt_last_error());
        return 1;
    }
    int g = (int)gen, failures = 0, last_code = 1;
    char why[1024], stop[1200];
    const char *stop_reason = NULL;
    for (;; g++) {
        dtrun_layout l;
        dtrun_join_result j = dtrun_join(o, *store, g, stop_reason, &l, why, sizeof why);
        if (j == DTRUN_LOST) {
            fprintf(stderr, "dtrun: node %d: %s\n", o->node_rank, why);
            if (o->node_rank == 0 || reconnect(o, store, g, &g) != DT_OK)
                return 1;
            continue;
        }
        if (j == DTRUN_STOP) {
            fprintf(stderr, "dtrun: node %d: the job stops: %s\n", o->node_rank, why);
            return last_code ? last_code : 1;
        }
        if (j == DTRUN_LATE) {
            fprintf(stderr, "dtrun: node %d: %s; joining the next one\n", o->node_rank, why);
            continue;
        }
        dt_phase_mark("dtrun node %d joined generation %d", o->node_rank, g);
        if (g > 0 && o->node_rank == 0)
            fprintf(stderr, "dtrun: generation %d: %d node%s, %d ranks\n", g, l.nodes, l.nodes > 1 ? "s" : "",
                    l.world_size);
        watch_ctx w = {o, store, &l, false, false, now_s(), store_silence_limit(), NULL, now_s() + 0.2};
        if (l.nodes > 1)
            w.ended = dtrun_end_watch_start(o, g);
        dtrun_outcome outcome;
        char what[512];
        char gen_what[64];
        snprintf(gen_what, sizeof gen_what, "%s%d rank%s", g > 0 ? "after a restart: " : "", l.world_size,
                 l.world_size > 1 ? "s" : "");
        dtrun_monitor_note(DTRUN_MON_RUNNING, g, gen_what);
        dt_store_set_io_timeout(*store, WATCH_IO_TIMEOUT);
        int code = run_ranks(o, &l, &w, &outcome, what, sizeof what);
        dt_store_set_io_timeout(*store, DTRUN_STORE_IO_TIMEOUT);
        bool lost = w.lost; /* (w.ended is stopped once the generation's why is written: at once then) */
        dt_phase_mark("dtrun node %d generation %d over", o->node_rank, g);
        if (outcome == DTRUN_OK) {
            if (wait_success(o, *store, &l, &lost)) {
                dtrun_end_watch_stop(w.ended);
                dtrun_monitor_note(DTRUN_MON_FINISHED, g, "every rank exited 0");
                return 0;
            }
            outcome = DTRUN_STOPPED;
        }
        if (outcome == DTRUN_SIGNALLED) { /* the user stops the job: no restart */
            snprintf(why, sizeof why, "interrupted: dtrun on node %d received a signal", o->node_rank);
            dtrun_monitor_note(DTRUN_MON_FAILED, g, why);
            end_generation(*store, g, why);
            dtrun_end_watch_stop(w.ended);
            if (o->node_rank == 0) { /* the others learn it when they rejoin */
                snprintf(stop, sizeof stop, "dtrun/g%d/members", g + 1);
                dt_store_set(*store, stop, "stop interrupted on node 0", 27);
                nap(1.0);
            }
            return code;
        }
        if (outcome == DTRUN_FAILED) {
            last_code = code;
            if (!lost)
                name_declared_dead(*store, g, what, sizeof what);
            snprintf(why, sizeof why, "failure: %s", what);
            if (o->nnodes > 1)
                snprintf(why + strlen(why), sizeof why - strlen(why), " on node %d", o->node_rank);
            if (!lost) /* a store that did not answer the watch would stall us again */
                lost = !end_generation(*store, g, why);
        } else if (w.scale_up) {
            lost |= !end_generation(*store, g, "membership: a node is waiting to join");
        }
        if (lost) {
            dtrun_end_watch_stop(w.ended);
            fprintf(stderr, "dtrun: node %d: lost the rendezvous store: %s\n", o->node_rank, dt_last_error());
            if (!restartable && outcome == DTRUN_FAILED)
                fprintf(stderr, "dtrun: job failed: %s\n", what);
            if (!restartable || o->node_rank == 0 || reconnect(o, store, g + 1, &g) != DT_OK)
                return last_code;
            continue;
        }
        read_why(*store, g, why, sizeof why);
        dtrun_end_watch_stop(w.ended);
        if (outcome == DTRUN_STOPPED)
            fprintf(stderr, "dtrun: node %d: stopped its ranks: %s\n", o->node_rank, why);
        if (!restartable) {
            dtrun_monitor_note(DTRUN_MON_FAILED, g, outcome == DTRUN_FAILED ? what : why);
            if (outcome == DTRUN_FAILED)
                fprintf(stderr, "dtrun: job failed: %s\n", what);
            if (o->node_rank == 0 && o->nnodes > 1)
                nap(0.5); /* let the other nodes read why before the store goes */
            return outcome == DTRUN_FAILED ? code : 1;
        }
        stop_reason = NULL;
        if (o->node_rank == 0) {
            if (!strncmp(why, "failure", 7))
                failures++;
            if (!strncmp(why, "interrupted", 11))
                stop_reason = why;
            else if (failures > o->max_restarts) {
                snprintf(stop, sizeof stop, "%s; no restart left (--max-restarts %d)", why, o->max_restarts);
                stop_reason = stop;
                dtrun_monitor_note(DTRUN_MON_FAILED, g, stop);
            } else if (!strncmp(why, "failure", 7)) {
                fprintf(stderr, "dtrun: restart %d of %d: %s\n", failures, o->max_restarts, why);
                dt_phase_mark("dtrun node 0 restart %d decided", failures);
            }
            else
                fprintf(stderr, "dtrun: restarting: %s\n", why);
            if (!stop_reason)
                dtrun_monitor_note(DTRUN_MON_RESTARTING, g, why);
        }
    }
}
