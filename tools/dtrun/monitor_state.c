/* dtrun --monitor: what the ranks report.  Each rank appends JSON lines to
 * DIR/rank<R>.jsonl (tools/dtrain/monitor_log.c: a start record, one record
 * per logged step with its per-step times and the bytes it sent so far, eval
 * and checkpoint records, an end record); the server thread reads what was
 * appended since its last look.  Only complete lines count, so a rank caught
 * mid-write, or killed, never yields half a record. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "monitor.h"
#include "json_whole.h"

#define MAX_POINTS 4096      /* per curve: beyond, every other point goes */
#define MAX_LINE (64 * 1024) /* a longer line is not a record: skipped */
#define MAX_RANKS (1 << 20)

typedef struct {
    bool seen, have_step, ended;
    off_t offset;
    char host[128];
    int pid, restart, code;
    long long step;
    double loss, lr, grad_norm, rate, step_s, compute_s, comm_s, exposed_s, elapsed_s;
    unsigned long long bytes_sent;
} mon_rank;

typedef struct {
    int n;
    long long step[MAX_POINTS];
    double a[MAX_POINTS], b[MAX_POINTS];
} mon_series;

static struct {
    char dir[4096];
    mon_rank *ranks;
    int nranks; /* allocated; ranks seen are marked */
    char unit[16];
    long long steps_target, ckpt_step;
    bool have_eval;
    long long eval_step;
    double eval_loss, eval_acc;
    mon_series train, eval; /* rank 0's: (loss, rate) and (eval loss, accuracy) */
} S;

void mon_put(mon_buf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void mon_printf(mon_buf *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof small) {
        mon_put(b, small, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->failed = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    mon_put(b, big, (size_t)n);
    free(big);
}

void mon_json_str(mon_buf *b, const char *s)
{
    mon_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            mon_printf(b, "\\%c", c);
        else if (c < 0x20 || c == '<') /* '<': no </script> inside a page either */
            mon_printf(b, "\\u%04x", c);
        else
            mon_put(b, (const char *)&c, 1);
    }
    mon_put(b, "\"", 1);
}

void mon_label_str(mon_buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            mon_printf(b, "\\%c", *s);
        else if (*s == '\n')
            mon_put(b, "\\n", 2);
        else
            mon_put(b, s, 1);
    }
}

void mon_state_init(const char *dir)
{
    memset(&S, 0, sizeof S);
    snprintf(S.dir, sizeof S.dir, "%s", dir);
    S.ckpt_step = -1;
}

void mon_state_free(void)
{
    free(S.ranks);
    S.ranks = NULL;
    S.nranks = 0;
}

static mon_rank *rank_slot(int r)
{
    if (r < 0 || r >= MAX_RANKS)
        return NULL;
    if (r >= S.nranks) {
        int n = S.nranks ? S.nranks : 8;
        while (n <= r)
            n *= 2;
        mon_rank *p = realloc(S.ranks, (size_t)n * sizeof *p);
        if (!p)
            return NULL;
        memset(p + S.nranks, 0, (size_t)(n - S.nranks) * sizeof *p);
        S.ranks = p;
        S.nranks = n;
    }
    return &S.ranks[r];
}

/* A restarted job goes back to its checkpoint's step: the curves drop what
 * lies at or after it (as the run that resumed replaces it), then grow. */
static void series_add(mon_series *s, long long step, double a, double b)
{
    while (s->n > 0 && s->step[s->n - 1] >= step)
        s->n--;
    if (s->n == MAX_POINTS) {
        int k = 0;
        for (int i = 0; i < s->n; i += 2, k++) {
            s->step[k] = s->step[i];
            s->a[k] = s->a[i];
            s->b[k] = s->b[i];
        }
        s->n = k;
    }
    s->step[s->n] = step;
    s->a[s->n] = a;
    s->b[s->n] = b;
    s->n++;
}

static bool num(const cJSON *o, const char *key, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return false;
    *out = v->valuedouble;
    return true;
}

static void record(int r, mon_rank *k, const char *line)
{
    cJSON *o = dt_json_parse_whole(line);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return;
    }
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "event");
    double v;
    if (cJSON_IsString(ev) && !strcmp(ev->valuestring, "start")) {
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "host"),
                    *u = cJSON_GetObjectItemCaseSensitive(o, "unit");
        if (cJSON_IsString(h))
            snprintf(k->host, sizeof k->host, "%s", h->valuestring);
        if (cJSON_IsString(u))
            snprintf(S.unit, sizeof S.unit, "%s", u->valuestring);
        k->pid = num(o, "pid", &v) ? (int)v : 0;
        k->restart = num(o, "restart", &v) ? (int)v : 0;
        if (num(o, "steps", &v))
            S.steps_target = (long long)v;
        k->ended = false;
    } else if (cJSON_IsString(ev) && !strcmp(ev->valuestring, "end")) {
        k->ended = true;
        k->code = num(o, "code", &v) ? (int)v : -1;
    } else if (cJSON_IsString(ev) && !strcmp(ev->valuestring, "checkpoint")) {
        if (num(o, "step", &v))
            S.ckpt_step = (long long)v;
    } else if (num(o, "eval_loss", &v)) {
        double step = 0, acc = 0;
        num(o, "step", &step);
        num(o, "eval_accuracy", &acc);
        if (r == 0) {
            S.have_eval = true;
            S.eval_step = (long long)step;
            S.eval_loss = v;
            S.eval_acc = acc;
            series_add(&S.eval, (long long)step, v, acc);
        }
    } else if (num(o, "loss", &v)) {
        double step = 0;
        num(o, "step", &step);
        k->have_step = true;
        k->step = (long long)step;
        k->loss = v;
        num(o, "lr", &k->lr);
        num(o, "grad_norm", &k->grad_norm);
        if (!num(o, "tokens_per_s", &k->rate))
            num(o, "samples_per_s", &k->rate);
        num(o, "step_s", &k->step_s);
        num(o, "compute_s", &k->compute_s);
        num(o, "comm_s", &k->comm_s);
        num(o, "exposed_comm_s", &k->exposed_s);
        num(o, "elapsed_s", &k->elapsed_s);
        if (num(o, "bytes_sent", &v))
            k->bytes_sent = (unsigned long long)v;
        if (r == 0)
            series_add(&S.train, k->step, k->loss, k->rate);
    }
    cJSON_Delete(o);
}

/* Read what rank r appended since the last look: complete lines only. */
static void tail(int r, mon_rank *k, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return;
    }
    if (st.st_size < k->offset) /* replaced: start over */
        k->offset = 0;
    char *buf = malloc(MAX_LINE + 1);
    while (buf && k->offset < st.st_size) {
        ssize_t got = pread(fd, buf, MAX_LINE, k->offset);
        if (got <= 0)
            break;
        buf[got] = '\0';
        char *line = buf, *nl;
        while ((nl = memchr(line, '\n', (size_t)(buf + got - line)))) {
            *nl = '\0';
            record(r, k, line);
            line = nl + 1;
        }
        if (line == buf) {
            if (got == MAX_LINE) { /* no newline in 64 KiB: not ours; skip to the next one */
                k->offset += got;
                continue;
            }
            break; /* a line still being written */
        }
        k->offset += line - buf;
    }
    free(buf);
    close(fd);
}

void mon_state_refresh(void)
{
    DIR *d = opendir(S.dir);
    if (!d)
        return;
    struct dirent *e;
    char path[4400];
    while ((e = readdir(d))) {
        int r, used = 0;
        if (sscanf(e->d_name, "rank%d.jsonl%n", &r, &used) != 1 || e->d_name[used] != '\0')
            continue;
        mon_rank *k = rank_slot(r);
        if (!k)
            continue;
        k->seen = true;
        snprintf(path, sizeof path, "%s/%s", S.dir, e->d_name);
        tail(r, k, path);
    }
    closedir(d);
}

static const mon_rank *lead(void)
{
    for (int r = 0; r < S.nranks; r++)
        if (S.ranks[r].seen && S.ranks[r].have_step)
            return &S.ranks[r];
    return NULL;
}

/* One metric family: HELP and TYPE, then a sample per rank that has one. */
typedef double (*rank_value)(const mon_rank *k);
#define FIELD(f)                                                                                             \
    static double get_##f(const mon_rank *k)                                                                 \
    {                                                                                                        \
        return (double)k->f;                                                                                 \
    }
FIELD(step)
FIELD(loss)
FIELD(rate)
FIELD(step_s)
FIELD(compute_s)
FIELD(comm_s)
FIELD(exposed_s)
FIELD(bytes_sent)
FIELD(lr)
FIELD(grad_norm)

static void family(mon_buf *b, const char *name, const char *type, const char *help, rank_value get)
{
    mon_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    for (int r = 0; r < S.nranks; r++) {
        const mon_rank *k = &S.ranks[r];
        if (!k->seen || !k->have_step)
            continue;
        mon_printf(b, "%s{rank=\"%d\",host=\"", name, r);
        mon_label_str(b, k->host);
        mon_printf(b, "\"} %.15g\n", get(k));
    }
}

static void gauge(mon_buf *b, const char *name, const char *type, const char *help, double v)
{
    mon_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.15g\n", name, help, name, type, name, v);
}

void mon_state_metrics(mon_buf *b)
{
    dtrun_mon_state state;
    int gen;
    char why[16];
    mon_job_get(&state, &gen, why, sizeof why);
    mon_printf(
        b, "# HELP dtrun_job_state The job's state: 1 for the current one.\n# TYPE dtrun_job_state gauge\n");
    for (int s = 0; mon_state_names[s]; s++)
        mon_printf(b, "dtrun_job_state{state=\"%s\"} %d\n", mon_state_names[s], (int)state == s);
    gauge(b, "dtrun_restarts_total", "counter",
          "Restarts of the job's ranks so far (generations after the first).", gen);
    int seen = 0;
    for (int r = 0; r < S.nranks; r++)
        seen += S.ranks[r].seen;
    gauge(b, "dtrun_ranks_reporting", "gauge", "Ranks whose records this dtrun reads.", seen);
    if (S.steps_target > 0)
        gauge(b, "dtrain_steps_planned", "gauge", "Steps the training runs in all.", (double)S.steps_target);
    gauge(b, "dtrain_last_checkpoint_step", "gauge",
          "Step of the newest checkpoint handed to the writer (-1: none yet).", (double)S.ckpt_step);
    if (S.have_eval) {
        gauge(b, "dtrain_eval_loss", "gauge", "Loss of the newest evaluation.", S.eval_loss);
        gauge(b, "dtrain_eval_accuracy", "gauge", "Accuracy of the newest evaluation (0..1).", S.eval_acc);
        gauge(b, "dtrain_eval_step", "gauge", "Step of the newest evaluation.", (double)S.eval_step);
    }
    family(b, "dtrain_step", "gauge", "Steps done, at the rank's newest logged step.", get_step);
    family(b, "dtrain_loss", "gauge", "Training loss at the newest logged step (the mean over the ranks).",
           get_loss);
    family(b, "dtrain_learning_rate", "gauge", "Learning rate at the newest logged step.", get_lr);
    family(b, "dtrain_grad_norm", "gauge", "Gradient norm at the newest logged step.", get_grad_norm);
    family(b, !strcmp(S.unit, "samples") ? "dtrain_samples_per_second" : "dtrain_tokens_per_second", "gauge",
           "The job's throughput over the newest logging window.", get_rate);
    family(b, "dtrain_step_seconds", "gauge", "Wall time per step over the newest logging window.",
           get_step_s);
    family(b, "dtrain_compute_seconds", "gauge",
           "Time per step outside communication waits (forward, backward, optimizer, data).", get_compute_s);
    family(b, "dtrain_comm_seconds", "gauge", "Communication time per step, overlapped or not.", get_comm_s);
    family(b, "dtrain_exposed_comm_seconds", "gauge",
           "Communication time per step not hidden behind compute: the rank waiting.", get_exposed_s);
    family(b, "dtrain_bytes_sent_total", "counter",
           "Payload bytes the rank sent to other ranks since it started (restarts begin again at 0).",
           get_bytes_sent);
}

static void json_num(mon_buf *b, double v)
{
    if (isfinite(v))
        mon_printf(b, "%.9g", v);
    else
        mon_put(b, "null", 4);
}

void mon_state_json(mon_buf *b, bool have_timeline)
{
    dtrun_mon_state state;
    int gen;
    char why[1024];
    mon_job_get(&state, &gen, why, sizeof why);
    const mon_rank *l = lead();
    mon_printf(b, "{\"state\":\"%s\",\"reason\":", mon_state_names[state]);
    mon_json_str(b, why);
    mon_printf(b, ",\"restarts\":%d,\"unit\":", gen);
    mon_json_str(b, S.unit[0] ? S.unit : "tokens");
    mon_printf(b, ",\"steps_planned\":%lld,\"last_checkpoint_step\":%lld,\"timeline\":%s,\"now\":%.3f",
               S.steps_target, S.ckpt_step, have_timeline ? "true" : "false", (double)time(NULL));
    if (l) {
        mon_printf(b, ",\"step\":%lld,\"loss\":", l->step);
        json_num(b, l->loss);
        mon_put(b, ",\"rate\":", 8);
        json_num(b, l->rate);
        mon_put(b, ",\"lr\":", 6);
        json_num(b, l->lr);
        mon_put(b, ",\"elapsed_s\":", 13);
        json_num(b, l->elapsed_s);
    }
    if (S.have_eval) {
        mon_printf(b, ",\"eval\":{\"step\":%lld,\"loss\":", S.eval_step);
        json_num(b, S.eval_loss);
        mon_put(b, ",\"accuracy\":", 12);
        json_num(b, S.eval_acc);
        mon_put(b, "}", 1);
    }
    mon_put(b, ",\"ranks\":[", 10);
    bool first = true;
    for (int r = 0; r < S.nranks; r++) {
        const mon_rank *k = &S.ranks[r];
        if (!k->seen)
            continue;
        mon_printf(b, "%s{\"rank\":%d,\"host\":", first ? "" : ",", r);
        mon_json_str(b, k->host);
        mon_printf(b, ",\"pid\":%d,\"restart\":%d,\"ended\":%s,\"code\":%d", k->pid, k->restart,
                   k->ended ? "true" : "false", k->code);
        if (k->have_step) {
            mon_printf(b, ",\"step\":%lld,\"step_s\":", k->step);
            json_num(b, k->step_s);
            mon_put(b, ",\"compute_s\":", 13);
            json_num(b, k->compute_s);
            mon_put(b, ",\"comm_s\":", 10);
            json_num(b, k->comm_s);
            mon_put(b, ",\"exposed_comm_s\":", 18);
            json_num(b, k->exposed_s);
            mon_printf(b, ",\"bytes_sent\":%llu", k->bytes_sent);
        }
        mon_put(b, "}", 1);
        first = false;
    }
    mon_put(b, "]", 1);
    const mon_series *ser[2] = {&S.train, &S.eval};
    const char *names[2][3] = {{"train", "loss", "rate"}, {"evals", "loss", "accuracy"}};
    for (int s = 0; s < 2; s++) {
        mon_printf(b, ",\"%s\":{\"step\":[", names[s][0]);
        for (int i = 0; i < ser[s]->n; i++)
            mon_printf(b, "%s%lld", i ? "," : "", ser[s]->step[i]);
        mon_printf(b, "],\"%s\":[", names[s][1]);
        for (int i = 0; i < ser[s]->n; i++) {
            if (i)
                mon_put(b, ",", 1);
            json_num(b, ser[s]->a[i]);
        }
        mon_printf(b, "],\"%s\":[", names[s][2]);
        for (int i = 0; i < ser[s]->n; i++) {
            if (i)
                mon_put(b, ",", 1);
            json_num(b, ser[s]->b[i]);
        }
        mon_put(b, "]}", 2);
    }
    mon_put(b, "}", 1);
}
