/* The pipeline bubble and activation memory of the three schedules, under
 * dtrun: the world is one pipeline group of P ranks.
 *
 * Bubble (default mode): the synthetic delay model (dt_delay_describe),
 * P * 2 * K blocks that sleep FWD ms forward and BWD ms backward each, the
 * same model for every schedule (GPipe and 1F1B: 2K blocks per stage;
 * interleaved, v = 2: two chunks of K).  For each schedule and number of
 * micro-batches m, STEPS steps, each after a dt_barrier over the pipeline;
 * the first is a warm-up and is not counted.  From the step's timeline
 * (dt_strategy_pipeline_timeline) each stage's idle fraction is
 * 1 - busy / T: busy the sum of (end - ready) over its actions, T the whole
 * pipeline's span (the latest end over all ranks minus the earliest
 * begin).  Theory for uniform stages: (p-1) / (m+p-1) for GPipe and 1F1B,
 * (p-1) / (v*m+p-1) interleaved.  With --picture M, the timeline of the
 * last step of each schedule at m = M is drawn, one row per rank (per rank
 * and chunk when interleaved).
 *
 * Memory (--gpt): gpt-small (configs/gpt-small.json: vocab 256, context 128,
 * 6 layers, 6 heads, d 384) on P stages, M micro-batches of 2 sequences,
 * real compute: each stage's peak activation bytes held at once and the
 * most micro-batches in flight, for each schedule.
 *
 * Tables go to stdout from rank 0 (Markdown). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrain/dtrain.h"

#define SEED 1234
#define MB 2     /* samples per micro-batch */
#define V 2      /* virtual stages per rank, interleaved */
#define MAXM 64  /* micro-batches per step, at most */
#define EV_VALS 6 /* an event on the wire: kind, micro, chunk, begin, ready, end */

static int rank;
static FILE *pictures; /* drawn timelines, printed after the table (rank 0) */

#define CALL(x)                                                                                        \
    do {                                                                                               \
        dt_status s_ = (x);                                                                            \
        if (s_ != DT_OK) {                                                                             \
            fprintf(stderr, "pp_bubble rank %d: %s failed: %s: %s\n", rank, #x, dt_status_name(s_),    \
                    dt_last_error());                                                                  \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

static const char usage[] =
    "usage: dtrun -n P pp_bubble [options]            the bubble of each schedule (delay model)\n"
    "       dtrun -n P pp_bubble --gpt [options]      activation memory of each schedule (gpt-small)\n"
    "  --micro LIST      numbers of micro-batches, comma-separated (default 1,4,8,16; --gpt: 8)\n"
    "  --schedules LIST  of gpipe,1f1b,interleaved (default all three; interleaved runs v=2 and only\n"
    "                    where m is a multiple of P)\n"
    "  --steps N         steps per configuration, the first one not counted (default 3; --gpt: 2)\n"
    "  --k K             delay blocks per interleaved chunk: the model has P*2*K (default 2)\n"
    "  --fwd-ms F        forward sleep per block, ms (default 2)\n"
    "  --bwd-ms B        backward sleep per block, ms (default 4)\n"
    "  --dim D           the delay model's width (default 64)\n"
    "  --picture M       draw the last step's timeline of each schedule at m = M (default: none)\n"
    "  --cols C          characters across a timeline (default 100)\n"
    "  --header          print the table's header row (rank 0)\n";

typedef struct {
    bool gpt;
    dt_gpt_config g;
    int64_t dim;
    float x[MB * 128];
    int32_t y[MB * 128];
    int next;
    int64_t step;
} feed;

static dt_status next_batch(void *user, dt_micro_batch *mb)
{
    feed *f = user;
    dt_rng g;
    dt_rng_seed(&g, dt_rng_key_stream(&(dt_rng_key){SEED, (uint64_t)f->step, (uint32_t)f->next++, 0}, 3));
    if (f->gpt) {
        int64_t T = f->g.context, Vc = f->g.vocab;
        for (int64_t j = 0; j < MB * T; j++) {
            f->x[j] = (float)((int64_t)(dt_rng_uniform(&g) * (double)Vc) % Vc);
            f->y[j] = (int32_t)((int64_t)(dt_rng_uniform(&g) * (double)Vc) % Vc);
        }
        mb->x = dt_tensor_view(f->x, 2, (int64_t[]){MB, T});
        mb->ntargets = MB * T;
    } else {
        for (int64_t j = 0; j < MB * f->dim; j++)
            f->x[j] = (float)(dt_rng_uniform(&g) * 2 - 1);
        for (int j = 0; j < MB; j++)
            f->y[j] = (int32_t)((int64_t)(dt_rng_uniform(&g) * (double)f->dim) % f->dim);
        mb->x = dt_tensor_view(f->x, 2, (int64_t[]){MB, f->dim});
        mb->ntargets = MB;
    }
    mb->targets = f->y;
    return DT_OK;
}

typedef struct {
    int micro[16], nmicro;
    dt_pipe_schedule sched[3];
    int nsched;
    int steps, k, picture, cols;
    double fwd_ms, bwd_ms;
    int64_t dim;
    bool gpt, header;
} options;

static int parse_list(const char *s, int *out, int cap)
{
    int n = 0;
    char *copy = strdup(s), *save = NULL;
    if (!copy)
        return -1;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        long v = strtol(t, &end, 10);
        if (*end || v < 1 || v > MAXM || n == cap) {
            free(copy);
            return -1;
        }
        out[n++] = (int)v;
    }
    free(copy);
    return n;
}

static int parse_schedules(const char *s, dt_pipe_schedule *out)
{
    int n = 0;
    char *copy = strdup(s), *save = NULL;
    if (!copy)
        return -1;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == 3 || dt_pipe_schedule_parse(t, &out[n]) != DT_OK) {
            free(copy);
            return -1;
        }
        n++;
    }
    free(copy);
    return n;
}

static bool parse_number(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (*end || !(v >= lo && v <= hi))
        return false;
    *out = v;
    return true;
}

/* Exits 2 with a message on a bad argument, 0 after --help. */
static options parse(int argc, char **argv)
{
    options o = {.micro = {1, 4, 8, 16}, .nmicro = 4, .sched = {DT_PIPE_GPIPE, DT_PIPE_1F1B, DT_PIPE_INTERLEAVED},
                 .nsched = 3, .steps = 3, .k = 2, .cols = 100, .fwd_ms = 2, .bwd_ms = 4, .dim = 64};
    bool micro_set = false, steps_set = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        double d = 0;
        bool ok = true;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            exit(0);
        } else if (!strcmp(a, "--gpt"))
            o.gpt = true;
        else if (!strcmp(a, "--header"))
            o.header = true;
        else if (!val)
            ok = false;
        else if (!strcmp(a, "--micro"))
            ok = (o.nmicro = parse_list(val, o.micro, 16)) > 0, micro_set = true;
        else if (!strcmp(a, "--schedules"))
            ok = (o.nsched = parse_schedules(val, o.sched)) > 0;
        else if (!strcmp(a, "--steps"))
            ok = parse_number(val, 1, 1000, &d), o.steps = (int)d, steps_set = true;
        else if (!strcmp(a, "--k"))
            ok = parse_number(val, 1, 64, &d), o.k = (int)d;
        else if (!strcmp(a, "--fwd-ms"))
            ok = parse_number(val, 0, 10000, &o.fwd_ms);
        else if (!strcmp(a, "--bwd-ms"))
            ok = parse_number(val, 0, 10000, &o.bwd_ms);
        else if (!strcmp(a, "--dim"))
            ok = parse_number(val, 2, 128, &d), o.dim = (int64_t)d;
        else if (!strcmp(a, "--picture"))
            ok = parse_number(val, 1, MAXM, &d), o.picture = (int)d;
        else if (!strcmp(a, "--cols"))
            ok = parse_number(val, 10, 1000, &d), o.cols = (int)d;
        else
            ok = false;
        if (!ok) {
            fprintf(stderr, "pp_bubble: bad argument %s%s%s (dim 2..128, micro 1..%d)\n%s", a, val ? " " : "",
                    val ? val : "", MAXM, usage);
            exit(2);
        }
        if (strcmp(a, "--gpt") && strcmp(a, "--header"))
            i++;
    }
    if (o.gpt && !micro_set)
        o.micro[0] = 8, o.nmicro = 1;
    if (o.gpt && !steps_set)
        o.steps = 2;
    if (!o.gpt && o.steps < 2) {
        fprintf(stderr, "pp_bubble: --steps %d: the first step is a warm-up, at least 2 are needed\n", o.steps);
        exit(2);
    }
    return o;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double theory(dt_pipe_schedule s, int p, int m)
{
    int v = s == DT_PIPE_INTERLEAVED ? V : 1;
    return (double)(p - 1) / (double)(v * m + p - 1);
}

static const char *forward_chars = "0123456789abcdefghijklmnopqrstuvwxyz";
static const char *backward_chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";

/* Rank 0 draws every rank's events (all[r * n * EV_VALS ...]): a character
 * per time slice, the action busy at the slice's middle (from its ready to
 * its end); '.' idle (waiting or between actions); ' ' busy on the rank's
 * other chunk (interleaved rows are per chunk). */
static void draw(const options *o, dt_pipe_schedule s, int p, int m, const double *all, int n)
{
    int v = s == DT_PIPE_INTERLEAVED ? V : 1;
    double t0 = INFINITY, t1 = -INFINITY;
    for (int e = 0; e < p * n; e++) {
        t0 = fmin(t0, all[e * EV_VALS + 3]);
        t1 = fmax(t1, all[e * EV_VALS + 5]);
    }
    double slice = (t1 - t0) / o->cols;
    fprintf(pictures, "\n%s, p=%d, m=%d%s: one character = %.2f ms, span %.1f ms\n\n```\n", dt_pipe_schedule_name(s), p, m,
           v > 1 ? ", v=2 (a row per rank and chunk)" : "", slice * 1e3, (t1 - t0) * 1e3);
    for (int r = 0; r < p; r++)
        for (int c = 0; c < v; c++) {
            fprintf(pictures, v > 1 ? "rank %d chunk %d |" : "rank %d |", r, c);
            for (int col = 0; col < o->cols; col++) {
                double t = t0 + (col + 0.5) * slice;
                char ch = '.';
                for (int e = 0; e < n; e++) {
                    const double *ev = &all[(r * n + e) * EV_VALS];
                    if (t < ev[4] || t >= ev[5])
                        continue;
                    int micro = (int)ev[1], chunk = (int)ev[2];
                    if (chunk != c)
                        ch = ' ';
                    else if (ev[0] == 'F')
                        ch = micro < 36 ? forward_chars[micro] : '+';
                    else
                        ch = micro < 26 ? backward_chars[micro] : '-';
                    break;
                }
                fputc(ch, pictures);
            }
            fputs("|\n", pictures);
        }
    fputs("```\n", pictures);
}

/* One (schedule, m) of the bubble measurement: a table row from rank 0. */
static void bubble(const options *o, dt_comm *pp, dt_pipe_schedule s, int m)
{
    int p = dt_comm_size(pp), v = s == DT_PIPE_INTERLEAVED ? V : 1;
    dt_model_desc *d;
    CALL(dt_delay_describe(p * V * o->k, o->dim, o->fwd_ms, o->bwd_ms, &d));
    dt_model *stage;
    CALL(dt_pipeline_stage_create(d, p, v, rank, &stage));
    dt_model_init(stage, SEED);
    dt_optimizer *opt;
    CALL(dt_sgd_create(&(dt_sgd_config){0.0f, 0.0f, false}, dt_params_numel(dt_model_params(stage)), &opt));
    dt_strategy_config cfg = {.micro_batches = m, .seed = SEED};
    dt_pipeline_config pc = {s, v, pp, NULL, 0};
    dt_strategy *st;
    CALL(dt_strategy_pipeline_create(stage, opt, &pc, &cfg, &st));
    double idle_sum = 0, idle_min = 1, idle_max = 0, span_sum = 0, busy_sum = 0;
    int in_flight = 0;
    double *mine = NULL, *all = NULL;
    int n = 0;
    for (int step = 0; step < o->steps; step++) {
        feed f = {.dim = o->dim, .step = step};
        dt_step_stats ss;
        CALL(dt_barrier(pp));
        CALL(dt_strategy_step(st, step, 0.0f, next_batch, &f, &ss));
        in_flight = ss.micro_in_flight > in_flight ? ss.micro_in_flight : in_flight;
        const dt_pipe_event *ev;
        n = dt_strategy_pipeline_timeline(st, &ev);
        if (n != 2 * m * v) {
            fprintf(stderr, "pp_bubble rank %d: the timeline has %d events, expected %d\n", rank, n, 2 * m * v);
            exit(1);
        }
        /* [-earliest begin, latest end], both by MAX */
        double span[2] = {-INFINITY, -INFINITY}, busy = 0;
        for (int e = 0; e < n; e++) {
            span[0] = fmax(span[0], -ev[e].begin_s);
            span[1] = fmax(span[1], ev[e].end_s);
            busy += ev[e].end_s - ev[e].ready_s;
        }
        CALL(dt_allreduce(span, span, 2, DT_F64, DT_MAX, pp));
        double T = span[1] + span[0], idle = 1 - busy / T, idle_all[64], busy_all = busy;
        CALL(dt_allgather(&idle, idle_all, 1, DT_F64, pp));
        CALL(dt_allreduce(&busy_all, &busy_all, 1, DT_F64, DT_SUM, pp));
        if (step == 0)
            continue; /* warm-up: connections, arenas, the boundary shapes */
        span_sum += T;
        busy_sum += busy_all / p;
        for (int r = 0; r < p; r++) {
            idle_sum += idle_all[r] / p;
            idle_min = fmin(idle_min, idle_all[r]);
            idle_max = fmax(idle_max, idle_all[r]);
        }
        if (step == o->steps - 1 && m == o->picture) {
            mine = malloc((size_t)n * EV_VALS * sizeof *mine);
            all = malloc((size_t)(n * p) * EV_VALS * sizeof *all);
            if (!mine || !all) {
                fprintf(stderr, "pp_bubble rank %d: out of memory for the timeline\n", rank);
                exit(1);
            }
            for (int e = 0; e < n; e++) {
                double *x = &mine[e * EV_VALS];
                x[0] = ev[e].action.kind;
                x[1] = ev[e].action.micro;
                x[2] = ev[e].action.chunk;
                x[3] = ev[e].begin_s;
                x[4] = ev[e].ready_s;
                x[5] = ev[e].end_s;
            }
            CALL(dt_allgather(mine, all, (size_t)n * EV_VALS, DT_F64, pp));
        }
    }
    int flights[64];
    CALL(dt_allgather(&in_flight, flights, 1, DT_I32, pp));
    int measured = o->steps - 1;
    double idle = idle_sum / measured, th = theory(s, p, m);
    /* the ideal span: (m + (p-1)/v) micro-batches of a stage's forward and backward */
    double stage_ms = (o->fwd_ms + o->bwd_ms) * o->k * V;
    double ideal_ms = (m + (double)(p - 1) / v) * stage_ms;
    if (rank == 0) {
        char fl[256];
        int at = 0;
        for (int r = 0; r < p && at < (int)sizeof fl - 8; r++)
            at += snprintf(fl + at, sizeof fl - (size_t)at, "%s%d", r ? " " : "", flights[r]);
        printf("| %s | %d | %d | %.1f%% | %.1f-%.1f%% | %.1f%% | %+.1f | %.1f / %.1f | %.1f | %.1f | %s |\n",
               dt_pipe_schedule_name(s), p, m, 100 * idle, 100 * idle_min, 100 * idle_max, 100 * th, 100 * (idle - th),
               busy_sum / measured / m * 1e3, stage_ms, span_sum / measured * 1e3, ideal_ms, fl);
        fflush(stdout);
    }
    if (all && rank == 0)
        draw(o, s, p, m, all, n);
    free(mine);
    free(all);
    dt_strategy_destroy(st);
    dt_optimizer_destroy(opt);
    dt_model_destroy(stage);
    dt_model_desc_destroy(d);
}

/* One schedule on gpt-small: every stage's peak activation bytes and
 * micro-batches in flight, a table row from rank 0. */
static void memory(const options *o, dt_comm *pp, dt_pipe_schedule s, int m)
{
    int p = dt_comm_size(pp), v = s == DT_PIPE_INTERLEAVED ? V : 1;
    dt_gpt_config g = {.vocab = 256, .context = 128, .layers = 6, .heads = 6, .dim = 384};
    dt_model_desc *d;
    CALL(dt_gpt_describe(&g, &d));
    dt_model *stage;
    CALL(dt_pipeline_stage_create(d, p, v, rank, &stage));
    dt_model_init(stage, SEED);
    dt_optimizer *opt;
    CALL(dt_sgd_create(&(dt_sgd_config){0.9f, 0.0f, false}, dt_params_numel(dt_model_params(stage)), &opt));
    dt_strategy_config cfg = {.micro_batches = m, .seed = SEED};
    dt_pipeline_config pc = {s, v, pp, NULL, 0};
    dt_strategy *st;
    CALL(dt_strategy_pipeline_create(stage, opt, &pc, &cfg, &st));
    double peak = 0, step_s = 0, busy = 0;
    int in_flight = 0;
    for (int step = 0; step < o->steps; step++) {
        feed f = {.gpt = true, .g = g, .step = step};
        dt_step_stats ss;
        CALL(dt_barrier(pp));
        double t0 = now_s();
        CALL(dt_strategy_step(st, step, 0.01f, next_batch, &f, &ss));
        step_s = now_s() - t0;
        busy = ss.busy_s;
        peak = fmax(peak, (double)ss.activation_bytes);
        in_flight = ss.micro_in_flight > in_flight ? ss.micro_in_flight : in_flight;
    }
    double mine[4] = {peak, in_flight, busy, step_s}, all[4 * 64];
    CALL(dt_allgather(mine, all, 4, DT_F64, pp));
    if (rank == 0)
        for (int r = 0; r < p; r++) {
            const double *x = &all[4 * r];
            printf("| %s | %d | %d | %d | %.1f | %.0f | %.1f | %.2f | %.2f |\n", dt_pipe_schedule_name(s), p, m, r,
                   x[0] / 1048576.0, x[1], x[1] > 0 ? x[0] / x[1] / 1048576.0 : 0.0, x[2], x[3]);
        }
    fflush(stdout);
    dt_strategy_destroy(st);
    dt_optimizer_destroy(opt);
    dt_model_destroy(stage);
    dt_model_desc_destroy(d);
}

int main(int argc, char **argv)
{
    options o = parse(argc, argv);
    dt_comm *world;
    CALL(dt_comm_init_env(&world));
    rank = dt_comm_rank(world);
    int p = dt_comm_size(world);
    if (p < 2 || p > 64) {
        if (rank == 0)
            fprintf(stderr, "pp_bubble: %d ranks: run it under dtrun -n P with P from 2 to 64\n", p);
        CALL(dt_comm_destroy(world));
        return 2;
    }
    CALL(dt_set_threads(1)); /* the ranks share the machine's cores */
    char *picture_text = NULL;
    size_t picture_len = 0;
    if (!o.gpt && rank == 0 && !(pictures = open_memstream(&picture_text, &picture_len))) {
        fprintf(stderr, "pp_bubble: open_memstream: out of memory\n");
        return 1;
    }
    if (o.gpt) {
        if (rank == 0 && o.header)
            printf("| schedule | p | m | stage | peak activations (MiB) | micro-batches in flight | per micro-batch (MiB) "
                   "| busy (s) | step (s) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        for (int i = 0; i < o.nsched; i++)
            for (int j = 0; j < o.nmicro; j++)
                if (o.sched[i] != DT_PIPE_INTERLEAVED || o.micro[j] % p == 0)
                    memory(&o, world, o.sched[i], o.micro[j]);
    } else {
        if (rank == 0 && o.header)
            printf("| schedule | p | m | idle, mean over stages | min-max over stages | theory | measured - theory "
                   "(points) | busy per micro-batch / nominal (ms) | span (ms) | ideal span (ms) | peak micro-batches in flight "
                   "per stage |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
        for (int i = 0; i < o.nsched; i++)
            for (int j = 0; j < o.nmicro; j++)
                if (o.sched[i] != DT_PIPE_INTERLEAVED || o.micro[j] % p == 0)
                    bubble(&o, world, o.sched[i], o.micro[j]);
        if (rank == 0 && fclose(pictures) == 0) {
            fputs(picture_text, stdout);
            free(picture_text);
        }
    }
    CALL(dt_comm_destroy(world));
    return 0;
}
