/* dt_plan_profile_model: the planner's measured costs of a model's blocks.
 *
 * Each distinct block (kind, parameters and input shape) is instantiated
 * alone and run forward and backward on a micro-batch of `samples` at this
 * process's compute threads: one warm-up, then `repeats` timed runs, the
 * median kept.  Block 0 gets what the model takes (token ids for a GPT,
 * dt_model_desc_input); every later block random floats of the previous
 * block's output shape.  Each is timed at `samples` and at one sample, and
 * the two fit to a cost per micro-batch plus one per sample.  Activation bytes are what the block's forward
 * leaves in its micro-batch's arena (its records and output): the training
 * contexts free each block's activations and backward temporaries once its
 * backward is done (dt_ctx.reclaim), so a micro-batch's peak is the sum of
 * its blocks' forward activations, at the start of the backward;
 * the optimizer is timed over a 2^20-element buffer.  With o->ranks > 1
 * the costliest block is run again as that many ranks at once
 * (contention.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/status.h"
#include "dtrain/optim.h"
#include "dtrain/plan.h"
#include "dtrain/tensor.h"
#include "parallel/plan/internal.h"

enum { OPT_ELEMENTS = 1 << 20, EVICT_BYTES = 64 << 20 };

/* A block already measured: the key, its figures and its output's shape. */
typedef struct {
    const char *kind;
    int64_t params;
    int in_ndim, out_ndim;
    int64_t in_shape[DT_MAX_DIMS], out_shape[DT_MAX_DIMS];
    double fwd_s, bwd_s, act_bytes, out_bytes;
    double fwd_fixed_s, bwd_fixed_s;
} measured;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The clock the figures are read on: with one compute thread its thread's CPU time, which other processes'
 * load does not stretch (on a machine to itself it is the wall time: the kernels neither sleep nor wait); with
 * a pool of threads the wall time (the pool's threads are others). */
static double seconds(void)
{
    struct timespec t;
    if (dt_get_threads() == 1 && clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) == 0)
        return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
    return (double)dt__now_ns() * 1e-9;
}

/* x: uniform floats in [-1, 1), or ids in [0, ids) stored as floats. */
static void fill(float *x, int64_t n, int64_t ids, uint64_t seed)
{
    uint64_t stream = dt_rng_key_stream(&(dt_rng_key){seed, 0, 0, 0}, 47);
    for (int64_t i = 0; i < n; i++) {
        float u = dt_rng_key_uniform(stream, (uint64_t)i);
        x[i] = ids > 0 ? (float)((int64_t)(u * (float)ids) % ids) : 2 * u - 1;
    }
}

/* Inside a model a block's weights and gradients come from memory: the
 * blocks before it have evicted them from the caches.  Run alone and
 * repeated, they would stay cached, which hides a cost per micro-batch
 * (matrix products on one sample are as long as their weights' reads):
 * write a buffer larger than the caches before each timed pass. */
static void evict(unsigned char *buf)
{
    if (buf)
        for (size_t i = 0; i < EVICT_BYTES; i += 64)
            buf[i]++;
}

static int64_t numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

/* Run block b of d on input x (shape m->in_shape, `samples` first)
 * forward and backward: one warm-up and o->repeats timed runs into m. */
static dt_status measure_block(const dt_model_desc *d, int b, const dt_plan_profile_opts *o, int64_t samples,
                               const float *x, measured *m)
{
    dt_model *model = NULL;
    dt_arena *arena = NULL;
    float *dy = NULL;
    unsigned char *cold = calloc(1, EVICT_BYTES); /* (without it: warm caches, the figures a little low) */
    double *times = malloc(2 * (size_t)o->repeats * sizeof *times);
    dt_status s = times ? dt_model_instantiate(d, b, b + 1, &model) : dt__fail(DT_ERR_NOMEM, "out of memory");
    if (s == DT_OK)
        s = dt_arena_create(&arena);
    if (s != DT_OK)
        goto done;
    dt_model_init(model, 1);
    dt_tensor in = dt_tensor_view((float *)x, m->in_ndim, m->in_shape);
    for (int r = -1; s == DT_OK && r < o->repeats; r++) {
        dt_arena_reset(arena);
        dt_arena_reset_peak(arena);
        dt_ctx ctx = {.arena = arena, .key = {1, (uint64_t)(r + 1), 0, 0}, .training = true, .reclaim = true};
        dt_tensor y, dx;
        evict(cold);
        double t0 = seconds();
        if ((s = dt_model_forward(model, &ctx, &in, &y)) != DT_OK)
            break;
        double t1 = seconds();
        m->act_bytes = (double)dt_arena_bytes_in_use(arena) / (double)samples;
        if (!dy) { /* the output's shape is known now: its gradient, random, outside the arena */
            m->out_ndim = y.ndim;
            memcpy(m->out_shape, y.shape, sizeof m->out_shape);
            m->out_bytes = 4.0 * (double)dt_tensor_numel(&y) / (double)samples;
            if (!(dy = malloc((size_t)dt_tensor_numel(&y) * sizeof *dy))) {
                s = dt__fail(DT_ERR_NOMEM, "out of memory for block %d's output gradient", b);
                break;
            }
            fill(dy, dt_tensor_numel(&y), 0, 2);
        }
        dt_tensor g = dt_tensor_view(dy, y.ndim, y.shape);
        evict(cold);
        double t2 = seconds();
        /* block 0 computes no input gradient in a model; every other block does */
        s = b == 0 ? dt_model_backward(model, &ctx, &g) : dt_model_backward_dx(model, &ctx, &g, &dx);
        double t3 = seconds();
        if (r >= 0) {
            times[r] = t1 - t0;
            times[o->repeats + r] = t3 - t2;
        }
        dt_params_zero_grads(dt_model_params(model));
    }
    if (s == DT_OK) {
        m->fwd_s = median(times, o->repeats) / (double)samples;
        m->bwd_s = median(times + o->repeats, o->repeats) / (double)samples;
    } else
        s = dt__fail(s, "profiling block %d (%s): %s", b, dt_model_desc_block(d, b)->name, dt_last_error());
done:
    free(cold);
    free(dy);
    free(times);
    dt_arena_destroy(arena);
    dt_model_destroy(model);
    return s;
}

/* t(n) = fixed + n x per through t(1) = one and t(S) = S x *per (the
 * per-sample time measured at S); a fit that would make either negative
 * keeps the per-sample time alone. */
static void fit(int64_t S, double one, double *per, double *fixed)
{
    double total = *per * (double)S, p = (total - one) / (double)(S - 1), f = one - p;
    if (p > 0 && f > 0)
        *per = p, *fixed = f;
}

/* The optimizer's update, seconds per element, and its state floats. */
static dt_status measure_optimizer(const dt_plan_profile_opts *o, dt_plan_model *out)
{
    const char *name = o->optimizer ? o->optimizer : "adamw";
    dt_optimizer *opt = NULL;
    dt_status s;
    if (!strcmp(name, "adamw")) {
        s = dt_adamw_create(&(dt_adamw_config){0.9f, 0.95f, 1e-8f, 0.1f}, OPT_ELEMENTS, &opt);
        out->optimizer_state_floats = 2;
    } else if (!strcmp(name, "adagrad")) {
        s = dt_adagrad_create(&(dt_adagrad_config){0, 0, 0, 1e-10f}, OPT_ELEMENTS, &opt);
        out->optimizer_state_floats = 1;
    } else if (!strcmp(name, "sgd")) { /* the trainer's default momentum 0.9 keeps one state float */
        s = dt_sgd_create(&(dt_sgd_config){0.9f, 0, false}, OPT_ELEMENTS, &opt);
        out->optimizer_state_floats = 1;
    } else
        return dt__fail(DT_ERR_INVALID, "plan profile: optimizer '%s' (adamw, sgd or adagrad)", name);
    float *p = s == DT_OK ? malloc(2 * (size_t)OPT_ELEMENTS * sizeof *p) : NULL;
    double *times = malloc((size_t)o->repeats * sizeof *times);
    if (s == DT_OK && (!p || !times))
        s = dt__fail(DT_ERR_NOMEM, "out of memory");
    if (s == DT_OK) {
        fill(p, 2 * (int64_t)OPT_ELEMENTS, 0, 3);
        for (int r = -1; s == DT_OK && r < o->repeats; r++) {
            double t0 = seconds();
            s = dt_optimizer_step(opt, p, p + OPT_ELEMENTS, OPT_ELEMENTS, 1e-4f);
            if (r >= 0)
                times[r] = seconds() - t0;
        }
    }
    if (s == DT_OK)
        out->optimizer_s_per_param = median(times, o->repeats) / OPT_ELEMENTS;
    free(times);
    free(p);
    dt_optimizer_destroy(opt);
    return s;
}

/* Tensor-parallel hints from the block kinds (the splits gpt.c and mlp.c
 * make): a transformer block splits with two allreduces of its [T, dim]
 * activations each way (attention's output, the MLP's); a GPT's embedding
 * and head split by vocabulary with one (the embedding's output forward,
 * the head's input gradient backward); an mlp's linear layers pair column
 * then row with one allreduce each way per pair (counted on the column
 * layer, at the mean of the pair's two widths), the relu between them split
 * too, and a last layer without a partner replicated. */
static void tp_hints(dt_plan_model *m, double in_bytes, double dim_bytes)
{
    int nlinear = 0;
    for (int b = 0; b < m->nblocks; b++)
        nlinear += !strcmp(m->blocks[b].kind, "linear");
    bool mlp = nlinear > 0 && nlinear + (nlinear - 1) == m->nblocks;
    for (int b = 0, lin = 0; b < m->nblocks; b++) {
        dt_plan_block *k = &m->blocks[b];
        if (!strcmp(k->kind, "gpt-block") || !strcmp(k->kind, "gpt-embed") || !strcmp(k->kind, "gpt-head")) {
            k->tp_splittable = 1;
            k->tp_collectives = !strcmp(k->kind, "gpt-block") ? 2 : 1;
            k->tp_bytes = dim_bytes;
            /* what stays whole on every tp rank (without sequence parallelism): a block's layer norms and residual
             * stream, Megatron's 10 of 34 s h (the attention scores, split, left out: an overestimate); the
             * embedding's allreduced output, all of it; the head's input side, all but its split logits */
            k->act_tp_whole_bytes = !strcmp(k->kind, "gpt-block") ? k->act_bytes * 10 / 34
                                    : !strcmp(k->kind, "gpt-embed") ? k->act_bytes
                                                                     : fmax(0, k->act_bytes - k->out_bytes);
        } else if (mlp && !strcmp(k->kind, "linear")) {
            bool column = lin % 2 == 0 && lin + 1 < nlinear, row = lin % 2 == 1;
            k->tp_splittable = column || row;
            if (column) /* the mean of the pair's input width (backward) and output width (forward) */
                k->tp_bytes = ((b ? m->blocks[b - 1].out_bytes : in_bytes) + m->blocks[b + 2].out_bytes) / 2;
            k->tp_collectives = column;
            /* a column layer keeps its whole input, a row layer makes a whole output */
            k->act_tp_whole_bytes = column ? (b ? m->blocks[b - 1].out_bytes : in_bytes) : row ? k->out_bytes : 0;
            lin++;
        } else if (mlp && !strcmp(k->kind, "relu"))
            k->tp_splittable = lin % 2 == 1 && lin < nlinear; /* after a column layer */
    }
}

dt_status dt_plan_profile_model(const dt_model_desc *d, const dt_plan_profile_opts *o, dt_plan_model *out)
{
    if (!d || !o || !out)
        return dt__fail(DT_ERR_INVALID, "plan profile: an argument is NULL");
    if (o->samples < 1 || o->repeats < 1)
        return dt__fail(DT_ERR_INVALID, "plan profile: samples %lld and repeats %d must be >= 1",
                        (long long)o->samples, o->repeats);
    memset(out, 0, sizeof *out);
    int n = dt_model_desc_blocks(d), ndim = 0;
    int64_t shape[DT_MAX_DIMS], ids = 0;
    DT_CHECK(dt_model_desc_input(d, &ndim, shape, &ids));
    measured *seen = calloc((size_t)n, sizeof *seen);
    if (!(out->blocks = calloc((size_t)n, sizeof *out->blocks)) || !seen) {
        free(seen);
        free(out->blocks);
        out->blocks = NULL;
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    out->nblocks = n;
    out->samples = o->samples;
    out->tokens_per_sample = n > 0 && !strcmp(dt_model_desc_block(d, 0)->kind, "gpt-embed") ? shape[0] : 1;
    out->threads = dt_get_threads();
    /* the input of the block being measured: samples first */
    int in_ndim = ndim + 1;
    int64_t in_shape[DT_MAX_DIMS] = {o->samples};
    memcpy(in_shape + 1, shape, (size_t)ndim * sizeof *shape);
    float *x = NULL;
    int nseen = 0;
    double in_bytes = 4.0 * (double)numel(ndim, shape), dim_bytes = 0; /* a GPT's [T, dim] per sample */
    /* the costliest block and its input's shape, for the sharing probe */
    int costly = -1, costly_ndim = 0;
    int64_t costly_shape[DT_MAX_DIMS] = {0};
    double costly_s = -1;
    dt_status s = DT_OK;
    for (int b = 0; s == DT_OK && b < n; b++) {
        const dt_block_info *info = dt_model_desc_block(d, b);
        measured *m = NULL;
        for (int i = 0; i < nseen && !m; i++)
            if (!strcmp(seen[i].kind, info->kind) && seen[i].params == info->params && seen[i].in_ndim == in_ndim &&
                !memcmp(seen[i].in_shape, in_shape, (size_t)in_ndim * sizeof *in_shape))
                m = &seen[i];
        if (!m) {
            m = &seen[nseen++];
            *m = (measured){.kind = info->kind, .params = info->params, .in_ndim = in_ndim};
            memcpy(m->in_shape, in_shape, sizeof in_shape);
            free(x);
            int64_t count = numel(in_ndim, in_shape);
            if (!(x = malloc((size_t)count * sizeof *x))) {
                s = dt__fail(DT_ERR_NOMEM, "out of memory for block %d's input", b);
                break;
            }
            fill(x, count, b == 0 ? ids : 0, 1);
            s = measure_block(d, b, o, o->samples, x, m);
            if (s == DT_OK && o->samples > 1) { /* and one sample: the cost per micro-batch besides the samples' */
                measured one = *m;
                one.in_shape[0] = 1;
                if ((s = measure_block(d, b, o, 1, x, &one)) == DT_OK) {
                    fit(o->samples, one.fwd_s, &m->fwd_s, &m->fwd_fixed_s);
                    fit(o->samples, one.bwd_s, &m->bwd_s, &m->bwd_fixed_s);
                }
            }
            double cost = (double)o->samples * (m->fwd_s + m->bwd_s) + m->fwd_fixed_s + m->bwd_fixed_s;
            if (s == DT_OK && cost > costly_s) {
                costly_s = cost;
                costly = b;
                costly_ndim = in_ndim;
                memcpy(costly_shape, in_shape, sizeof costly_shape);
            }
        }
        dt_plan_block *k = &out->blocks[b];
        snprintf(k->kind, sizeof k->kind, "%s", info->kind);
        k->params = info->params;
        k->flops = info->flops;
        k->fwd_s = m->fwd_s;
        k->bwd_s = m->bwd_s;
        k->act_bytes = m->act_bytes;
        k->fwd_fixed_s = m->fwd_fixed_s;
        k->bwd_fixed_s = m->bwd_fixed_s;
        k->out_bytes = m->out_bytes;
        if (b == 0 && !strcmp(info->kind, "gpt-embed"))
            dim_bytes = m->out_bytes;
        in_ndim = m->out_ndim;
        memcpy(in_shape, m->out_shape, sizeof in_shape);
    }
    free(x);
    free(seen);
    if (s == DT_OK)
        s = measure_optimizer(o, out);
    if (s == DT_OK && o->ranks > 1 && costly >= 0)
        s = dt__plan_measure_sharing(d, costly, costly_ndim, costly_shape, costly == 0 ? ids : 0, o->ranks,
                                     dt_cores_available(), out);
    if (s != DT_OK) {
        dt_plan_model_free(out);
        return s;
    }
    tp_hints(out, in_bytes, dim_bytes);
    return DT_OK;
}
