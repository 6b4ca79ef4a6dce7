/* dtrain timeline TRACE.json [-o FILE] [window]: a self-contained page (no
 * script, nothing loaded) drawing a window of a dtrun --timeline file as SVG,
 * for machines that cannot reach a trace viewer.  One lane per (rank,
 * thread), plus one per rank for its gradient buckets (asynchronous spans,
 * which overlap each other); spans are boxes coloured by category, nested
 * spans in rows below their parent, each with a tooltip of its name,
 * duration and args.
 *
 * The default window is two training steps from the middle of the run: a
 * step starts at its first training forward span (args "step"), so the
 * window runs from the first forward of step N to that of step N + 2.  A
 * trace without steps (another program's) shows 300 ms from its middle. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain_cli.h"
#include "timeline_trace.h"

static const char timeline_usage[] =
    "usage: dtrain timeline TRACE.json [-o PAGE.html] [--from-step N] [--steps K]\n"
    "                                  [--start-ms T] [--span-ms D]\n"
    "       dtrain timeline --overlap TRACE.json [TRACE.json.node1 ...]\n"
    "\n"
    "Draw a window of a dtrun --timeline file as a self-contained HTML page (SVG, no\n"
    "script): one lane per rank and thread (host:rank / thread name) and one per\n"
    "rank for its gradient buckets; spans as boxes coloured by category (forward,\n"
    "backward, recompute, data wait, collective, bucket, pipeline transfer,\n"
    "optimizer, checkpoint), nested spans below their parent, a tooltip per box\n"
    "(name, duration, args), and a time axis in ms from the trace's first event.\n"
    "\n"
    "options:\n"
    "  -o, --output FILE  where to write (default: TRACE with .json replaced by\n"
    "                     .html, or .html appended)\n"
    "      --from-step N  the window starts at training step N (its first forward)\n"
    "                     (default: the middle step of the run)\n"
    "      --steps K      and spans K steps (default 2)\n"
    "      --start-ms T   instead, a window of time: from T ms after the first event\n"
    "      --span-ms D    for D ms (default 300)\n"
    "  -h, --help         this help\n"
    "\n"
    "      --overlap      instead of a page, print per training step how long each\n"
    "                     rank waited for its gradient buckets after its backward,\n"
    "                     split into waiting for a slower rank's backward and\n"
    "                     communication after the last backward ended, and a\n"
    "                     summary (a data-parallel run; ranks on several hosts need\n"
    "                     clocks kept in step, by NTP or PTP); it reads the files\n"
    "                     of every node of a multi-node dtrun together\n"
    "\n"
    "Without step spans (a trace from another program), the window is 300 ms\n"
    "from the middle of the trace.\n"
    "\n"
    "Exit status: 0 written; 1 the file cannot be read or written; 2 a bad\n"
    "command line, a file that is not a Chrome trace, one without spans, or a\n"
    "window outside the run (the problem is named).\n";

/* The legend's names and colours, in timeline_trace.h's category order. */
static const struct {
    const char *label, *color;
} cats[TL_NCATS] = {
    {"forward", "#3b82f6"},           {"backward", "#f59e0b"},  {"recompute", "#a855f7"},
    {"data wait", "#94a3b8"},         {"collective", "#dc2626"}, {"bucket (allreduce)", "#16a34a"},
    {"pipeline transfer", "#06b6d4"}, {"tp copy's turn", "#0d9488"}, {"optimizer", "#92400e"},
    {"checkpoint", "#ec4899"},        {"other", "#a3a3a3"},
};

static const char *name_of(const trace *t, const char *meta, int pid, double tid)
{
    const cJSON *events =
        cJSON_IsArray(t->doc) ? t->doc : cJSON_GetObjectItemCaseSensitive(t->doc, "traceEvents");
    const cJSON *e;
    const char *name = NULL;
    cJSON_ArrayForEach(e, events) /* the last one given: a thread may be renamed */
    {
        double p = -1, d = -1;
        const char *ph = tl_str(e, "ph"), *n = tl_str(e, "name");
        if (ph && ph[0] == 'M' && n && !strcmp(n, meta) && tl_num(e, "pid", &p) && p == pid &&
            (tid < 0 || (tl_num(e, "tid", &d) && d == tid)))
            name = tl_str(cJSON_GetObjectItemCaseSensitive(e, "args"), "name");
    }
    return name;
}

static int by_lane(const void *a, const void *b)
{
    const lane *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if ((x->tid < 0) != (y->tid < 0)) /* the bucket lane after the rank's threads */
        return x->tid < 0 ? 1 : -1;
    return x->tid < y->tid ? -1 : x->tid > y->tid;
}

static int by_start(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->lane != y->lane)
        return x->lane - y->lane;
    if (x->t0 != y->t0)
        return x->t0 < y->t0 ? -1 : 1;
    return x->t1 > y->t1 ? -1 : x->t1 < y->t1; /* the parent before the child it starts with */
}

/* Lanes by rank, then thread, then the rank's bucket lane; the spans follow. */
static int sort_lanes(trace *t)
{
    if (t->nlanes > 1)
        qsort(t->lanes, (size_t)t->nlanes, sizeof *t->lanes, by_lane);
    int *to = malloc((size_t)t->nlanes * sizeof *to + 1);
    if (!to) {
        fprintf(stderr, "dtrain timeline: out of memory\n");
        return 1;
    }
    for (int l = 0; l < t->nlanes; l++)
        to[t->lanes[l].index] = l;
    for (int i = 0; i < t->nspans; i++)
        t->spans[i].lane = to[t->spans[i].lane];
    free(to);
    return 0;
}

/* Rows within each lane for the spans in [w0, w1]: a thread's spans nest, so
 * a span's row is the number of spans still open around it; the bucket lanes'
 * spans overlap without nesting, so each takes the first row free by then. */
#define MAXROWS 12
static void assign_rows(trace *t, double w0, double w1)
{
    if (t->nspans > 1)
        qsort(t->spans, (size_t)t->nspans, sizeof *t->spans, by_start);
    double open_end[MAXROWS];
    int depth = 0, cur = -1;
    for (int i = 0; i < t->nspans; i++) {
        span *s = &t->spans[i];
        if (s->t1 < w0 || s->t0 > w1)
            continue;
        if (s->lane != cur) {
            cur = s->lane;
            depth = 0;
        }
        if (t->lanes[s->lane].tid < 0) {
            int r = 0;
            while (r < depth && open_end[r] > s->t0)
                r++;
            if (r == depth && depth < MAXROWS)
                depth++;
            s->row = r < MAXROWS ? r : MAXROWS - 1;
            open_end[s->row] = s->t1;
        } else {
            while (depth > 0 && open_end[depth - 1] <= s->t0)
                depth--;
            s->row = depth < MAXROWS ? depth : MAXROWS - 1;
            if (depth < MAXROWS)
                open_end[depth++] = s->t1;
        }
        if (s->row + 1 > t->lanes[s->lane].rows)
            t->lanes[s->lane].rows = s->row + 1;
    }
}

/* ---- the page ---- */

#define PW 1360   /* the picture's width */
#define LABEL 200 /* the lane labels' column */
#define RIGHT 16
#define ROW 17 /* a row of boxes */
#define BOX 14
#define TOP 58 /* the legend and the axis above the lanes */

static void tooltip(FILE *o, const span *s)
{
    const char *name = tl_str(s->ev, "name");
    fputs("<title>", o);
    dtrain_html_text(o, name ? name : "?");
    fprintf(o, ": %.3f ms (at %.3f ms)", (s->t1 - s->t0) / 1e3, s->t0 / 1e3);
    const cJSON *a;
    cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(s->ev, "args"))
    {
        fprintf(o, "\n%s = ", a->string);
        if (cJSON_IsString(a))
            dtrain_html_text(o, a->valuestring);
        else if (cJSON_IsNumber(a))
            fprintf(o, "%.15g", a->valuedouble);
        else
            fputs(cJSON_IsTrue(a) ? "true" : cJSON_IsFalse(a) ? "false" : "-", o);
    }
    fputs("</title>", o);
}

static void write_page(FILE *o, const char *path, trace *t, double w0, double w1, const char *what)
{
    int lanes_h = 0;
    for (int l = 0; l < t->nlanes; l++)
        lanes_h += (t->lanes[l].rows ? t->lanes[l].rows : 1) * ROW + 6;
    int h = TOP + lanes_h + 24;
    double pw = PW - LABEL - RIGHT;
#define X(us) (LABEL + ((us)-w0) / (w1 - w0) * pw)
    fprintf(o, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>dtrain timeline: ");
    dtrain_html_text(o, path);
    fprintf(o, "</title>\n<style>body{font:14px/1.4 system-ui,sans-serif;margin:12px 16px;color:#1b1f24}"
               "h1{font-size:17px;margin:0 0 6px}svg text{font:11px system-ui,sans-serif;fill:#1b1f24}"
               "svg text.axis{fill:#57606a;font-size:10px}svg text.box{font-size:9.5px;fill:#fff}"
               "svg rect.box{stroke:#fff;stroke-width:0.5}p{color:#57606a;font-size:12px}</style></head>\n"
               "<body>\n<h1>dtrain timeline: ");
    dtrain_html_text(o, path);
    fprintf(o, " &#8212; %s</h1>\n", what);
    fprintf(o,
            "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\">\n",
            PW, h, PW, h);
    /* the legend */
    double lx = LABEL;
    for (int c = 0; c < TL_NCATS; c++) {
        fprintf(o,
                "<g class=\"legend\" data-cat=\"%s\"><rect x=\"%.0f\" y=\"4\" width=\"12\" height=\"12\" "
                "fill=\"%s\"/><text x=\"%.0f\" y=\"14\">%s</text></g>\n",
                tl_cat_names[c][0] ? tl_cat_names[c] : "other", lx, cats[c].color, lx + 16, cats[c].label);
        lx += 16 + 6.2 * strlen(cats[c].label) + 16;
    }
    /* the axis: ms from the trace's first event, ticks and grid lines */
    double st = dtrain_tick_step(w0 / 1e3, w1 / 1e3, 12);
    int dec = st >= 1 ? 0 : (int)ceil(-log10(st) - 1e-9);
    for (double ms = ceil(w0 / 1e3 / st) * st; ms <= w1 / 1e3; ms += st)
        fprintf(o,
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#e5e7eb\"/><text class=\"axis\" "
                "x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.*f</text>\n",
                X(ms * 1e3), X(ms * 1e3), TOP - 6, TOP + lanes_h, X(ms * 1e3), TOP - 10, dec, ms);
    fprintf(o, "<text class=\"axis\" x=\"%d\" y=\"%d\" text-anchor=\"end\">ms from the first event</text>\n",
            LABEL - 8, TOP - 10);
    /* the lanes, each with its label and its boxes */
    int y = TOP, s = 0;
    for (int l = 0; l < t->nlanes; l++) {
        lane *ln = &t->lanes[l];
        int lh = (ln->rows ? ln->rows : 1) * ROW + 6;
        bool first_of_rank = l == 0 || t->lanes[l - 1].pid != ln->pid;
        const char *proc = name_of(t, "process_name", ln->pid, -1);
        const char *thread = ln->tid < 0 ? "buckets" : name_of(t, "thread_name", ln->pid, ln->tid);
        char fallback[64];
        if (!thread) {
            snprintf(fallback, sizeof fallback, "thread %.0f", ln->tid);
            thread = fallback;
        }
        fprintf(o, "<g class=\"lane\" data-pid=\"%d\" data-thread=\"", ln->pid);
        dtrain_html_text(o, thread);
        fprintf(o, "\">\n<rect x=\"0\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n", y, PW, lh,
                ln->pid % 2 ? "#f6f8fa" : "#ffffff");
        if (first_of_rank)
            fprintf(o, "<line x1=\"0\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#8c959f\"/>\n", PW, y, y);
        fprintf(o, "<text x=\"4\" y=\"%d\"><tspan font-weight=\"600\">", y + 15);
        if (proc)
            dtrain_html_text(o, proc);
        else
            fprintf(o, "rank %d", ln->pid);
        fprintf(o, "</tspan> / ");
        dtrain_html_text(o, thread);
        fprintf(o, "</text>\n");
        for (; s < t->nspans && t->spans[s].lane == l; s++) {
            const span *sp = &t->spans[s];
            if (sp->t1 < w0 || sp->t0 > w1)
                continue;
            double x0 = X(fmax(sp->t0, w0)), x1 = X(fmin(sp->t1, w1));
            double bw = fmax(x1 - x0, 0.8);
            int by = y + 3 + sp->row * ROW;
            fprintf(o,
                    "<rect class=\"box\" data-cat=\"%s\" x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" "
                    "fill=\"%s\">",
                    tl_cat_names[sp->cat][0] ? tl_cat_names[sp->cat] : "other", x0, by, bw, BOX, cats[sp->cat].color);
            tooltip(o, sp);
            fprintf(o, "</rect>\n");
            const char *name = tl_str(sp->ev, "name");
            int fit = (int)((bw - 4) / 5.4); /* characters that fit */
            if (name && fit >= 3) {
                fprintf(o, "<text class=\"box\" x=\"%.1f\" y=\"%d\">", x0 + 2, by + 10);
                char cut[128];
                snprintf(cut, sizeof cut, "%.*s", fit < 120 ? fit : 120, name);
                dtrain_html_text(o, cut);
                fprintf(o, "</text>\n");
            }
        }
        fprintf(o, "</g>\n");
        y += lh;
    }
    fprintf(o, "<line x1=\"0\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#8c959f\"/>\n", PW, y, y);
    fprintf(
        o, "<text class=\"axis\" x=\"%d\" y=\"%d\">hover over a box for its name, duration and args</text>\n",
        LABEL, y + 16);
    fprintf(o, "</svg>\n<p>Written by dtrain %s timeline from ", DTRAIN_VERSION);
    dtrain_html_text(o, path);
    fprintf(o, " (%.1f ms of spans in all).</p>\n</body></html>\n", (t->tmax - t->tmin) / 1e3);
#undef X
}

static bool parse_num(const char *text, const char *opt, double lo, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || *end || !*text || !(v >= lo) || !isfinite(v)) {
        fprintf(stderr, "dtrain timeline: %s '%s' must be a number >= %g\n", opt, text, lo);
        return false;
    }
    *out = v;
    return true;
}

/* The window [w0, w1] in us from the first event, and its description; 0 or 2. */
static int pick_window(const trace *t, double from, double steps, double start_ms, double span_ms, double *w0,
                       double *w1, char *what, size_t len)
{
    double total = t->tmax - t->tmin;
    int first = -1, last = -1;
    for (int i = 0; i < t->nsteps; i++)
        if (isfinite(t->step_start[i])) {
            first = first < 0 ? i : first;
            last = i;
        }
    if (start_ms >= 0 || first < 0) {
        if (from >= 0) {
            fprintf(stderr, "dtrain timeline: --from-step: the trace has no training steps (no forward spans "
                            "with a \"step\" argument); use --start-ms\n");
            return 2;
        }
        span_ms = span_ms > 0 ? span_ms : 300;
        if (start_ms < 0) /* no steps: the middle of the trace */
            start_ms = fmax(0, (total / 1e3 - span_ms) / 2);
        if (start_ms * 1e3 >= total) {
            fprintf(stderr, "dtrain timeline: --start-ms %g is past the end of the trace (%.1f ms)\n",
                    start_ms, total / 1e3);
            return 2;
        }
        *w0 = start_ms * 1e3;
        *w1 = fmin(*w0 + span_ms * 1e3, total);
        snprintf(what, len, "%.1f to %.1f ms", *w0 / 1e3, *w1 / 1e3);
        return 0;
    }
    if (from > last) { /* (before any cast: from may be far past an int) */
        fprintf(stderr, "dtrain timeline: --from-step %g: the trace has steps %d to %d\n", from, first, last);
        return 2;
    }
    int n = steps > 0 ? (steps < last - first + 1 ? (int)steps : last - first + 1) : 2; /* at most the run */
    int s = from >= 0 ? (int)from : first + (last - first + 1 - n) / 2;
    if (s < first)
        s = first;
    if (from >= 0 && !isfinite(t->step_start[s])) {
        fprintf(stderr, "dtrain timeline: --from-step %g: the trace has steps %d to %d\n", from, first, last);
        return 2;
    }
    int e = s + n; /* the window ends where step e starts, or at the end of the trace */
    while (e <= last && !isfinite(t->step_start[e]))
        e++;
    double a = t->step_start[s], b = e <= last ? t->step_start[e] : total;
    double pad = 0.01 * (b - a);
    *w0 = fmax(0, a - pad);
    *w1 = fmin(total, b + pad);
    int shown = (e <= last ? e : last + 1) - s;
    snprintf(what, len, "step%s %d%s%.0d, %.1f to %.1f ms", shown > 1 ? "s" : "", s, shown > 1 ? " to " : "",
             shown > 1 ? s + shown - 1 : 0, *w0 / 1e3, *w1 / 1e3);
    return 0;
}

int dtrain_timeline(int argc, char **argv)
{
    enum { FROM = 1000, STEPS, START, SPAN, OVERLAP };
    static const struct option longopts[] = {{"output", required_argument, 0, 'o'},
                                             {"from-step", required_argument, 0, FROM},
                                             {"steps", required_argument, 0, STEPS},
                                             {"start-ms", required_argument, 0, START},
                                             {"span-ms", required_argument, 0, SPAN},
                                             {"overlap", no_argument, 0, OVERLAP},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    const char *out = NULL;
    double from = -1, steps = -1, start_ms = -1, span_ms = -1;
    bool overlap = false;
    int opt;
    opterr = 0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
        bool ok = true;
        switch (opt) {
        case 'o':
            out = optarg;
            break;
        case FROM:
            ok = parse_num(optarg, "--from-step", 0, &from);
            break;
        case STEPS:
            ok = parse_num(optarg, "--steps", 1, &steps);
            break;
        case START:
            ok = parse_num(optarg, "--start-ms", 0, &start_ms);
            break;
        case SPAN:
            ok = parse_num(optarg, "--span-ms", 0.001, &span_ms);
            break;
        case OVERLAP:
            overlap = true;
            break;
        case 'h':
            fputs(timeline_usage, stdout);
            return 0;
        case ':':
            fprintf(stderr, "dtrain timeline: %s needs a value (see dtrain timeline --help)\n",
                    argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "dtrain timeline: unexpected option '%s' (see dtrain timeline --help)\n",
                    argv[optind - 1]);
            return 2;
        }
        if (!ok)
            return 2;
    }
    if ((from >= 0 || steps > 0) && (start_ms >= 0 || span_ms > 0)) {
        fprintf(stderr, "dtrain timeline: a window of steps (--from-step, --steps) or of time (--start-ms, "
                        "--span-ms), not both\n");
        return 2;
    }
    if (overlap && (out || from >= 0 || steps > 0 || start_ms >= 0 || span_ms > 0)) {
        fprintf(stderr, "dtrain timeline: --overlap prints a summary of the whole run: it takes no page or window "
                        "options\n");
        return 2;
    }
    if (span_ms > 0 && start_ms < 0)
        start_ms = -2; /* --span-ms alone: from the middle, below */
    if (overlap) {
        if (argc == optind) {
            fprintf(stderr, "dtrain timeline: TRACE.json is required (see dtrain timeline --help)\n");
            return 2;
        }
        int n = argc - optind, code = 0;
        trace *ts = calloc((size_t)n, sizeof *ts);
        if (!ts) {
            fprintf(stderr, "dtrain timeline: out of memory\n");
            return 1;
        }
        for (int k = 0; k < n && code == 0; k++)
            code = tl_read(argv[optind + k], &ts[k]);
        if (code == 0)
            code = tl_overlap(stdout, argv + optind, ts, n);
        for (int k = 0; k < n; k++)
            tl_free(&ts[k]);
        free(ts);
        return code;
    }
    if (argc - optind != 1) {
        fprintf(stderr, "dtrain timeline: %s (see dtrain timeline --help)\n",
                argc == optind ? "TRACE.json is required" : "one TRACE file only");
        return 2;
    }
    const char *path = argv[optind];
    char def[4096];
    if (!out) {
        size_t n = strlen(path);
        if (n > 5 && !strcmp(path + n - 5, ".json"))
            snprintf(def, sizeof def, "%.*s.html", (int)(n - 5), path);
        else
            snprintf(def, sizeof def, "%s.html", path);
        out = def;
    }
    if (dtrain_same_file(path, out)) {
        fprintf(stderr, "dtrain timeline: -o %s is the trace itself: the page would replace it\n", out);
        return 2;
    }
    trace t = {0};
    int code = tl_read(path, &t);
    double w0 = 0, w1 = 0;
    char what[160];
    if (code == 0) {
        if (start_ms == -2) /* --span-ms alone */
            start_ms = fmax(0, ((t.tmax - t.tmin) / 1e3 - span_ms) / 2);
        code = pick_window(&t, from, steps, start_ms, span_ms, &w0, &w1, what, sizeof what);
    }
    if (code == 0)
        code = sort_lanes(&t);
    if (code == 0) {
        assign_rows(&t, w0, w1);
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp%d", out, (int)getpid());
        FILE *o = fopen(tmp, "w");
        if (o)
            write_page(o, path, &t, w0, w1, what);
        if (!o || fclose(o) != 0 || rename(tmp, out) != 0) {
            fprintf(stderr, "dtrain timeline: cannot write %s: %s\n", out, strerror(errno));
            unlink(tmp);
            code = 1;
        } else {
            int shown = 0;
            for (int i = 0; i < t.nspans; i++)
                shown += !(t.spans[i].t1 < w0 || t.spans[i].t0 > w1);
            int ranks = 0;
            for (int l = 0; l < t.nlanes; l++)
                ranks += l == 0 || t.lanes[l].pid != t.lanes[l - 1].pid;
            printf("dtrain timeline: %s (%s: %d of %d spans, %d ranks, %d lanes)\n", out, what, shown,
                   t.nspans, ranks, t.nlanes);
        }
    }
    tl_free(&t);
    return code;
}
