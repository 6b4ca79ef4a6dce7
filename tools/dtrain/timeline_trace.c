/* Reading a dtrun --timeline file (timeline_trace.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_whole.h"
#include "dtrain_cli.h"
#include "timeline_trace.h"

const char *const tl_cat_names[TL_NCATS] = {"forward",   "backward",   "recompute", "data",
                                            "comm",      "bucket",     "pipeline",  "copy",
                                            "optimizer", "checkpoint", ""};

static int cat_index(const char *cat)
{
    for (int i = 0; cat && i < TL_OTHER; i++)
        if (!strcmp(tl_cat_names[i], cat))
            return i;
    return TL_OTHER;
}

const char *tl_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

bool tl_num(const cJSON *o, const char *key, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v))
        return false;
    *out = v->valuedouble;
    return true;
}

static int lane_of(trace *t, int pid, double tid)
{
    for (int i = 0; i < t->nlanes; i++)
        if (t->lanes[i].pid == pid && t->lanes[i].tid == tid)
            return i;
    if (t->nlanes == t->caplanes) {
        int cap = t->caplanes ? 2 * t->caplanes : 16;
        lane *n = realloc(t->lanes, (size_t)cap * sizeof *n);
        if (!n)
            return -1;
        t->lanes = n;
        t->caplanes = cap;
    }
    t->lanes[t->nlanes] = (lane){pid, tid, 0, t->nlanes};
    return t->nlanes++;
}

static int add_span(trace *t, int pid, double tid, double t0, double t1, const cJSON *ev)
{
    int l = lane_of(t, pid, tid);
    if (l < 0)
        return -1;
    if (t->nspans == t->capspans) {
        int cap = t->capspans ? 2 * t->capspans : 1024;
        span *n = realloc(t->spans, (size_t)cap * sizeof *n);
        if (!n)
            return -1;
        t->spans = n;
        t->capspans = cap;
    }
    const char *cat = tl_str(ev, "cat");
    t->spans[t->nspans++] = (span){t0, t1, l, cat_index(cat), 0, ev};
    return 0;
}

/* A training forward span of step s starting at ts (absolute us). */
static int note_step(trace *t, double s, double ts)
{
    if (!(s >= 0 && s < 1e8))
        return 0;
    int step = (int)s;
    if (step >= t->nsteps) {
        int n = step + 64;
        double *ns = realloc(t->step_start, (size_t)n * sizeof *ns);
        if (!ns)
            return -1;
        for (int i = t->nsteps; i < n; i++)
            ns[i] = NAN;
        t->step_start = ns;
        t->nsteps = n;
    }
    if (!(t->step_start[step] <= ts))
        t->step_start[step] = ts;
    return 0;
}

/* 0, or 1 / 2 with the problem printed. */
/* A time in microseconds a trace may hold: finite and below about 3000
 * years (1e17 us; dtrun's stamps are microseconds since 1970, 1.8e15 in
 * 2026), so that every figure printed from it is a number, not 300 digits. */
static bool sane_time(double us) { return isfinite(us) && fabs(us) < 1e17; }

int tl_read(const char *path, trace *t)
{
    char *text = NULL;
    if (dt_read_file(path, &text, NULL) != DT_OK) {
        fprintf(stderr, "dtrain timeline: cannot read %s: %s\n", path, strerror(errno));
        return 1;
    }
    t->doc = dt_json_parse_whole(text);
    if (!t->doc) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= text && at <= text + strlen(text) ? (long)(at - text) : -1;
        fprintf(stderr, "dtrain timeline: %s is not valid JSON%s", path, off >= 0 ? "" : "\n");
        if (off >= 0)
            fprintf(stderr, " (at byte %ld: %.40s%s)\n", off, *at ? at : "the end of the file",
                    strlen(at) > 40 ? "..." : "");
        free(text);
        return 2;
    }
    free(text);
    const cJSON *events =
        cJSON_IsArray(t->doc) ? t->doc : cJSON_GetObjectItemCaseSensitive(t->doc, "traceEvents");
    if (!cJSON_IsArray(events)) {
        fprintf(stderr, "dtrain timeline: %s is not a Chrome trace (no \"traceEvents\" array)\n", path);
        return 2;
    }
    t->tmin = INFINITY;
    t->tmax = -INFINITY;
    const cJSON *e;
    cJSON_ArrayForEach(e, events)
    { /* the extent first: spans are kept relative to tmin */
        double ts, dur = 0;
        const char *ph = tl_str(e, "ph");
        if (ph && ph[0] && strchr("Xbe", ph[0]) && tl_num(e, "ts", &ts) && sane_time(ts)) {
            tl_num(e, "dur", &dur);
            if (!sane_time(dur) || dur < 0)
                continue; /* (not a span: skipped below too) */
            t->tmin = fmin(t->tmin, ts);
            t->tmax = fmax(t->tmax, ts + dur);
        }
    }
    if (!isfinite(t->tmin)) {
        fprintf(stderr,
                "dtrain timeline: %s has no spans (%d events, none of them a span: \"ph\" \"X\", "
                "or \"b\" and \"e\")\n",
                path, cJSON_GetArraySize(events));
        return 2;
    }
    /* async begins waiting for their ends: few at a time (the buckets in flight) */
    const cJSON **open = NULL;
    int nopen = 0, capopen = 0;
    cJSON_ArrayForEach(e, events)
    {
        const char *ph = tl_str(e, "ph"), *id = tl_str(e, "id");
        double ts, dur, pid = 0, tid = 0, step;
        tl_num(e, "pid", &pid);
        tl_num(e, "tid", &tid);
        if (!ph || !tl_num(e, "ts", &ts) || !sane_time(ts))
            continue;
        int fail = 0;
        if (ph[0] == 'X' && tl_num(e, "dur", &dur) && sane_time(dur) && dur >= 0) {
            fail = add_span(t, (int)pid, tid, ts - t->tmin, ts + dur - t->tmin, e);
            if (!fail && (step = tl_training_step(e)) >= 0)
                fail = note_step(t, step, ts - t->tmin);
        } else if (ph[0] == 'b' && id) {
            if (nopen == capopen) {
                capopen = capopen ? 2 * capopen : 64;
                const cJSON **n = realloc(open, (size_t)capopen * sizeof *n);
                fail = !n;
                if (n)
                    open = n;
            }
            if (!fail)
                open[nopen++] = e;
        } else if (ph[0] == 'e' && id) {
            for (int i = nopen - 1; i >= 0; i--) {
                double bpid = 0, bts = 0;
                tl_num(open[i], "pid", &bpid);
                tl_num(open[i], "ts", &bts);
                if (bpid == pid && !strcmp(tl_str(open[i], "id"), id)) {
                    fail = add_span(t, (int)pid, -1, bts - t->tmin, ts - t->tmin, open[i]);
                    open[i] = open[--nopen];
                    break;
                }
            }
        }
        if (fail) {
            free(open);
            fprintf(stderr, "dtrain timeline: out of memory reading %s\n", path);
            return 1;
        }
    }
    free(open); /* begins without an end (a rank killed mid-bucket) are not drawn */
    if (t->nspans == 0) { /* (begins with no end, say) */
        fprintf(stderr, "dtrain timeline: %s has no spans (%d events, none of them a whole span)\n", path,
                cJSON_GetArraySize(events));
        return 2;
    }
    return 0;
}

double tl_training_step(const cJSON *ev)
{
    double step;
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(ev, "args");
    const char *cat = tl_str(ev, "cat");
    if (!cat || strcmp(cat, "forward") || !tl_num(args, "step", &step) ||
        cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(args, "training")) || !(step >= 0 && step < 1e8))
        return -1;
    return step;
}

void tl_free(trace *t)
{
    free(t->spans);
    free(t->lanes);
    free(t->step_start);
    cJSON_Delete(t->doc);
}
