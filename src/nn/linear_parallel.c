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
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dtrain/comm.h"
#include "dtrain/nn.h"
#include "nn/init.h"
#include "nn/layer.h"
#include "nn/saved.h"
#include "nn/tp.h"

typedef struct {
    dt_layer base;
    dt_tp_split split;
    dt_comm *tp;
    int t, r;
    int64_t in, out;     /* the whole layer's sizes */
    int64_t in_l, out_l; /* this rank's */
    int64_t groups;      /* column: output groups, each cut t ways */
    int w, b;
} plinear;

static int64_t rows(const dt_tensor *x, int64_t cols) { return dt_tensor_numel(x) / cols; }

static dt_status allreduce(plinear *L, float *buf, int64_t n, const char *what)
{
    dt_status s = dt_allreduce(buf, buf, (size_t)n, DT_F32, DT_SUM, L->tp);
    return s == DT_OK ? DT_OK : dt__wrap(s, "%s: %s allreduce over the tensor-parallel group: ", L->base.name, what);
}

static dt_status forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    plinear *L = (plinear *)l;
    if (x->shape[x->ndim - 1] != L->in_l)
        return dt__fail(DT_ERR_INVALID, "%s: input's last dimension is %lld, expected %lld (%s-parallel, %d ranks)",
                        l->name, (long long)x->shape[x->ndim - 1], (long long)L->in_l,
                        L->split == DT_TP_COLUMN ? "column" : "row", L->t);
    int64_t n = rows(x, L->in_l);
    dt_tensor *saved = DT_SAVE(ctx, l, dt_tensor);
    if (!saved)
        return DT_ERR_NOMEM;
    *saved = *x;
    *y = *x;
    y->shape[y->ndim - 1] = L->out_l;
    if (!(y->data = dt_arena_alloc(ctx->arena, n * L->out_l)))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    const float *W = dt_param_value(ctx->params, L->w);
    if (L->split == DT_TP_COLUMN) {
        if (L->b >= 0)
            dt_rows_fill(y->data, dt_param_value(ctx->params, L->b), n, L->out_l);
        dt_sgemm(0, 1, n, L->out_l, L->in_l, 1.0f, x->data, W, L->b >= 0 ? 1.0f : 0.0f, y->data);
        return DT_OK;
    }
    /* row: partial products summed over the group, then the bias once */
    dt_sgemm(0, 1, n, L->out_l, L->in_l, 1.0f, x->data, W, 0.0f, y->data);
    DT_CHECK(allreduce(L, y->data, n * L->out_l, "forward"));
    if (L->b >= 0) {
        const float *b = dt_param_value(ctx->params, L->b);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < L->out_l; j++)
                y->data[i * L->out_l + j] += b[j];
    }
    return DT_OK;
}

static dt_status backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    plinear *L = (plinear *)l;
    const dt_tensor *x = DT_LOAD(ctx, l, dt_tensor);
    if (!x)
        return DT_ERR_INVALID;
    int64_t n = rows(x, L->in_l);
    dt_sgemm(1, 0, L->out_l, L->in_l, n, 1.0f, dy->data, x->data, 1.0f, dt_param_grad(ctx->params, L->w));
    dt_params_grad_ready(ctx->params, L->w);
    if (L->b >= 0) {
        dt_rows_sum_add(dt_param_grad(ctx->params, L->b), dy->data, n, L->out_l);
        dt_params_grad_ready(ctx->params, L->b);
    }
    /* A column layer's input gradient is a sum over the group even when this
     * layer needs none: the allreduce is collective, every rank calls it. */
    if (!need_dx && L->split == DT_TP_ROW)
        return DT_OK;
    *dx = *x;
    if (!(dx->data = dt_arena_alloc(ctx->arena, n * L->in_l)))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    dt_sgemm(0, 0, n, L->in_l, L->out_l, 1.0f, dy->data, dt_param_value(ctx->params, L->w), 0.0f, dx->data);
    if (L->split == DT_TP_COLUMN)
        DT_CHECK(allreduce(L, dx->data, n * L->in_l, "backward"));
    return DT_OK;
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
                                     dt_tp_split split, int64_t groups, dt_comm *tp, dt_layer **l)
{
    if (!tp)
        return dt__fail(DT_ERR_INVALID, "linear %s: the tensor-parallel communicator is NULL", name);
    if (split != DT_TP_COLUMN && split != DT_TP_ROW)
        return dt__fail(DT_ERR_INVALID, "linear %s: split %d (expected DT_TP_COLUMN or DT_TP_ROW)", name, (int)split);
    int t = dt_comm_size(tp);
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
    L->tp = tp;
    L->t = t;
    L->r = dt_comm_rank(tp);
    L->in = in;
    L->out = out;
    L->in_l = split == DT_TP_ROW ? in / t : in;
    L->out_l = split == DT_TP_COLUMN ? out / t : out;
    L->groups = groups;
    L->b = -1;
    dt_status s = dt__layer_param(p, &L->base, "weight", 2, (int64_t[]){L->out_l, L->in_l}, &L->w);
    if (s == DT_OK) /* column: cut by output rows (in groups); row: by input columns */
        s = dt_param_set_shard(p, L->w, t, L->r, split == DT_TP_COLUMN ? 0 : 1, (int)groups);
    if (s == DT_OK && bias)
        s = dt__layer_param(p, &L->base, "bias", 1, (int64_t[]){L->out_l}, &L->b);
    if (s == DT_OK && bias && split == DT_TP_COLUMN)
        s = dt_param_set_shard(p, L->b, t, L->r, 0, (int)groups);
    if (s != DT_OK) {
        free(L);
        return s;
    }
    *l = &L->base;
    return DT_OK;
}

dt_status dt_linear_parallel_create(dt_params *p, const char *name, int64_t in, int64_t out, bool bias,
                                    dt_tp_split split, dt_comm *tp, dt_layer **l)
{
    return dt__linear_parallel_create(p, name, in, out, bias, split, 1, tp, l);
}
