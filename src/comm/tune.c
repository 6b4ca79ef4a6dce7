/* Start-up measurement of where the direct allreduce pays.
 *
 * Direct saves log2(n) - 1 message latencies and costs n - 1 messages per
 * rank instead of log2(n).  Which one is bigger depends on the links (a hop
 * of 30 us or of 300 us) and on what a message costs the CPU, neither known
 * in advance, so the world communicator times both algorithms once, on the
 * real links, before any user collective.  docs/algorithms.md has the
 * figures that motivate it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/status.h"
#include "comm/coll.h"

enum { TUNE_REPS = 9, TUNE_WARMUP = 2, TUNE_MAX_RANKS = 16 };
#define TUNE_WIN 0.9 /* direct must be at least 10% faster */

typedef dt_status (*allreduce_fn)(dt__coll *k, void *buf, size_t count, dt_dtype t, dt_redop op);

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of the timed repetitions of fn on `count` floats, in seconds (a
 * stall of the shared machine in one of them says nothing of the links). */
static dt_status median_time(dt_comm *c, allreduce_fn fn, float *buf, size_t count, double *median)
{
    double took[TUNE_REPS - TUNE_WARMUP];
    for (int rep = 0; rep < TUNE_REPS; rep++) {
        dt__coll k;
        DT_CHECK(dt__coll_begin(&k, c, "allreduce (start-up timing)"));
        int64_t t0 = dt__now_ns();
        DT_CHECK(fn(&k, buf, count, DT_F32, DT_SUM));
        if (rep >= TUNE_WARMUP)
            took[rep - TUNE_WARMUP] = (double)(dt__now_ns() - t0) / 1e9;
    }
    qsort(took, TUNE_REPS - TUNE_WARMUP, sizeof took[0], by_value);
    *median = took[(TUNE_REPS - TUNE_WARMUP) / 2];
    return DT_OK;
}

/* Times direct and recursive doubling at `count` floats; true when direct
 * wins on the slowest rank's figures (the same verdict on every rank). */
static dt_status direct_wins(dt_comm *c, float *buf, size_t count, bool *wins, double t[2])
{
    DT_CHECK(median_time(c, dt__direct_allreduce, buf, count, &t[0]));
    DT_CHECK(median_time(c, dt__rd_allreduce, buf, count, &t[1]));
    double mine[2] = {t[0], t[1]};
    dt__coll k;
    DT_CHECK(dt__coll_begin(&k, c, "allreduce (start-up timing)"));
    DT_CHECK(dt__rd_allreduce(&k, mine, 2, DT_F64, DT_MAX));
    t[0] = mine[0];
    t[1] = mine[1];
    *wins = t[0] < TUNE_WIN * t[1];
    return DT_OK;
}

dt_status dt__tune_direct(dt_comm *c)
{
    c->direct_tuned = 0;
    if (c->size < 3 || c->size > TUNE_MAX_RANKS || c->algo != DT_ALGO_AUTO ||
        c->direct_bytes != SIZE_MAX)
        return DT_OK;
    static const size_t sizes[] = {8, 4096}; /* bytes timed; direct up to 1 KiB, then 4 KiB */
    static const size_t limits[] = {1024, 4096};
    float buf[4096 / sizeof(float)] = {0};
    /* A twin of c with its own id and sequence numbers, so the user's
     * collectives are still numbered from 1 (DT_DEBUG=coll names them). */
    dt_comm twin = *c;
    twin.id = DT__TUNE_COMM_ID;
    twin.coll_seq = 0;
    memset(twin.scratch, 0, sizeof twin.scratch);
    memset(twin.scratch_size, 0, sizeof twin.scratch_size);
    dt_status s = DT_OK;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        bool wins;
        double t[2];
        s = direct_wins(&twin, buf, sizes[i] / sizeof(float), &wins, t);
        if (s != DT_OK)
            break;
        DT_INFO("allreduce of %zu bytes across %d ranks: direct %.0f us, recursive doubling %.0f us", sizes[i],
                c->size, t[0] * 1e6, t[1] * 1e6);
        if (!wins)
            break;
        c->direct_tuned = limits[i];
    }
    free(twin.scratch[0]);
    free(twin.scratch[1]);
    if (s == DT_OK)
        DT_INFO("allreduce: direct algorithm up to %zu bytes", c->direct_tuned);
    return s;
}
