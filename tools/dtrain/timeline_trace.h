/* A dtrun --timeline file read into spans: what `dtrain timeline` draws
 * (timeline_view.c) and what its --overlap summary measures
 * (timeline_overlap.c).  Tool-internal. */
#ifndef DTRAIN_TIMELINE_TRACE_H
#define DTRAIN_TIMELINE_TRACE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>

/* The span categories dtrain records (docs/observability.md), in a fixed
 * order: a span's `cat` indexes this list; anything else is the last,
 * "" (other). */
enum {
    TL_FORWARD,
    TL_BACKWARD,
    TL_RECOMPUTE,
    TL_DATA,
    TL_COMM,
    TL_BUCKET,
    TL_PIPELINE,
    TL_COPY,
    TL_OPTIMIZER,
    TL_CHECKPOINT,
    TL_OTHER,
    TL_NCATS
};
extern const char *const tl_cat_names[TL_NCATS];

typedef struct {
    double t0, t1; /* us, from the first event */
    int lane, cat, row;
    const cJSON *ev; /* name and args (the begin event of an async span) */
} span;

typedef struct {
    int pid;
    double tid; /* -1: the rank's async (bucket) lane */
    int rows;
    int index; /* in the order first seen, which spans refer to until sorted */
} lane;

typedef struct {
    cJSON *doc;
    span *spans;
    int nspans, capspans;
    lane *lanes;
    int nlanes, caplanes;
    double tmin, tmax;  /* us, absolute: the first and last event */
    double *step_start; /* us from tmin, per step; NAN where absent */
    int nsteps;         /* steps 0 .. nsteps-1 have room */
} trace;

/* o[key] as a string (NULL if absent or not one) / as a number (false). */
const char *tl_str(const cJSON *o, const char *key);
bool tl_num(const cJSON *o, const char *key, double *out);

/* The step of a training forward span (its args "step", not "training":
 * false), or -1. */
double tl_training_step(const cJSON *ev);

/* Read PATH: 0, or 1 (cannot read; out of memory) / 2 (not JSON, not a
 * Chrome trace, no spans) with the problem printed after "dtrain timeline: ".
 * Async spans ("b"/"e" pairs) go to their rank's lane of tid -1. */
int tl_read(const char *path, trace *t);
void tl_free(trace *t);

/* --overlap: per step of a data-parallel run, how long each rank waited for
 * its gradient buckets after its backward, split into a slower rank's
 * backward and communication, and a summary, written to o.  ts: the
 * ntraces files of one job (a multi-node dtrun's FILE, FILE.node1, ...),
 * read from paths.  0, or 1 when out of memory (printed). */
int tl_overlap(FILE *o, char **paths, const trace *ts, int ntraces);

#endif
