/* Rooted collectives whose ranks name different roots (issue 43, item 3).
 *
 * usage: coll_roots KIND PATTERN COUNT
 *   KIND     broadcast, ibroadcast, reduce, gather or scatter
 *   PATTERN  which root each rank names (n ranks):
 *              self:  the last rank itself, the others rank 0
 *              other: the last rank rank 1, the others rank 0
 *              each:  every rank itself
 *              half:  the first half rank 0, the others the last rank
 *   COUNT    elements (f32) per rank's block
 * After a matching broadcast, every rank must fail in the call with
 * differing roots itself, with DT_ERR_INVALID "collective mismatch" naming
 * two of the roots (", root A" and ", root B", A != B): never DT_OK, never a
 * timeout.  A mismatch fails the job's communicators for good, so one call
 * per run (tests/cases/coll_roots.sh repeats the runs).  Prints
 *   rank R: OK|FAIL: STATUS: message
 * and exits 0 when OK. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/dtrain.h"

static int root_of(const char *pattern, int rank, int size)
{
    if (!strcmp(pattern, "self"))
        return rank == size - 1 ? size - 1 : 0;
    if (!strcmp(pattern, "other"))
        return rank == size - 1 ? 1 : 0;
    if (!strcmp(pattern, "each"))
        return rank;
    if (!strcmp(pattern, "half"))
        return rank < size / 2 ? 0 : size - 1;
    fprintf(stderr, "coll_roots: unknown pattern %s\n", pattern);
    exit(2);
}

static dt_status call(const char *kind, float *a, float *b, size_t count, int root, dt_comm *c)
{
    if (!strcmp(kind, "broadcast"))
        return dt_broadcast(a, count, DT_F32, root, c);
    if (!strcmp(kind, "ibroadcast")) {
        dt_request *rq;
        dt_status s = dt_ibroadcast(a, count, DT_F32, root, c, &rq);
        return s == DT_OK ? dt_wait(rq, NULL) : s;
    }
    if (!strcmp(kind, "reduce"))
        return dt_reduce(a, b, count, DT_F32, DT_SUM, root, c);
    if (!strcmp(kind, "gather"))
        return dt_gather(a, b, count, DT_F32, root, c);
    if (!strcmp(kind, "scatter"))
        return dt_scatter(b, a, count, DT_F32, root, c);
    fprintf(stderr, "coll_roots: unknown kind %s\n", kind);
    exit(2);
}

/* The message names two different roots: ", root A" ... ", root B". */
static bool names_two_roots(const char *msg)
{
    const char *p = strstr(msg, ", root ");
    if (!p)
        return false;
    int a = atoi(p + 7);
    for (const char *q = strstr(p + 1, ", root "); q; q = strstr(q + 1, ", root "))
        if (atoi(q + 7) != a)
            return true;
    return false;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: coll_roots KIND PATTERN COUNT\n");
        return 2;
    }
    const char *kind = argv[1], *pattern = argv[2];
    size_t count = (size_t)strtoull(argv[3], NULL, 10);
    dt_comm *world;
    if (dt_comm_init_env(&world) != DT_OK) {
        fprintf(stderr, "coll_roots: init: %s\n", dt_last_error());
        return 1;
    }
    int rank = dt_comm_rank(world), size = dt_comm_size(world);
    float *a = calloc(count * (size_t)size + 4, sizeof *a), *b = calloc(count * (size_t)size + 4, sizeof *b);
    dt_status s = dt_broadcast(a, 4, DT_F32, 0, world); /* a matching call first */
    if (s == DT_OK)
        s = call(kind, a, b, count, root_of(pattern, rank, size), world);
    const char *msg = s == DT_OK ? "" : dt_last_error();
    bool ok = s == DT_ERR_INVALID && strstr(msg, "collective mismatch") && names_two_roots(msg);
    printf("rank %d: %s: %s: %s\n", rank, ok ? "OK" : "FAIL", dt_status_name(s), msg);
    fflush(stdout);
    dt_comm_destroy(world);
    free(a);
    free(b);
    return ok ? 0 : 3;
}
