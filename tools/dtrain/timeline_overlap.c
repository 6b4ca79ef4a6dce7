/* dtrain timeline TRACE.json --overlap: where a data-parallel step's exposed
 * communication goes.  A rank that has finished its backward waits for its
 * last gradient bucket; that wait has two parts the trainer's
 * exposed_comm_s cannot tell apart:
 *   - the other ranks' backward still running (a slower rank: its buckets
 *     cannot complete anywhere before it has filled them), and
 *   - communication after the last rank's backward ended (the last buckets
 *     on the wire: what a faster link, smaller last buckets or more overlap
 *     would win).
 * Per step and rank: B = the end of its last backward span, L = the end of
 * its last bucket span begun in the step.  With Bmax the latest B of the
 * step, a rank's wait is max(0, L - B), of which min(wait, Bmax - B) is the
 * slower rank's and the rest communication; the step's tail is
 * max(L) - Bmax.  A step runs from a rank's first training forward of it to
 * that of the next.  Comparing ranks' times needs their clocks to agree
 * (one machine, or hosts kept in step by NTP or PTP): a bucket that ends
 * well before the last backward does says they do not.  The files of a
 * multi-node dtrun (FILE, FILE.node1, ...) are read together. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_cli.h"
#include "timeline_trace.h"

#define SKEW_US 1000.0 /* a tail below -1 ms: the clocks disagree */

typedef struct {
    double start, bwd_end, bucket_end; /* us from the trace's first event; NAN: none */
} rank_step;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double mean(const double *v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += v[i];
    return s / n;
}

/* The rank index of lane l's pid in pids[0 .. n). */
static int rank_of(const int *pids, int n, int pid)
{
    for (int i = 0; i < n; i++)
        if (pids[i] == pid)
            return i;
    return -1;
}

/* Each backward and bucket span into its rank's step (the last step whose
 * start is at or before the span's); times absolute (us). */
static void fill(const trace *ts, int ntraces, const int *pids, int nranks, rank_step *rs, int nsteps)
{
    for (int k = 0; k < ntraces; k++)
        for (int i = 0; i < ts[k].nspans; i++) {
            const span *sp = &ts[k].spans[i];
            int r = rank_of(pids, nranks, ts[k].lanes[sp->lane].pid);
            if (r < 0 || (sp->cat != TL_BACKWARD && sp->cat != TL_BUCKET))
                continue;
            double t0 = sp->t0 + ts[k].tmin, t1 = sp->t1 + ts[k].tmin;
            int s = nsteps - 1;
            while (s >= 0 && !(rs[r * nsteps + s].start <= t0))
                s--;
            if (s < 0)
                continue;
            rank_step *x = &rs[r * nsteps + s];
            double *end = sp->cat == TL_BACKWARD ? &x->bwd_end : &x->bucket_end;
            if (!(*end >= t1))
                *end = t1;
        }
}

int tl_overlap(FILE *o, char **paths, const trace *ts, int ntraces)
{
    int nlanes = 0;
    for (int k = 0; k < ntraces; k++)
        nlanes += ts[k].nlanes;
    int *pids = malloc((size_t)nlanes * sizeof *pids + 1), nranks = 0;
    if (!pids) {
        fprintf(stderr, "dtrain timeline: out of memory\n");
        return 1;
    }
    for (int k = 0; k < ntraces; k++)
        for (int l = 0; l < ts[k].nlanes; l++)
            if (rank_of(pids, nranks, ts[k].lanes[l].pid) < 0)
                pids[nranks++] = ts[k].lanes[l].pid;
    qsort(pids, (size_t)nranks, sizeof *pids, cmp_int);
    int nsteps = 0;
    for (int k = 0; k < ntraces; k++)
        for (int i = 0; i < ts[k].nspans; i++) {
            double s = tl_training_step(ts[k].spans[i].ev);
            if (s >= 0 && (int)s + 1 > nsteps)
                nsteps = (int)s + 1;
        }
    rank_step *rs = malloc((size_t)(nranks * nsteps) * sizeof *rs + 1);
    double *wait = malloc((size_t)(nranks * nsteps) * sizeof *wait + 1);
    double *slow = malloc((size_t)(nranks * nsteps) * sizeof *slow + 1);
    double *comm = malloc((size_t)(nranks * nsteps) * sizeof *comm + 1);
    double *tail = malloc((size_t)nsteps * sizeof *tail + 1);
    if (!rs || !wait || !slow || !comm || !tail) {
        free(pids), free(rs), free(wait), free(slow), free(comm), free(tail);
        fprintf(stderr, "dtrain timeline: out of memory\n");
        return 1;
    }
    for (int i = 0; i < nranks * nsteps; i++)
        rs[i] = (rank_step){NAN, NAN, NAN};
    for (int k = 0; k < ntraces; k++)
        for (int i = 0; i < ts[k].nspans; i++) {
            const span *sp = &ts[k].spans[i];
            double s = tl_training_step(sp->ev), t0 = sp->t0 + ts[k].tmin;
            int r = rank_of(pids, nranks, ts[k].lanes[sp->lane].pid);
            if (s >= 0 && r >= 0 && !(rs[r * nsteps + (int)s].start <= t0))
                rs[r * nsteps + (int)s].start = t0;
        }
    fill(ts, ntraces, pids, nranks, rs, nsteps);
    fprintf(o, "dtrain timeline: the gradient buckets against backward in %s%s (%d rank%s)\n", paths[0],
            ntraces > 1 ? " and the other files" : "", nranks, nranks == 1 ? "" : "s");
    fprintf(o, "%5s %8s %10s %9s  %s\n", "step", "slowest", "spread ms", "tail ms", "wait ms per rank (of it a slower rank's)");
    int used = 0, nw = 0, skewed = 0, first = -1;
    double worst_skew = 0;
    for (int s = 0; s < nsteps; s++) {
        double bmax = -INFINITY, bmin = INFINITY, lmax = -INFINITY;
        int slowest = -1;
        bool whole = true;
        for (int r = 0; r < nranks && whole; r++) {
            const rank_step *x = &rs[r * nsteps + s];
            whole = isfinite(x->bwd_end) && isfinite(x->bucket_end);
            if (whole && x->bwd_end > bmax) {
                bmax = x->bwd_end;
                slowest = r;
            }
            bmin = fmin(bmin, x->bwd_end);
            lmax = fmax(lmax, x->bucket_end);
        }
        if (!whole)
            continue; /* a step without buckets on some rank (no data parallelism, or cut short) */
        if (first < 0)
            first = s;
        double step_tail = (lmax - bmax) / 1e3;
        if (s != first) /* the first step sets up the connections: left out of the summary */
            tail[used++] = step_tail;
        if (lmax - bmax < -SKEW_US) {
            skewed++;
            worst_skew = fmin(worst_skew, (lmax - bmax) / 1e3);
        }
        fprintf(o, "%5d %8d %10.1f %9.1f ", s, pids[slowest], (bmax - bmin) / 1e3, step_tail);
        for (int r = 0; r < nranks; r++) {
            const rank_step *x = &rs[r * nsteps + s];
            double w = fmax(0, x->bucket_end - x->bwd_end) / 1e3, sl = fmin(w, (bmax - x->bwd_end) / 1e3);
            fprintf(o, " %.1f (%.1f)", w, sl);
            if (s != first) {
                wait[nw] = w;
                slow[nw++] = sl;
            }
        }
        fputc('\n', o);
    }
    if (first < 0) {
        fprintf(o, "no step has gradient buckets on every rank: --overlap needs a data-parallel run's timeline "
                   "(dtrun --timeline with dp > 1)\n");
    } else if (used == 0) {
        fprintf(o, "one step with buckets only (the first, which sets up the connections): nothing to sum up\n");
    } else {
        for (int i = 0; i < nw; i++)
            comm[i] = wait[i] - slow[i];
        double mw = mean(wait, nw), ms = mean(slow, nw), mc = mean(comm, nw), mt = mean(tail, used);
        double tmax = tail[0];
        for (int i = 1; i < used; i++)
            tmax = fmax(tmax, tail[i]);
        fprintf(o,
                "over %d steps (the first left out) and %d ranks, a rank waited after its backward %.1f ms a step "
                "(median %.1f): %.1f ms for a slower rank's backward (median %.1f), %.1f ms for communication "
                "(median %.1f)\n",
                used, nranks, mw, median(wait, nw), ms, median(slow, nw), mc, median(comm, nw));
        fprintf(o, "communication after the last rank's backward ended (tail): %.1f ms a step (median %.1f, most %.1f)\n",
                mt, median(tail, used), tmax);
    }
    if (skewed)
        fprintf(o,
                "note: in %d step%s the last bucket ended before the last rank's backward did (by up to %.1f ms): the "
                "ranks' clocks disagree by at least that much, and the split above is off by as much\n",
                skewed, skewed == 1 ? "" : "s", -worst_skew);
    free(pids), free(rs), free(wait), free(slow), free(comm), free(tail);
    return 0;
}
