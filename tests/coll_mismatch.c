/* DT_DEBUG=coll test rank.
 *
 * usage: coll_mismatch MODE
 *   mismatch: a few matching collectives, then rank 1 calls allgather where
 *             the others call allreduce (every rank should fail, naming both)
 *   stall:    rank 2 stops issuing collectives after #3 (it sleeps, alive);
 *             the others time out and print every rank's recent collectives
 *   field KIND FIELD COUNT (always-on check, no DT_DEBUG needed): after two
 *             matching calls, one rank's KIND call (allreduce, allreduce_half,
 *             reduce, broadcast, allgather, gather, scatter, reduce_scatter,
 *             alltoall, barrier) differs in FIELD (count, dtype, op, root,
 *             kind: allgather, or alltoall for allgather) from the others'
 *             (rank 1's; the last rank's for root), then a
 *             barrier.  Every rank must fail, at that call or at the barrier
 *             (a rank that exchanged nothing with a differing rank in it),
 *             with "collective mismatch" naming both calls.
 *   init ACTION (issue 43, item 7b): the last rank runs with DT_HIER=off
 *             (tests/cases/coll_mismatch.sh sets it), so it leaves
 *             dt_comm_init_env while the others are still in its last step
 *             (the hierarchy's set-up, whose allgather it skips); it then
 *             calls allreduce(7 x f32, sum) (ACTION mismatch) or aborts
 *             with "rank N gives up" (ACTION abort).  The others' init must
 *             fail with what happened first, the mismatch naming that
 *             allreduce or the abort naming the rank and its reason,
 *             followed by "; this rank was still in dt_comm_init_env
 *             (STEP)" (the hierarchy's set-up, or an earlier step a rank
 *             was still finishing); the last rank's call fails with the
 *             mismatch (or returns DT_ERR_ABORTED).
 * Prints "rank R: STATUS: message" and exits 0 on success, 3 on failure. */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain/dtrain.h"

typedef struct {
    const char *kind;
    size_t count;
    dt_dtype dtype;
    dt_redop op;
    int root;
} call_desc;

static bool reduces(const char *kind)
{
    return !strcmp(kind, "allreduce") || !strcmp(kind, "allreduce_half") || !strcmp(kind, "reduce") ||
           !strcmp(kind, "reduce_scatter");
}

static bool rooted(const char *kind)
{
    return !strcmp(kind, "reduce") || !strcmp(kind, "broadcast") || !strcmp(kind, "gather") ||
           !strcmp(kind, "scatter");
}

/* As the report names a call (src/comm/collsig.c). */
static void describe(const call_desc *d, char *buf, size_t len)
{
    if (!strcmp(d->kind, "barrier")) {
        snprintf(buf, len, "barrier()");
        return;
    }
    int n = snprintf(buf, len, "%s(%zu x %s", d->kind, d->count, dt_dtype_name(d->dtype));
    if (reduces(d->kind))
        n += snprintf(buf + n, len - (size_t)n, ", %s", dt_redop_name(d->op));
    if (rooted(d->kind))
        n += snprintf(buf + n, len - (size_t)n, ", root %d", d->root);
    snprintf(buf + n, len - (size_t)n, ")");
}

static dt_status run_call(const call_desc *d, void *a, void *b, dt_comm *c)
{
    const char *k = d->kind;
    if (!strcmp(k, "allreduce")) return dt_allreduce(a, b, d->count, d->dtype, d->op, c);
    if (!strcmp(k, "allreduce_half")) return dt_allreduce_half(a, b, d->count, d->dtype, d->op, c);
    if (!strcmp(k, "reduce")) return dt_reduce(a, b, d->count, d->dtype, d->op, d->root, c);
    if (!strcmp(k, "broadcast")) return dt_broadcast(a, d->count, d->dtype, d->root, c);
    if (!strcmp(k, "allgather")) return dt_allgather(a, b, d->count, d->dtype, c);
    if (!strcmp(k, "gather")) return dt_gather(a, b, d->count, d->dtype, d->root, c);
    if (!strcmp(k, "scatter")) return dt_scatter(b, a, d->count, d->dtype, d->root, c);
    if (!strcmp(k, "reduce_scatter")) return dt_reduce_scatter(b, a, d->count, d->dtype, d->op, c);
    if (!strcmp(k, "alltoall")) return dt_alltoall(a, b, d->count, d->dtype, c);
    if (!strcmp(k, "barrier")) return dt_barrier(c);
    fprintf(stderr, "coll_mismatch: unknown kind %s\n", k);
    exit(2);
}

static int field_mode(const char *kind, const char *field, size_t count)
{
    dt_comm *c;
    if (dt_comm_init_env(&c) != DT_OK) {
        /* The others may run their first calls (ones where they only send)
         * and find the mismatch while this rank still sets up. */
        bool ok = strstr(dt_last_error(), "collective mismatch") != NULL;
        const char *r = getenv("DT_RANK");
        printf("rank %s: %s at the set-up: %s\n", r ? r : "?", ok ? "OK" : "FAIL", dt_last_error());
        return ok ? 0 : 1;
    }
    int rank = dt_comm_rank(c), size = dt_comm_size(c);
    bool half = !strcmp(kind, "allreduce_half");
    call_desc same = {kind, count, half ? DT_F16 : DT_F32, DT_SUM, 0};
    call_desc odd = same;
    int odd_rank = 1;
    if (!strcmp(field, "count"))
        odd.count = count + 1;
    else if (!strcmp(field, "dtype"))
        odd.dtype = half ? DT_BF16 : DT_F64;
    else if (!strcmp(field, "op"))
        odd.op = DT_MAX;
    else if (!strcmp(field, "root"))
        odd.root = 1, odd_rank = size - 1;
    else if (!strcmp(field, "kind"))
        odd.kind = strcmp(kind, "allgather") ? "allgather" : "alltoall";
    else {
        fprintf(stderr, "coll_mismatch: unknown field %s\n", field);
        return 2;
    }
    if (half && !strcmp(field, "op"))
        odd.op = DT_AVG;
    size_t bytes = (count + 2) * 8 * (size_t)size;
    void *a = calloc(1, bytes), *b = calloc(1, bytes);
    dt_status s = DT_OK;
    /* Matching calls first.  One may fail with the report too: a rank still
     * in the second gets the notice of the mismatch in the third. */
    for (int i = 0; i < 2 && s == DT_OK; i++)
        s = run_call(&same, a, b, c);
    const call_desc *mine = rank == odd_rank ? &odd : &same;
    dt_status s1 = s != DT_OK ? s : run_call(mine, a, b, c);
    char m1[1024];
    snprintf(m1, sizeof m1, "%s", s1 == DT_OK ? "" : dt_last_error());
    dt_status s2 = dt_barrier(c);
    const char *msg = s1 != DT_OK ? m1 : s2 != DT_OK ? dt_last_error() : "";
    char want1[128], want2[128];
    describe(&same, want1, sizeof want1);
    describe(&odd, want2, sizeof want2);
    bool ok = (s1 != DT_OK || s2 != DT_OK) && strstr(msg, "collective mismatch") && strstr(msg, want1) &&
              strstr(msg, want2);
    printf("rank %d: %s at the %s: call %s, next %s: %s\n", rank, ok ? "OK" : "FAIL",
           s != DT_OK ? "earlier call" : s1 != DT_OK ? "call" : "barrier", dt_status_name(s1), dt_status_name(s2), msg);
    if (!ok)
        printf("rank %d: FAIL: expected \"collective mismatch\" naming %s and %s\n", rank, want1, want2);
    fflush(stdout);
    dt_comm_destroy(c);
    free(a);
    free(b);
    return ok ? 0 : 3;
}

static int init_mode(const char *action)
{
    bool abort_it = !strcmp(action, "abort");
    const char *r = getenv("DT_RANK"), *n = getenv("DT_WORLD_SIZE");
    int last = n ? atoi(n) - 1 : -1;
    char reason[64], what[96];
    snprintf(reason, sizeof reason, "rank %d gives up", last);
    if (abort_it)
        snprintf(what, sizeof what, "aborted the job: %s", reason);
    else
        snprintf(what, sizeof what, "allreduce(7 x f32, sum)");
    dt_comm *c;
    if (dt_comm_init_env(&c) != DT_OK) {
        const char *msg = dt_last_error();
        const char *first = abort_it ? "rank " : "collective mismatch: ";
        /* Which step: a rank may still be finishing an earlier one (its
         * last receive) when the last rank is through. */
        const char *step = strstr(msg, "; this rank was still in dt_comm_init_env (");
        bool ok = !strncmp(msg, first, strlen(first)) && strstr(msg, what) && step &&
                  (strstr(step, "(setting up hierarchical collectives)") ||
                   strstr(step, "(timing the small-message algorithms at start-up)") ||
                   strstr(step, "(setting up shared-memory collectives)"));
        printf("rank %s: %s in dt_comm_init_env: %s\n", r ? r : "?", ok ? "OK" : "FAIL", msg);
        return ok ? 0 : 3;
    }
    int rank = dt_comm_rank(c);
    float buf[7] = {0};
    dt_status s = abort_it ? dt_comm_abort(c, reason) : dt_allreduce(buf, buf, 7, DT_F32, DT_SUM, c);
    const char *msg = s == DT_OK ? "" : dt_last_error();
    bool ok = rank == last && (abort_it ? s == DT_ERR_ABORTED
                                        : s == DT_ERR_INVALID && strstr(msg, "collective mismatch") && strstr(msg, what) &&
                                              strstr(msg, "allgather(1 x i32)"));
    printf("rank %d: %s after dt_comm_init_env: %s: %s\n", rank, ok ? "OK" : "FAIL", dt_status_name(s), msg);
    fflush(stdout);
    dt_comm_destroy(c);
    return ok ? 0 : 3;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "init"))
        return init_mode(argv[2]);
    if (argc == 5 && !strcmp(argv[1], "field"))
        return field_mode(argv[2], argv[3], (size_t)strtoull(argv[4], NULL, 10));
    if (argc != 2 || (strcmp(argv[1], "mismatch") && strcmp(argv[1], "stall"))) {
        fprintf(stderr, "usage: coll_mismatch mismatch|stall|field KIND FIELD COUNT|init mismatch|abort\n");
        return 2;
    }
    bool stall = !strcmp(argv[1], "stall");
    signal(SIGTERM, SIG_IGN); /* report our own error before dtrun's SIGKILL */
    dt_comm *c;
    if (dt_comm_init_env(&c) != DT_OK) {
        fprintf(stderr, "coll_mismatch: init: %s\n", dt_last_error());
        return 1;
    }
    int rank = dt_comm_rank(c), size = dt_comm_size(c);
    float buf[256] = {0}, *all = calloc(256 * (size_t)size, sizeof *all);
    dt_status s = DT_OK;
    for (int step = 0; step < 6 && s == DT_OK; step++) {
        char tag[32];
        snprintf(tag, sizeof tag, "step %d", step);
        dt_comm_set_tag(c, tag);
        if (step < 3)
            s = dt_broadcast(buf, 16, DT_F32, 0, c);
        else if (stall && rank == 2)
            sleep(30); /* alive (heartbeats go on) but no longer calling collectives */
        else if (!stall && rank == 1)
            s = dt_allgather(buf, all, 256, DT_F32, c);
        else
            s = dt_allreduce(buf, buf, 256, DT_F32, DT_SUM, c);
    }
    printf("rank %d: %s: %s\n", rank, dt_status_name(s), s == DT_OK ? "" : dt_last_error());
    fflush(stdout);
    if (stall && rank == 2)
        s = DT_ERR_PEER; /* the others have failed; do not wait for them */
    dt_comm_destroy(c);
    free(all);
    return s == DT_OK ? 0 : 3;
}
