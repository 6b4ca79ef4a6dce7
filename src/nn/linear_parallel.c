/* Tensor-parallel linear layers (Megatron-LM's column- and row-parallel
 * linear), over the tensor-parallel group `tp` of t ranks, rank r of it.
 * With W [out, in] the whole layer's weight (as nn.Linear stores it):
 *
 *   column: rank r holds rows [r*out/t, (r+1)*out/t) of W and of b.
 *           forward  y_r = x W_r^T + b_r           (x whole; y split by feature)
 *           backward dx = sum over r of dy_r W_r   (one allreduce: Megatron's f)
 *   row:    rank r holds columns [r*in/t, (r+1)*in/t) of W; b whole.
 *           forward  y = sum over r of x_r W_r^T + b   (one allreduce: g)
 *           backward dx_r = dy W_r, dW_r = dy^T x_r, db = column sums of dy
 *
 * A column layer may cut its output into G equal groups first (attention's
 * q, k and v side by side: G = 3); rank r then holds its 1/t of each group,
 * the groups side by side in its output.
 *
 * Column then row (an MLP, attention's QKV then its output) costs one
 * allreduce forward and one backward for the pair.  A row layer's bias is
 * the same on every rank and so is its gradient (dy is).  Each shard is
 * initialised as its slice of the whole layer's initialisation, so a model
 * starts from the same weights whatever t is. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dtrain/nn.h"
#include "nn/init.h"
#include "nn/layer.h"
#include "nn/saved.h"
#include "nn/tp.h"

typedef struct {
    dt_layer base;
    dt_tp_split split;
    dt_tp_group tp; /* a copy */
    int t, r;
    int64_t in, out;     /* the whole layer's sizes */
    int64_t in_l, out_l; /* this rank's */
    int64_t groups;      /* column: output groups, each cut t ways */
    bool sp;             /* sequence parallel (nn/tp.h) */
    int w, b;
} plinear;

static int64_t rows(const dt_tensor *x, int64_t cols) { return dt_tensor_numel(x) / cols; }

static dt_status allreduce(plinear *L, float *buf, int64_t n, const char *what)
{
    dt_status s = dt__tp_allreduce_sum(&L->tp, buf, n);
    return s == DT_OK ? DT_OK : dt__wrap(s, "%s: %s allreduce over the tensor-parallel group: ", L->base.name, what);
}

/* Sequence parallel: a [B, T, D] tensor and T's slice per rank. */
static dt_status seq_shape(const plinear *L, const dt_tensor *x, int64_t *B, int64_t *T)
{
    if (x->ndim != 3)
        return dt__fail(DT_ERR_INVALID, "%s: sequence parallel expects [batch, time, features], got %d dimensions",
                        L->base.name, x->ndim);
    *B = x->shape[0];
    *T = x->shape[1];
    return DT_OK;
}

static dt_status sp_fail(const plinear *L, dt_status s, const char *what)
{
    return s == DT_OK ? DT_OK : dt__wrap(s, "%s: sequence-parallel %s over the tensor-parallel group: ", L->base.name, what);
}

/* The whole sequences of slices x [B, Tl, cols] into a temporary of the
 * arena (freed with a rewind to a mark taken before). */
static float *gather_whole(plinear *L, dt_ctx *ctx, const dt_tensor *x, int64_t cols, dt_status *st)
{
    int64_t whole = dt_tensor_numel(x) * L->t;
    float *scratch = dt_arena_alloc(ctx->arena, whole), *out = dt_arena_alloc(ctx->arena, whole);
    if (!scratch || !out) {
        *st = dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", L->base.name);
        return NULL;
    }
    *st = sp_fail(L, dt__sp_gather(&L->tp, x->data, out, scratch, x->shape[0], x->shape[1], cols), "allgather");
    return *st == DT_OK ? out : NULL;
}

/* The whole partial sums `whole` [B, t Tl, cols] summed into this rank's
 * slice `local` [B, Tl, cols]. */
static dt_status scatter_sum(plinear *L, dt_ctx *ctx, const float *whole, float *local, int64_t B, int64_t Tl,
                             int64_t cols)
{
    float *scratch = dt_arena_alloc(ctx->arena, B * Tl * L->t * cols);
    if (!scratch)
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", L->base.name);
    return sp_fail(L, dt__sp_reduce_scatter(&L->tp, whole, local, scratch, B, Tl, cols), "reduce-scatter");
}

static void add_bias(const float *b, float *y, int64_t n, int64_t cols)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < cols; j++)
            y[i * cols + j] += b[j];
}

/* Sequence parallel (Megatron-LM's later form): a column layer keeps only
 * its input's slice and gathers the whole input again in backward, a row
 * layer sums its output into slices; the gathered and partial whole tensors
 * are temporaries, freed by an arena rewind, so that between the split
 * regions a rank holds 1/t of the positions. */
static dt_status forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    plinear *L = (plinear *)l;
    if (x->shape[x->ndim - 1] != L->in_l)
        return dt__fail(DT_ERR_INVALID, "%s: input's last dimension is %lld, expected %lld (%s-parallel, %d ranks)",
                        l->name, (long long)x->shape[x->ndim - 1], (long long)L->in_l,
                        L->split == DT_TP_COLUMN ? "column" : "row", L->t);
    int64_t B = 0, T = 0;
    if (L->sp)
        DT_CHECK(seq_shape(L, x, &B, &T));
    dt_tensor *saved = DT_SAVE(ctx, l, dt_tensor);
    if (!saved)
        return DT_ERR_NOMEM;
    *saved = *x;
    const float *W = dt_param_value(ctx->params, L->w), *bias = L->b >= 0 ? dt_param_value(ctx->params, L->b) : NULL;
    *y = *x;
    y->shape[y->ndim - 1] = L->out_l;
    if (L->split == DT_TP_COLUMN) {
        if (L->sp)
            y->shape[1] = T * L->t;
        int64_t n = dt_tensor_numel(y) / L->out_l;
        if (!(y->data = dt_arena_alloc(ctx->arena, n * L->out_l)))
            return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
        dt_arena_mark mark = dt_arena_get_mark(ctx->arena);
        dt_status st = DT_OK;
        const float *in = L->sp ? gather_whole(L, ctx, x, L->in_l, &st) : x->data;
        if (in && bias)
            dt__gemm_bias_packed(ctx, 0, 1, n, L->out_l, L->in_l, in, W, bias, y->data);
        else if (in)
            dt__gemm_packed(ctx, 0, 1, n, L->out_l, L->in_l, 1.0f, in, W, 0.0f, y->data);
        dt_arena_rewind(ctx->arena, mark);
        return st;
    }
    /* row: partial products summed over the group (whole, or into this
     * rank's slice of the sequence), then the bias once */
    int64_t n = rows(x, L->in_l);
    if (!L->sp) {
        if (!(y->data = dt_arena_alloc(ctx->arena, n * L->out_l)))
            return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
        dt__gemm_packed(ctx, 0, 1, n, L->out_l, L->in_l, 1.0f, x->data, W, 0.0f, y->data);
        DT_CHECK(allreduce(L, y->data, n * L->out_l, "forward"));
    } else {
        if (T % L->t)
            return dt__fail(DT_ERR_INVALID, "%s: sequence parallel: %lld positions are not divisible by %d ranks",
                            l->name, (long long)T, L->t);
        y->shape[1] = T / L->t;
        if (!(y->data = dt_arena_alloc(ctx->arena, n / L->t * L->out_l)))
            return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
        dt_arena_mark mark = dt_arena_get_mark(ctx->arena);
        float *partial = dt_arena_alloc(ctx->arena, n * L->out_l);
        dt_status st = partial ? DT_OK : dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
        if (st == DT_OK) {
            dt__gemm_packed(ctx, 0, 1, n, L->out_l, L->in_l, 1.0f, x->data, W, 0.0f, partial);
            st = scatter_sum(L, ctx, partial, y->data, B, T / L->t, L->out_l);
        }
        dt_arena_rewind(ctx->arena, mark);
        DT_CHECK(st);
        n /= L->t;
    }
    if (bias && dt__ops(ctx)->host)
        add_bias(bias, y->data, n, L->out_l);
    else if (bias) /* the same sums (y + b) on the device */
        dt__ops(ctx)->rows_add(y->data, bias, n, L->out_l);
    return DT_OK;
}

static dt_status backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    plinear *L = (plinear *)l;
    const dt_tensor *x = DT_LOAD(ctx, l, dt_tensor);
    if (!x)
        return DT_ERR_INVALID;
    if (L->b >= 0) { /* a row layer's bias under sequence parallelism: this slice's part (tp_partial) */
        dt__ops(ctx)->rows_sum_add(dt_param_grad(ctx->params, L->b), dy->data, rows(dy, L->out_l), L->out_l);
        dt_params_grad_ready(ctx->params, L->b);
    }
    float *dW = dt_param_grad(ctx->params, L->w);
    const float *W = dt_param_value(ctx->params, L->w);
    /* A column layer's input gradient is a sum over the group even when this
     * layer needs none: the collective is called on every rank. */
    bool want_dx = need_dx || L->split == DT_TP_COLUMN;
    if (want_dx) {
        *dx = *x;
        if (!(dx->data = dt_arena_alloc(ctx->arena, dt_tensor_numel(x))))
            return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    }
    dt_arena_mark mark = dt_arena_get_mark(ctx->arena);
    dt_status st = DT_OK;
    if (L->split == DT_TP_ROW) {
        const float *g = L->sp ? gather_whole(L, ctx, dy, L->out_l, &st) : dy->data; /* the whole output gradient */
        int64_t n = rows(x, L->in_l);
        if (g)
            dt__linear_grads(ctx, L->out_l, L->in_l, n, g, x->data, W, dW, NULL, want_dx ? dx->data : NULL, NULL);
    } else {
        const float *in = L->sp ? gather_whole(L, ctx, x, L->in_l, &st) : x->data; /* the whole input again */
        int64_t n = rows(dy, L->out_l);
        float *g = !in ? NULL : L->sp ? dt_arena_alloc(ctx->arena, n * L->in_l) : dx->data;
        if (in && !g)
            st = dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
        if (g) {
            dt__linear_grads(ctx, L->out_l, L->in_l, n, dy->data, in, W, dW, NULL, g, NULL);
            st = L->sp ? scatter_sum(L, ctx, g, dx->data, x->shape[0], x->shape[1], L->in_l)
                       : allreduce(L, g, n * L->in_l, "backward");
        }
    }
    dt_arena_rewind(ctx->arena, mark);
    dt_params_grad_ready(ctx->params, L->w);
    return st;
}

/* nn.Linear's U(-1/sqrt(in), 1/sqrt(in)) of the whole layer; each shard
 * keeps its slice (dt_param_set_shard). */
static void init(dt_layer *l, dt_params *p, uint64_t seed)
{
    plinear *L = (plinear *)l;
    float bound = 1.0f / sqrtf((float)L->in);
    dt__init_uniform(p, L->w, seed, bound);
    if (L->b >= 0)
        dt__init_uniform(p, L->b, seed, bound);
}

static void destroy(dt_layer *l) { free(l); }

static const dt_layer_ops column_ops = {"linear-column-parallel", forward, backward, init, destroy};
static const dt_layer_ops row_ops = {"linear-row-parallel", forward, backward, init, destroy};

dt_status dt__linear_parallel_create(dt_params *p, const char *name, int64_t in, int64_t out, bool bias,
                                     dt_tp_split split, int64_t groups, bool sp, const dt_tp_group *tp,
                                     dt_layer **l)
{
    char who[96];
    snprintf(who, sizeof who, "linear %s", name);
    DT_CHECK(dt__tp_check(tp, who));
    if (split != DT_TP_COLUMN && split != DT_TP_ROW)
        return dt__fail(DT_ERR_INVALID, "linear %s: split %d (expected DT_TP_COLUMN or DT_TP_ROW)", name, (int)split);
    int t = tp->size;
    if (groups < 1 || (split == DT_TP_ROW && groups != 1) || out % groups)
        return dt__fail(DT_ERR_INVALID, "linear %s: %lld output groups for %lld outputs", name, (long long)groups,
                        (long long)out);
    int64_t cut = split == DT_TP_COLUMN ? out / groups : in;
    if (in <= 0 || out <= 0 || cut % t)
        return dt__fail(DT_ERR_INVALID,
                        "linear %s: %lld x %lld cannot be split %s-parallel over %d ranks (%s features %lld are not "
                        "divisible by %d)",
                        name, (long long)in, (long long)out, split == DT_TP_COLUMN ? "column" : "row", t,
                        split == DT_TP_COLUMN ? "output" : "input", (long long)cut, t);
    plinear *L = dt__layer_new(sizeof *L, split == DT_TP_COLUMN ? &column_ops : &row_ops, "%s", name);
    if (!L)
        return DT_ERR_NOMEM;
    L->split = split;
    L->tp = *tp;
    L->t = t;
    L->r = tp->rank;
    L->in = in;
    L->out = out;
    L->in_l = split == DT_TP_ROW ? in / t : in;
    L->out_l = split == DT_TP_COLUMN ? out / t : out;
    L->groups = groups;
    L->sp = sp && t > 1;
    L->b = -1;
    dt_status s = dt__layer_param(p, &L->base, "weight", 2, (int64_t[]){L->out_l, L->in_l}, &L->w);
    if (s == DT_OK) /* column: cut by output rows (in groups); row: by input columns */
        s = dt_param_set_shard(p, L->w, t, L->r, split == DT_TP_COLUMN ? 0 : 1, (int)groups);
    if (s == DT_OK && bias)
        s = dt__layer_param(p, &L->base, "bias", 1, (int64_t[]){L->out_l}, &L->b);
    if (s == DT_OK && bias && split == DT_TP_COLUMN)
        s = dt_param_set_shard(p, L->b, t, L->r, 0, (int)groups);
    if (s == DT_OK && bias && split == DT_TP_ROW && L->sp)
        dt_param_set_tp_partial(p, L->b);
    if (s != DT_OK) {
        free(L);
        return s;
    }
    *l = &L->base;
    return DT_OK;
}

dt_status dt_linear_parallel_create(dt_params *p, const char *name, int64_t in, int64_t out, bool bias,
                                    dt_tp_split split, const dt_tp_group *tp, dt_layer **l)
{
    return dt__linear_parallel_create(p, name, in, out, bias, split, 1, false, tp, l);
}
