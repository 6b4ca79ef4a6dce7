/* Causal multi-head self-attention over [B, T, D] (GPT-2 layout):
 * qkv = x Wqkv^T + b (q, k, v side by side, head h at columns h*hd),
 * O = softmax(Q K^T / sqrt(hd) + causal mask) V per (batch, head),
 * y = merge(O) Wproj^T + b.  Keeps qkv (read in place, row stride 3D) and the
 * probabilities for backward.
 *
 * Tensor parallel (dt_attention_parallel_create): the heads are split over
 * the group, H/t per rank; the QKV projection is column-parallel (each rank
 * computes its heads' q, k and v: three output groups cut t ways) and the
 * output projection row-parallel (its input is this rank's heads, merged),
 * so the block's attention costs one allreduce forward and one backward.
 * Here D is the model's width and DL = (heads here) x hd the width of this
 * rank's heads (DL = D without tensor parallelism). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dtrain/nn.h"
#include "nn/layer.h"
#include "nn/saved.h"
#include "nn/tp.h"

typedef struct {
    dt_layer base;
    int64_t dim, heads, hd; /* heads: this rank's */
    int64_t dl;             /* heads x hd */
    dt_layer *c_attn, *c_proj;
} attention;

typedef struct {
    int64_t B, T;
    const float *qkv; /* c_attn's output [B, T, 3 DL], kept in the arena: q, k, v read in place */
    float *p;         /* what the backend keeps: [B, H, T, T] probabilities (cpu), [B, H, T] log-sum-exp (cuda) */
    const float *out; /* the merged heads [B, T, DL] */
} attn_saved;

static dt_status forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    attention *A = (attention *)l;
    if (x->ndim != 3 || x->shape[2] != A->dim)
        return dt__fail(DT_ERR_INVALID, "%s: expects [batch, time, %lld]", l->name, (long long)A->dim);
    dt_tensor qkv;
    DT_CHECK(A->c_attn->ops->forward(A->c_attn, ctx, x, &qkv));
    /* the whole sequences: under sequence parallelism c_attn gathered them */
    int64_t B = qkv.shape[0], T = qkv.shape[1], D = A->dl, H = A->heads;
    attn_saved *S = DT_SAVE(ctx, l, attn_saved); /* above c_attn's record: popped before it */
    if (!S)
        return DT_ERR_NOMEM;
    S->B = B;
    S->T = T;
    S->qkv = qkv.data;
    const dt_compute_ops *ops = dt__ops(ctx);
    S->p = dt_arena_alloc(ctx->arena, ops->attn_saved_floats(B, H, T));
    float *merged = dt_arena_alloc(ctx->arena, B * T * D);
    if (!S->p || !merged)
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    S->out = merged;
    ops->attn_fwd(ctx->compute, merged, S->p, qkv.data, B, T, H, A->hd);
    dt_tensor m = dt_tensor_view(merged, 3, (int64_t[]){B, T, D});
    return A->c_proj->ops->forward(A->c_proj, ctx, &m, y);
}

static dt_status backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    attention *A = (attention *)l;
    dt_tensor dmerged;
    DT_CHECK(A->c_proj->ops->backward(A->c_proj, ctx, dy, &dmerged, true));
    attn_saved *S = DT_LOAD(ctx, l, attn_saved);
    if (!S)
        return DT_ERR_INVALID;
    int64_t B = S->B, T = S->T, D = A->dl, H = A->heads;
    const dt_compute_ops *ops = dt__ops(ctx);
    float *dqkv = dt_arena_alloc(ctx->arena, B * T * 3 * D),
          *scratch = dt_arena_alloc(ctx->arena, ops->attn_scratch_floats(B, H, T, A->hd));
    if (!dqkv || !scratch)
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    ops->attn_bwd(ctx->compute, dqkv, scratch, dmerged.data, S->qkv, S->out, S->p, B, T, H, A->hd);
    dt_tensor g = dt_tensor_view(dqkv, 3, (int64_t[]){B, T, 3 * D});
    return A->c_attn->ops->backward(A->c_attn, ctx, &g, dx, need_dx);
}

static void init(dt_layer *l, dt_params *p, uint64_t seed)
{
    attention *A = (attention *)l;
    A->c_attn->ops->init(A->c_attn, p, seed);
    A->c_proj->ops->init(A->c_proj, p, seed);
}

static void destroy(dt_layer *l)
{
    attention *A = (attention *)l;
    dt_layer_destroy(A->c_attn);
    dt_layer_destroy(A->c_proj);
    free(A);
}

static const dt_layer_ops ops = {"attention", forward, backward, init, destroy};

static dt_status create(dt_params *p, const char *name, int64_t dim, int64_t heads, const dt_tp_group *tp,
                        bool sp, dt_layer **l)
{
    if (dim <= 0 || heads <= 0 || dim % heads != 0)
        return dt__fail(DT_ERR_INVALID, "attention %s: dim %lld is not a positive multiple of %lld heads", name,
                        (long long)dim, (long long)heads);
    int t = tp ? tp->size : 1;
    if (heads % t)
        return dt__fail(DT_ERR_INVALID,
                        "attention %s: %lld heads cannot be split over %d tensor-parallel ranks (not divisible by %d)",
                        name, (long long)heads, t, t);
    attention *A = dt__layer_new(sizeof *A, &ops, "%s", name);
    if (!A)
        return DT_ERR_NOMEM;
    A->dim = dim;
    A->heads = heads / t;
    A->hd = dim / heads;
    A->dl = A->heads * A->hd;
    char sub[96];
    snprintf(sub, sizeof sub, "%s.c_attn", name);
    dt_status s = tp ? dt__linear_parallel_create(p, sub, dim, 3 * dim, true, DT_TP_COLUMN, 3, sp, tp, &A->c_attn)
                     : dt_linear_create(p, sub, dim, 3 * dim, true, &A->c_attn);
    snprintf(sub, sizeof sub, "%s.c_proj", name);
    if (s == DT_OK)
        s = tp ? dt__linear_parallel_create(p, sub, dim, dim, true, DT_TP_ROW, 1, sp, tp, &A->c_proj)
               : dt_linear_create(p, sub, dim, dim, true, &A->c_proj);
    if (s != DT_OK) {
        dt_layer_destroy(A->c_attn);
        free(A);
        return s;
    }
    *l = &A->base;
    return DT_OK;
}

dt_status dt_attention_create(dt_params *p, const char *name, int64_t dim, int64_t heads, dt_layer **l)
{
    return create(p, name, dim, heads, NULL, false, l);
}

dt_status dt_attention_parallel_create(dt_params *p, const char *name, int64_t dim, int64_t heads,
                                       const dt_tp_group *tp, dt_layer **l)
{
    char who[96];
    snprintf(who, sizeof who, "attention %s", name);
    DT_CHECK(dt__tp_check(tp, who));
    return create(p, name, dim, heads, tp, false, l);
}

dt_status dt__attention_seq_create(dt_params *p, const char *name, int64_t dim, int64_t heads,
                                   const dt_tp_group *tp, dt_layer **l)
{
    return create(p, name, dim, heads, tp, true, l);
}
