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
 * multi-node dtrun (FILE, FILE.node1, ...) are read together.
 * Buckets are reduced within a data-parallel group only: under a pipeline
 * each stage's ranks form their own, and a stage ends its backward at its
 * own time by design.  Ranks are grouped by their buckets (how many, how
 * many bytes: a stage's ranks hold the same parameters), and each group is
 * measured on its own. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_cli.h"
#include "timeline_trace.h"

#define SKEW_US 1000.0 /* a tail below -1 ms: the clocks disagree */

typedef struct {
    double start, bwd_end, bucket_end; /* us from the trace's first event; NAN: none */
    int buckets;                       /* bucket spans begun in the step, and their bytes */
    double bytes;
} rank_step;

/* What the groups' tables add up, and the skew seen. */
typedef struct {
    double *wait, *slow, *comm, *tail; /* room for every rank's and step's */
    int skewed;
    double worst_skew;
} sums;

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

/* The rank index of pid in pids[0 .. n) (sorted), or -1. */
static int rank_of(const int *pids, int n, int pid)
{
    const int *at = bsearch(&pid, pids, (size_t)n, sizeof *pids, cmp_int);
    return at ? (int)(at - pids) : -1;
}

/* Each span into its rank's step (the last step whose start is at or before
 * the span's): the steps' starts first, then backward and bucket ends;
 * times absolute (us). */
static void fill(const trace *ts, int ntraces, const int *pids, int nranks, rank_step *rs, int nsteps)
{
    for (int k = 0; k < ntraces; k++)
        for (int i = 0; i < ts[k].nspans; i++) {
            const span *sp = &ts[k].spans[i];
            double s = tl_training_step(sp->ev), t0 = sp->t0 + ts[k].tmin;
            int r = rank_of(pids, nranks, ts[k].lanes[sp->lane].pid);
            if (s >= 0 && r >= 0 && !(rs[r * nsteps + (int)s].start <= t0))
                rs[r * nsteps + (int)s].start = t0;
        }
    for (int k = 0; k < ntraces; k++)
        for (int i = 0; i < ts[k].nspans; i++) {
            const span *sp = &ts[k].spans[i];
            int r = rank_of(pids, nranks, ts[k].lanes[sp->lane].pid);
            if (r < 0 || (sp->cat != TL_BACKWARD && sp->cat != TL_BUCKET))
                continue;
            double t0 = sp->t0 + ts[k].tmin, t1 = sp->t1 + ts[k].tmin, bytes = 0;
            int s = nsteps - 1;
            while (s >= 0 && !(rs[r * nsteps + s].start <= t0))
                s--;
            if (s < 0)
                continue;
            rank_step *x = &rs[r * nsteps + s];
            double *end = sp->cat == TL_BACKWARD ? &x->bwd_end : &x->bucket_end;
            if (!(*end >= t1))
                *end = t1;
            if (sp->cat == TL_BUCKET) {
                x->buckets++;
                if (tl_num(cJSON_GetObjectItemCaseSensitive(sp->ev, "args"), "bytes", &bytes))
                    x->bytes += bytes;
            }
        }
}

/* A rank's buckets in its first step with any: the group it belongs to
 * (ranks of one data-parallel group reduce the same buckets). */
static const rank_step *signature(const rank_step *rs, int r, int nsteps)
{
    for (int s = 0; s < nsteps; s++)
        if (rs[r * nsteps + s].buckets > 0)
            return &rs[r * nsteps + s];
    return NULL;
}

/* The rows of one group (ranks m[0 .. n), indices into pids) and its
 * summary. */
static void report_group(FILE *o, const int *pids, const int *m, int n, const rank_step *rs, int nsteps,
                         sums *u)
{
    fprintf(o, "%5s %8s %10s %9s  %s\n", "step", "slowest", "spread ms", "tail ms",
            "wait ms per rank (of it a slower rank's)");
    int used = 0, nw = 0, first = -1;
    for (int s = 0; s < nsteps; s++) {
        double bmax = -INFINITY, bmin = INFINITY, lmax = -INFINITY;
        int slowest = -1;
        bool whole = true;
        for (int i = 0; i < n && whole; i++) {
            const rank_step *x = &rs[m[i] * nsteps + s];
            whole = isfinite(x->bwd_end) && isfinite(x->bucket_end);
            if (whole && x->bwd_end > bmax) {
                bmax = x->bwd_end;
                slowest = m[i];
            }
            bmin = fmin(bmin, x->bwd_end);
            lmax = fmax(lmax, x->bucket_end);
        }
        if (!whole)
            continue; /* a step without buckets on some rank (cut short) */
        if (first < 0)
            first = s;
        double step_tail = (lmax - bmax) / 1e3;
        if (s != first) /* the first step sets up the connections: left out of the summary */
            u->tail[used++] = step_tail;
        if (lmax - bmax < -SKEW_US) {
            u->skewed++;
            u->worst_skew = fmin(u->worst_skew, (lmax - bmax) / 1e3);
        }
        fprintf(o, "%5d %8d %10.1f %9.1f ", s, pids[slowest], (bmax - bmin) / 1e3, step_tail);
        for (int i = 0; i < n; i++) {
            const rank_step *x = &rs[m[i] * nsteps + s];
            double w = fmax(0, x->bucket_end - x->bwd_end) / 1e3, sl = fmin(w, (bmax - x->bwd_end) / 1e3);
            fprintf(o, " %.1f (%.1f)", w, sl);
            if (s != first) {
                u->wait[nw] = w;
                u->slow[nw++] = sl;
            }
        }
        fputc('\n', o);
    }
    if (used == 0) {
        fprintf(
            o,
            "one step with buckets on every rank only (the first, which sets up the connections): nothing to "
            "sum up\n");
        return;
    }
    for (int i = 0; i < nw; i++)
        u->comm[i] = u->wait[i] - u->slow[i];
    double mw = mean(u->wait, nw), ms = mean(u->slow, nw), mc = mean(u->comm, nw), mt = mean(u->tail, used);
    double tmax = u->tail[0];
    for (int i = 1; i < used; i++)
        tmax = fmax(tmax, u->tail[i]);
    fprintf(
        o,
        "over %d steps (the first left out) and %d ranks, a rank waited after its backward %.1f ms a step "
        "(median %.1f): %.1f ms for a slower rank's backward (median %.1f), %.1f ms for communication "
        "(median %.1f)\n",
        used, n, mw, median(u->wait, nw), ms, median(u->slow, nw), mc, median(u->comm, nw));
    fprintf(o,
            "communication after the last rank's backward ended (tail): %.1f ms a step (median %.1f, most "
            "%.1f)\n",
            mt, median(u->tail, used), tmax);
}

int tl_overlap(FILE *o, char **paths, const trace *ts, int ntraces)
{
    int nlanes = 0, nsteps = 0, nranks = 0;
    for (int k = 0; k < ntraces; k++) {
        nlanes += ts[k].nlanes;
        for (int i = 0; i < ts[k].nspans; i++) {
            double s = tl_training_step(ts[k].spans[i].ev);
            if (s >= 0 && (int)s + 1 > nsteps)
                nsteps = (int)s + 1;
        }
    }
    int *pids = malloc((size_t)nlanes * sizeof *pids + 1),
        *group = malloc((size_t)nlanes * sizeof *group + 1);
    rank_step *rs = malloc((size_t)nlanes * (size_t)nsteps * sizeof *rs + 1);
    sums u = {0};
    size_t cells = (size_t)nlanes * (size_t)nsteps + 1;
    u.wait = malloc(cells * sizeof(double));
    u.slow = malloc(cells * sizeof(double));
    u.comm = malloc(cells * sizeof(double));
    u.tail = malloc(cells * sizeof(double));
    int code = 0;
    if (!pids || !group || !rs || !u.wait || !u.slow || !u.comm || !u.tail) {
        fprintf(stderr, "dtrain timeline: out of memory\n");
        code = 1;
        goto out;
    }
    for (int k = 0; k < ntraces; k++) /* every lane's pid, sorted, each once */
        for (int l = 0; l < ts[k].nlanes; l++)
            pids[nranks++] = ts[k].lanes[l].pid;
    qsort(pids, (size_t)nranks, sizeof *pids, cmp_int);
    int distinct = 0;
    for (int i = 0; i < nranks; i++)
        if (i == 0 || pids[i] != pids[i - 1])
            pids[distinct++] = pids[i];
    nranks = distinct;
    for (int i = 0; i < nranks * nsteps; i++)
        rs[i] = (rank_step){NAN, NAN, NAN, 0, 0};
    fill(ts, ntraces, pids, nranks, rs, nsteps);
    fprintf(o, "dtrain timeline: the gradient buckets against backward in %s%s (%d rank%s)\n", paths[0],
            ntraces > 1 ? " and the other files" : "", nranks, nranks == 1 ? "" : "s");
    int ngroups = 0, grouped = 0;
    for (int r = 0; r < nranks; r++) { /* group[r]: its group's first rank, -1 without buckets */
        const rank_step *a = signature(rs, r, nsteps);
        group[r] = -1;
        for (int q = 0; a && q < r && group[r] < 0; q++) { /* q: a group's first rank, its signature first */
            const rank_step *b = group[q] == q ? signature(rs, q, nsteps) : NULL;
            if (b && b->buckets == a->buckets && b->bytes == a->bytes)
                group[r] = q;
        }
        if (a && group[r] < 0) {
            group[r] = r;
            ngroups++;
        }
        grouped += a != NULL;
    }
    int *m = malloc((size_t)nranks * sizeof *m + 1);
    if (!m) {
        fprintf(stderr, "dtrain timeline: out of memory\n");
        code = 1;
        goto out;
    }
    for (int g = 0; g < nranks; g++) {
        if (group[g] != g)
            continue;
        int n = 0;
        for (int r = 0; r < nranks; r++)
            if (group[r] == g)
                m[n++] = r;
        if (n < 2) { /* a rank alone with its buckets: nothing to compare */
            grouped -= 1;
            ngroups--;
            continue;
        }
        if (ngroups > 1 || grouped < nranks) {
            fprintf(o, "ranks");
            for (int i = 0; i < n; i++)
                fprintf(o, " %d", pids[m[i]]);
            const rank_step *sig = signature(rs, g, nsteps);
            fprintf(o, ": a data-parallel group (%d buckets, %.0f bytes a step)\n", sig->buckets, sig->bytes);
        }
        report_group(o, pids, m, n, rs, nsteps, &u);
    }
    free(m);
    if (ngroups == 0)
        fprintf(
            o,
            "no two ranks reduce the same gradient buckets: --overlap needs the timeline of a run with DDP's "
            "buckets (data parallelism, alone or under a pipeline, on 2 or more ranks; ZeRO and the "
            "parameter server record none)\n");
    if (u.skewed)
        fprintf(o,
                "note: in %d step%s the last bucket ended before the last rank's backward did (by up to %.1f "
                "ms): the "
                "ranks' clocks disagree by at least that much, and the split above is off by as much\n",
                u.skewed, u.skewed == 1 ? "" : "s", -u.worst_skew);
out:
    free(pids), free(group), free(rs), free(u.wait), free(u.slow), free(u.comm), free(u.tail);
    return code;
}
