/* Straggler detection (docs/observability.md).
 *
 * In lockstep training a slow rank makes every rank's step slow: the others
 * wait for it inside the collectives.  What tells them apart is the time a
 * rank spends outside collectives (its step less its waits): the
 * straggler's is long, the others' is not.  Every DT_STRAGGLER_EVERY steps
 * the ranks allgather two numbers each (mean step and wait time over the
 * window: 16 bytes, one latency-bound collective, ~20-50 us against steps
 * of milliseconds or more, run where every rank already is, at the end of a
 * step, so it cannot deadlock), and each rank's time outside collectives is
 * compared with the median of the other ranks'.  A rank above
 * DT_STRAGGLER_RATIO times that median, and 5 ms or more above it, at
 * DT_STRAGGLER_CHECKS checks in a row is named by the lowest rank in one
 * line on stderr; again every ten times as many checks while it lasts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/env.h"
#include "base/status.h"
#include "dtrain/parallel.h"

#define HOST 64
#define MIN_GAP_S 0.005

struct dt_straggler {
    dt_comm *comm;
    int rank, size;
    int64_t every, checks;
    double ratio;
    char *hosts; /* size x HOST */
    int *streak;
    double *all, *others;
    double sum_step, sum_wait;
    int64_t n, first_step;
};

void dt_straggler_destroy(dt_straggler *s)
{
    if (!s)
        return;
    free(s->hosts);
    free(s->streak);
    free(s->all);
    free(s->others);
    free(s);
}

dt_status dt_straggler_create(dt_comm *c, dt_straggler **out)
{
    if (!out)
        return dt__fail(DT_ERR_INVALID, "dt_straggler_create: out is NULL");
    *out = NULL;
    int64_t every, checks;
    DT_CHECK(dt__env_int("DT_STRAGGLER_EVERY", 0, 1 << 30, &every));
    DT_CHECK(dt__env_int("DT_STRAGGLER_CHECKS", 1, 1 << 20, &checks));
    const char *rt = dt__env_str("DT_STRAGGLER_RATIO");
    char *end = NULL;
    double ratio = rt ? strtod(rt, &end) : 1.5;
    if (rt && (end == rt || *end || !(ratio > 1) || ratio > 1e6))
        return dt__fail(DT_ERR_INVALID, "DT_STRAGGLER_RATIO='%s': expected a number above 1", rt);
    int size = dt_comm_size(c);
    if (every == 0 || size < 2)
        return DT_OK;
    dt_straggler *s = calloc(1, sizeof *s);
    if (!s || !(s->hosts = calloc((size_t)size, HOST)) || !(s->streak = calloc((size_t)size, sizeof *s->streak)) ||
        !(s->all = calloc(2 * (size_t)size, sizeof *s->all)) || !(s->others = calloc((size_t)size, sizeof *s->others))) {
        dt_straggler_destroy(s);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    s->comm = c;
    s->rank = dt_comm_rank(c);
    s->size = size;
    s->every = every;
    s->checks = checks;
    s->ratio = ratio;
    s->first_step = -1;
    char mine[HOST] = "";
    if (gethostname(mine, HOST - 1) != 0)
        snprintf(mine, HOST, "?");
    dt_status st = dt_allgather(mine, s->hosts, HOST, DT_U8, c);
    if (st != DT_OK) {
        dt_straggler_destroy(s);
        return st;
    }
    for (int r = 0; r < size; r++)
        s->hosts[(size_t)r * HOST + HOST - 1] = '\0';
    *out = s;
    return DT_OK;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

dt_status dt_straggler_step(dt_straggler *s, int64_t step, double step_s, double wait_s, int *named)
{
    if (named)
        *named = -1;
    if (!s)
        return DT_OK;
    if (s->first_step < 0)
        s->first_step = step;
    s->sum_step += step_s;
    s->sum_wait += wait_s;
    s->n++;
    if ((step + 1) % s->every != 0)
        return DT_OK;
    double mine[2] = {(s->sum_step - s->sum_wait) / (double)s->n, s->sum_wait / (double)s->n};
    s->sum_step = s->sum_wait = 0;
    s->n = 0;
    DT_CHECK(dt_allgather(mine, s->all, 2, DT_F64, s->comm));
    for (int r = 0; r < s->size; r++) {
        int k = 0;
        for (int q = 0; q < s->size; q++)
            if (q != r)
                s->others[k++] = s->all[2 * q];
        double med = median(s->others, k), busy = s->all[2 * r];
        if (!(busy > s->ratio * med && busy - med >= MIN_GAP_S)) {
            s->streak[r] = 0;
            continue;
        }
        int64_t streak = ++s->streak[r];
        if (streak < s->checks || (streak - s->checks) % (10 * s->checks) != 0)
            continue;
        if (named)
            *named = r;
        if (s->rank != 0)
            continue;
        k = 0;
        for (int q = 0; q < s->size; q++)
            if (q != r)
                s->others[k++] = s->all[2 * q + 1];
        fprintf(stderr,
                "dtrain: straggler: rank %d (%s) takes %.1f ms a step outside collectives against a median of %.1f ms "
                "on the other ranks (%.2fx) at %lld check%s in a row (steps %lld-%lld); the others wait for it in "
                "collectives (median %.1f ms a step) (DT_STRAGGLER_RATIO=%g, DT_STRAGGLER_EVERY=%lld)\n",
                r, s->hosts + (size_t)r * HOST, 1e3 * busy, 1e3 * med, med > 0 ? busy / med : 0.0,
                (long long)s->checks, s->checks == 1 ? "" : "s", (long long)(step + 1 - s->checks * s->every + 1), (long long)(step + 1),
                1e3 * median(s->others, k), s->ratio, (long long)s->every);
        fflush(stderr);
    }
    return DT_OK;
}
