/* dtrain report METRICS.jsonl [-o report.html]: one self-contained page
 * (no script, no external file) with the loss (train and eval), learning
 * rate, gradient norm and throughput plotted against step as SVG drawn here,
 * and a summary table.  The metrics file is trusted for nothing: a line that
 * is not a record stops the report with its number. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrain_cli.h"
#include "json_whole.h"

static const char report_usage[] =
    "usage: dtrain report METRICS.jsonl [-o REPORT.html]\n"
    "\n"
    "Write a self-contained HTML page from a metrics file (the metrics_file key):\n"
    "the training and evaluation loss, learning rate, gradient norm and throughput\n"
    "against step (SVG, no script), and a summary table (steps, final and best\n"
    "losses, evaluation accuracy, mean throughput, time split, wall time).\n"
    "\n"
    "options:\n"
    "  -o, --output FILE  where to write (default: METRICS with .jsonl replaced by\n"
    "                     .html, or .html appended)\n"
    "  -h, --help         this help\n"
    "\n"
    "Exit status: 0 written; 1 the file cannot be read or written; 2 a bad\n"
    "command line or a line that is not a record (its number is named).\n";

typedef struct {
    int n, cap;
    double *x, *y;
} series;

typedef struct {
    series loss, lr, norm, rate, eval, acc;
    int records, evals;
    char unit[16];
    double compute, comm, exposed, elapsed, train_s;
    bool have_times;
} run;

static int add(series *s, double x, double y)
{
    while (s->n > 0 &&
           s->x[s->n - 1] >= x) /* a resumed run repeats steps: its records replace the old ones */
        s->n--;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        double *nx = realloc(s->x, (size_t)cap * sizeof *nx);
        if (!nx)
            return -1;
        s->x = nx;
        double *ny = realloc(s->y, (size_t)cap * sizeof *ny);
        if (!ny)
            return -1;
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->n++;
    return 0;
}

static void series_free(series *s)
{
    free(s->x);
    free(s->y);
}

static bool field(const cJSON *o, const char *key, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v))
        return false;
    *out = v->valuedouble;
    return true;
}

/* 0, or 2 with the message printed (naming the line). */
static int read_metrics(const char *path, run *r)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "dtrain report: cannot read %s: %s\n", path, strerror(errno));
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long no = 0;
    int code = 0;
    while (code == 0 && (len = getline(&line, &cap, f)) >= 0) {
        no++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (strspn(line, " \t") == (size_t)len)
            continue;
        cJSON *o = dt_json_parse_whole(line);
        double step, v;
        const char *why = NULL;
        if (!cJSON_IsObject(o))
            why = "not a JSON object";
        else if (cJSON_GetObjectItemCaseSensitive(o, "event"))
            ; /* dtrun --monitor's per-rank records, if one was given: not plotted */
        else if (!field(o, "step", &step) || step < 0 || step != floor(step))
            why = "no \"step\" (a non-negative integer)";
        else if (field(o, "eval_loss", &v)) {
            double acc = NAN, t;
            field(o, "eval_accuracy", &acc);
            if (add(&r->eval, step, v) || add(&r->acc, step, acc))
                why = "out of memory";
            if (field(o, "train_s", &t))
                r->train_s = t;
            if (field(o, "elapsed_s", &t))
                r->elapsed = fmax(r->elapsed, t);
            r->evals++;
        } else if (field(o, "loss", &v)) {
            double lr = NAN, norm = NAN, rate = NAN, t;
            field(o, "lr", &lr);
            field(o, "grad_norm", &norm);
            if (field(o, "tokens_per_s", &rate))
                snprintf(r->unit, sizeof r->unit, "tokens");
            else if (field(o, "samples_per_s", &rate))
                snprintf(r->unit, sizeof r->unit, "samples");
            if (add(&r->loss, step, v) || add(&r->lr, step, lr) || add(&r->norm, step, norm) ||
                add(&r->rate, step, rate))
                why = "out of memory";
            if (field(o, "compute_s", &t)) {
                r->have_times = true;
                r->compute += t;
            }
            if (field(o, "comm_s", &t))
                r->comm += t;
            if (field(o, "exposed_comm_s", &t))
                r->exposed += t;
            if (field(o, "elapsed_s", &t))
                r->elapsed = fmax(r->elapsed, t);
            r->records++;
        } else
            why = "neither a training record (\"loss\") nor an evaluation (\"eval_loss\")";
        if (why) {
            fprintf(stderr, "dtrain report: %s line %ld: %s: %.80s%s\n", path, no, why, line,
                    len > 80 ? "..." : "");
            code = 2;
        }
        cJSON_Delete(o);
    }
    free(line);
    if (code == 0 && ferror(f)) {
        fprintf(stderr, "dtrain report: cannot read %s: %s\n", path, strerror(errno));
        code = 1;
    }
    fclose(f);
    if (code == 0 && r->loss.n == 0 && r->eval.n == 0) {
        fprintf(stderr, "dtrain report: %s has no training or evaluation records%s\n", path,
                no ? "" : " (the file is empty)");
        code = 2;
    }
    return code;
}

/* ---- SVG ---- */

void dtrain_html_text(FILE *o, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", o);
            break;
        case '>':
            fputs("&gt;", o);
            break;
        case '&':
            fputs("&amp;", o);
            break;
        case '"':
            fputs("&quot;", o);
            break;
        default:
            fputc(*s, o);
        }
    }
}

double dtrain_tick_step(double lo, double hi, int n)
{
    double raw = (hi - lo) / n, mag = pow(10, floor(log10(raw)));
    for (int m = 1; m <= 10; m++)
        if ((m == 1 || m == 2 || m == 5 || m == 10) && m * mag >= raw)
            return m * mag;
    return 10 * mag;
}

static void tick_label(char *buf, size_t len, double v, double step)
{
    if (v != 0 && (fabs(v) >= 1e6 || fabs(v) < 1e-3))
        snprintf(buf, len, "%.2g", v);
    else {
        int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
        snprintf(buf, len, "%.*f", dec, v);
    }
}

typedef struct {
    const series *s;
    const char *name, *color;
    bool dots;
} line_spec;

#define W 640
#define H 260
#define ML 64
#define MR 16
#define MT 12
#define MB 34

static void plot(FILE *o, const char *id, const char *title, const line_spec *lines, int nlines, bool log_y)
{
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    int points = 0;
    for (int l = 0; l < nlines; l++)
        for (int i = 0; i < lines[l].s->n; i++) {
            double y = lines[l].s->y[i];
            if (!isfinite(y) || (log_y && y <= 0))
                continue;
            y = log_y ? log10(y) : y;
            x0 = fmin(x0, lines[l].s->x[i]);
            x1 = fmax(x1, lines[l].s->x[i]);
            y0 = fmin(y0, y);
            y1 = fmax(y1, y);
            points++;
        }
    fprintf(o,
            "<figure><figcaption>%s</figcaption>\n<svg id=\"%s\" xmlns=\"http://www.w3.org/2000/svg\" "
            "width=\"%d\" "
            "height=\"%d\" viewBox=\"0 0 %d %d\">\n",
            title, id, W, H, W, H);
    if (points == 0) {
        fprintf(o,
                "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">not in this file</text>\n</svg></figure>\n",
                W / 2, H / 2);
        return;
    }
    if (x1 == x0)
        x1 = x0 + 1;
    if (y1 == y0) {
        double d = fabs(y0) > 0 ? 0.1 * fabs(y0) : 1;
        y0 -= d;
        y1 += d;
    }
    double pad = 0.05 * (y1 - y0);
    y0 -= pad;
    y1 += pad;
#define PX(x) (ML + ((x)-x0) / (x1 - x0) * (W - ML - MR))
#define PY(y) (MT + (y1 - (y)) / (y1 - y0) * (H - MT - MB))
    fprintf(o, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#d0d7de\"/>\n", ML,
            MT, W - ML - MR, H - MT - MB);
    char label[32];
    if (log_y) { /* decades, and 2 and 5 within them when few decades */
        for (double d = floor(y0); d <= ceil(y1); d++)
            for (int m = 1; m <= 5; m += (m == 1 ? 1 : 3)) {
                double v = d + log10(m);
                if (v < y0 || v > y1 || (y1 - y0 > 2 && m != 1))
                    continue;
                snprintf(label, sizeof label, "%g", pow(10, v));
                fprintf(
                    o,
                    "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eef0f2\"/><text x=\"%d\" "
                    "y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                    ML, W - MR, PY(v), PY(v), ML - 5, PY(v) + 3.5, label);
            }
    } else {
        double st = dtrain_tick_step(y0, y1, 5);
        for (double t = ceil(y0 / st) * st; t <= y1; t += st) {
            tick_label(label, sizeof label, fabs(t) < st * 1e-9 ? 0 : t, st);
            fprintf(o,
                    "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eef0f2\"/><text x=\"%d\" "
                    "y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                    ML, W - MR, PY(t), PY(t), ML - 5, PY(t) + 3.5, label);
        }
    }
    double st = dtrain_tick_step(x0, x1, 6);
    for (double t = ceil(x0 / st) * st; t <= x1; t += st) {
        tick_label(label, sizeof label, t, st);
        fprintf(
            o,
            "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#57606a\"/><text x=\"%.1f\" y=\"%d\" "
            "text-anchor=\"middle\">%s</text>\n",
            PX(t), PX(t), H - MB, H - MB + 4, PX(t), H - MB + 16, label);
    }
    fprintf(o, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">step</text>\n", W - MR, H - 4);
    for (int l = 0; l < nlines; l++) {
        const series *s = lines[l].s;
        int n = 0;
        for (int i = 0; i < s->n; i++)
            n += isfinite(s->y[i]) && !(log_y && s->y[i] <= 0);
        fprintf(o,
                "<polyline class=\"%s\" data-points=\"%d\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" "
                "points=\"",
                lines[l].name, n, lines[l].color);
        for (int i = 0, k = 0; i < s->n; i++) {
            double y = s->y[i];
            if (!isfinite(y) || (log_y && y <= 0))
                continue;
            fprintf(o, "%s%.1f,%.1f", k++ ? " " : "", PX(s->x[i]), PY(log_y ? log10(y) : y));
        }
        fprintf(o, "\"/>\n");
        for (int i = 0; lines[l].dots && i < s->n; i++)
            if (isfinite(s->y[i]))
                fprintf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", PX(s->x[i]),
                        PY(s->y[i]), lines[l].color);
    }
#undef PX
#undef PY
    if (nlines > 1) /* a legend */
        for (int l = 0; l < nlines; l++)
            fprintf(o,
                    "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" fill=\"%s\" style=\"fill:%s\">%s</text>\n",
                    W - MR - 6, MT + 14 + 13 * l, lines[l].color, lines[l].color, lines[l].name);
    fprintf(o, "</svg></figure>\n");
}

/* ---- the summary ---- */

static void row(FILE *o, const char *key, const char *what, double v, const char *fmt, const char *note)
{
    char text[64];
    if (!isfinite(v))
        snprintf(text, sizeof text, "-");
    else
        snprintf(text, sizeof text, fmt, v);
    fprintf(o, "<tr><th>%s</th><td data-key=\"%s\" data-value=\"%.9g\">%s</td><td>%s</td></tr>\n", what, key,
            v, text, note ? note : "");
}

static void best(const series *s, bool lowest, double *v, double *at)
{
    *v = NAN;
    *at = NAN;
    for (int i = 0; i < s->n; i++)
        if (isfinite(s->y[i]) && (!isfinite(*v) || (lowest ? s->y[i] < *v : s->y[i] > *v))) {
            *v = s->y[i];
            *at = s->x[i];
        }
}

static double last(const series *s)
{
    return s->n ? s->y[s->n - 1] : NAN;
}

static double mean(const series *s)
{
    double sum = 0;
    int n = 0;
    for (int i = 0; i < s->n; i++)
        if (isfinite(s->y[i])) {
            sum += s->y[i];
            n++;
        }
    return n ? sum / n : NAN;
}

static void write_page(FILE *o, const char *path, const run *r)
{
    fprintf(o, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>dtrain report: ");
    dtrain_html_text(o, path);
    fprintf(
        o,
        "</title>\n<style>body{font:14px/1.4 system-ui,sans-serif;margin:16px 24px;color:#1b1f24}"
        "h1{font-size:18px}figure{display:inline-block;margin:8px 16px 8px 0;border:1px solid #d0d7de;"
        "border-radius:4px;padding:6px}figcaption{font-weight:600;font-size:13px}"
        "svg text{font:10px system-ui,sans-serif;fill:#57606a}table{border-collapse:collapse;"
        "font-variant-numeric:tabular-nums}th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left}"
        "td{text-align:right}td:last-child{text-align:left;color:#57606a}</style></head>\n<body>\n<h1>dtrain "
        "report: ");
    dtrain_html_text(o, path);
    fprintf(o, "</h1>\n<table id=\"summary\">\n");
    double v, at;
    char note[96];
    double steps = r->loss.n ? r->loss.x[r->loss.n - 1] : r->eval.x[r->eval.n - 1];
    row(o, "steps", "steps", steps, "%.0f", NULL);
    row(o, "records", "training records", r->records, "%.0f", "one per logged step (log_interval)");
    row(o, "final_loss", "final training loss", last(&r->loss), "%.4f", NULL);
    best(&r->loss, true, &v, &at);
    snprintf(note, sizeof note, isfinite(at) ? "at step %.0f" : "-", at);
    row(o, "best_loss", "lowest training loss", v, "%.4f", note);
    row(o, "final_eval_loss", "final evaluation loss", last(&r->eval), "%.4f", NULL);
    best(&r->eval, true, &v, &at);
    snprintf(note, sizeof note, isfinite(at) ? "at step %.0f" : "-", at);
    row(o, "best_eval_loss", "lowest evaluation loss", v, "%.4f", note);
    row(o, "final_eval_accuracy", "final evaluation accuracy", 100 * last(&r->acc), "%.2f%%", NULL);
    best(&r->acc, false, &v, &at);
    snprintf(note, sizeof note, isfinite(at) ? "at step %.0f" : "-", at);
    row(o, "best_eval_accuracy", "best evaluation accuracy", 100 * v, "%.2f%%", note);
    snprintf(note, sizeof note, "%s/s, the mean of the logged windows", r->unit[0] ? r->unit : "items");
    row(o, "mean_throughput", "mean throughput", mean(&r->rate), "%.1f", note);
    if (r->have_times && r->compute + r->exposed > 0) {
        row(o, "compute_share", "compute share of step time", 100 * r->compute / (r->compute + r->exposed),
            "%.1f%%", "outside communication waits");
        row(o, "exposed_comm_share", "exposed communication", 100 * r->exposed / (r->compute + r->exposed),
            "%.1f%%",
            "waiting for communication compute did not hide, or for a slower rank (dtrain timeline "
            "--overlap tells which)");
    }
    row(o, "wall_s", "wall time", r->elapsed, "%.1f s", "elapsed_s of the last record");
    if (r->train_s > 0)
        row(o, "train_s", "training time at the last evaluation", r->train_s, "%.1f s",
            "wall time less evaluation");
    fprintf(o, "</table>\n");
    char rate_title[64];
    snprintf(rate_title, sizeof rate_title, "throughput (%s/s)", r->unit[0] ? r->unit : "items");
    line_spec loss[] = {{&r->loss, "train-loss", "#2563eb", false}, {&r->eval, "eval-loss", "#dc2626", true}};
    plot(o, "loss", "loss", loss, r->eval.n ? 2 : 1, false);
    plot(o, "lr", "learning rate", &(line_spec){&r->lr, "lr", "#7c3aed", false}, 1, false);
    plot(o, "grad-norm", "gradient norm", &(line_spec){&r->norm, "grad-norm", "#ea580c", false}, 1, false);
    plot(o, "throughput", rate_title, &(line_spec){&r->rate, "throughput", "#059669", false}, 1, false);
    fprintf(o, "<p style=\"color:#57606a\">Written by dtrain %s report from ", DTRAIN_VERSION);
    dtrain_html_text(o, path);
    fprintf(o, ".</p>\n</body></html>\n");
}

bool dtrain_same_file(const char *in, const char *out)
{
    struct stat a, b;
    return stat(in, &a) == 0 && stat(out, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

int dtrain_report(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"output", required_argument, 0, 'o'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *out = NULL;
    int opt;
    opterr = 0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'o':
            out = optarg;
            break;
        case 'h':
            fputs(report_usage, stdout);
            return 0;
        case ':':
            fprintf(stderr, "dtrain report: %s needs a value (see dtrain report --help)\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "dtrain report: unexpected option '%s' (see dtrain report --help)\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "dtrain report: %s (see dtrain report --help)\n",
                argc == optind ? "METRICS.jsonl is required" : "one METRICS file only");
        return 2;
    }
    const char *path = argv[optind];
    char def[4096];
    if (!out) {
        size_t n = strlen(path);
        if (n > 6 && !strcmp(path + n - 6, ".jsonl"))
            snprintf(def, sizeof def, "%.*s.html", (int)(n - 6), path);
        else
            snprintf(def, sizeof def, "%s.html", path);
        out = def;
    }
    if (dtrain_same_file(path, out)) {
        fprintf(stderr, "dtrain report: -o %s is the metrics file itself: the page would replace it\n", out);
        return 2;
    }
    run r = {0};
    int code = read_metrics(path, &r);
    if (code == 0) {
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp%d", out, (int)getpid());
        FILE *o = fopen(tmp, "w");
        if (o)
            write_page(o, path, &r);
        if (!o || fclose(o) != 0 || rename(tmp, out) != 0) {
            fprintf(stderr, "dtrain report: cannot write %s: %s\n", out, strerror(errno));
            unlink(tmp);
            code = 1;
        } else
            printf("dtrain report: %s (%d training records, %d evaluations, up to step %.0f)\n", out,
                   r.records, r.evals, r.loss.n ? r.loss.x[r.loss.n - 1] : r.eval.x[r.eval.n - 1]);
    }
    series *all[] = {&r.loss, &r.lr, &r.norm, &r.rate, &r.eval, &r.acc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        series_free(all[i]);
    return code;
}
