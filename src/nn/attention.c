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
#include "tensor/threads.h"

typedef struct {
    dt_layer base;
    int64_t dim, heads, hd; /* heads: this rank's */
    int64_t dl;             /* heads x hd */
    dt_layer *c_attn, *c_proj;
} attention;

typedef struct {
    int64_t B, T;
    const float *qkv; /* c_attn's output [B, T, 3 DL], kept in the arena: q, k, v read in place */
    float *p;         /* [B, H, T, T] */
} attn_saved;

/* Causal attention skips the products above the diagonal: rows are taken in
 * blocks of CAUSAL_ROWS, and a block ending at row r needs keys 0..r only
 * (at T = 128 that is 3/4 of the full products). */
#define CAUSAL_ROWS 64

/* The (batch, head) pairs are independent: the compute threads take ranges
 * of them, each head's small products running single-threaded. */
typedef struct {
    attention *A;
    attn_saved *S;
    const dt_ctx *ctx; /* its precision */
    float *merged; /* forward: [B, T, D] */
    const float *dmerged;
    float *dqkv, *dP; /* backward: [B, T, 3D], [B, H, T, T] */
} heads_args;

/* Row i of P holds scores for keys 0..cols-1 (cols > i); only 0..i count. */
static void softmax_causal(float *P, int64_t T, int64_t i0, int64_t i1)
{
    for (int64_t i = i0; i < i1; i++) {
        float *row = P + i * T, mx = row[0];
        for (int64_t j = 1; j <= i; j++)
            mx = row[j] > mx ? row[j] : mx;
        double sum = 0;
        for (int64_t j = 0; j <= i; j++) {
            row[j] = expf(row[j] - mx);
            sum += row[j];
        }
        float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j <= i; j++)
            row[j] *= inv;
        for (int64_t j = i + 1; j < T; j++)
            row[j] = 0.0f; /* causal mask */
    }
}

static void forward_heads(int64_t begin, int64_t end, void *arg)
{
    heads_args *a = arg;
    attention *A = a->A;
    attn_saved *S = a->S;
    int64_t T = S->T, D = A->dl, H = A->heads, hd = A->hd, ld = 3 * D;
    float scale = 1.0f / sqrtf((float)hd);
    for (int64_t bh = begin; bh < end; bh++) {
        int64_t b = bh / H, h = bh % H;
        const float *q = S->qkv + b * T * ld + h * hd, *k = q + D, *v = q + 2 * D; /* row stride 3 DL */
        float *P = S->p + (size_t)(bh * T * T), *o = a->merged + b * T * D + h * hd;
        for (int64_t i0 = 0; i0 < T; i0 += CAUSAL_ROWS) {
            int64_t rows = T - i0 < CAUSAL_ROWS ? T - i0 : CAUSAL_ROWS, keys = i0 + rows;
            dt__gemm(a->ctx, 0, 1, rows, keys, hd, scale, q + i0 * ld, ld, k, ld, 0.0f, P + i0 * T, T);
            softmax_causal(P, T, i0, i0 + rows);
            /* O = P V, written straight into its columns of merged */
            dt__gemm(a->ctx, 0, 0, rows, hd, keys, 1.0f, P + i0 * T, T, v, ld, 0.0f, o + i0 * D, D);
        }
    }
}

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
    S->p = dt_arena_alloc(ctx->arena, B * H * T * T);
    float *merged = dt_arena_alloc(ctx->arena, B * T * D);
    if (!S->p || !merged)
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    dt__parallel_for(B * H, 1, forward_heads, &(heads_args){.A = A, .S = S, .ctx = ctx, .merged = merged});
    dt_tensor m = dt_tensor_view(merged, 3, (int64_t[]){B, T, D});
    return A->c_proj->ops->forward(A->c_proj, ctx, &m, y);
}

static void backward_heads(int64_t begin, int64_t end, void *arg)
{
    heads_args *a = arg;
    attention *A = a->A;
    const attn_saved *S = a->S;
    int64_t T = S->T, D = A->dl, H = A->heads, hd = A->hd, ld = 3 * D;
    float scale = 1.0f / sqrtf((float)hd);
    for (int64_t bh = begin; bh < end; bh++) {
        int64_t b = bh / H, h = bh % H;
        const float *q = S->qkv + b * T * ld + h * hd, *k = q + D, *v = q + 2 * D;
        const float *P = S->p + (size_t)(bh * T * T);
        float *dP = a->dP + (size_t)(bh * T * T);
        const float *dO = a->dmerged + b * T * D + h * hd; /* this head's columns, row stride D */
        float *dq = a->dqkv + b * T * ld + h * hd, *dk = dq + D, *dv = dq + 2 * D; /* row stride 3D */
        /* Row blocks from the last (which spans every key) to the first, so
         * that the first product into dK and dV sets them and the rest add. */
        int64_t last = (T - 1) / CAUSAL_ROWS * CAUSAL_ROWS;
        for (int64_t i0 = last; i0 >= 0; i0 -= CAUSAL_ROWS) {
            int64_t rows = T - i0 < CAUSAL_ROWS ? T - i0 : CAUSAL_ROWS, keys = i0 + rows;
            float beta = i0 == last ? 0.0f : 1.0f;
            float *g = dP + i0 * T;
            const float *pr = P + i0 * T;
            dt__gemm(a->ctx, 0, 1, rows, keys, hd, 1.0f, dO + i0 * D, D, v, ld, 0.0f, g, T); /* dP = dO V^T */
            dt__gemm(a->ctx, 1, 0, keys, hd, rows, 1.0f, pr, T, dO + i0 * D, D, beta, dv, ld); /* dV += P^T dO */
            for (int64_t r = 0; r < rows; r++) { /* dS = P * (dP - sum_j dP P), scaled */
                int64_t i = i0 + r;
                float *gr = g + r * T;
                const float *prr = pr + r * T;
                double dot = 0;
                for (int64_t j = 0; j <= i; j++)
                    dot += (double)gr[j] * prr[j];
                for (int64_t j = 0; j < keys; j++)
                    gr[j] = j <= i ? prr[j] * (gr[j] - (float)dot) * scale : 0.0f;
            }
            dt__gemm(a->ctx, 0, 0, rows, hd, keys, 1.0f, g, T, k, ld, 0.0f, dq + i0 * ld, ld); /* dQ = dS K */
            dt__gemm(a->ctx, 1, 0, keys, hd, rows, 1.0f, g, T, q + i0 * ld, ld, beta, dk, ld); /* dK += dS^T Q */
        }
    }
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
    float *dqkv = dt_arena_alloc(ctx->arena, B * T * 3 * D), *dP = dt_arena_alloc(ctx->arena, B * H * T * T);
    if (!dqkv || !dP)
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    dt__parallel_for(B * H, 1, backward_heads, &(heads_args){.A = A, .S = S, .ctx = ctx, .dmerged = dmerged.data, .dqkv = dqkv, .dP = dP});
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

static dt_status create(dt_params *p, const char *name, int64_t dim, int64_t heads, dt_comm *tp, bool sp,
                        dt_layer **l)
{
    if (dim <= 0 || heads <= 0 || dim % heads != 0)
        return dt__fail(DT_ERR_INVALID, "attention %s: dim %lld is not a positive multiple of %lld heads", name,
                        (long long)dim, (long long)heads);
    int t = tp ? dt_comm_size(tp) : 1;
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

dt_status dt_attention_parallel_create(dt_params *p, const char *name, int64_t dim, int64_t heads, dt_comm *tp,
                                       dt_layer **l)
{
    if (!tp)
        return dt__fail(DT_ERR_INVALID, "attention %s: the tensor-parallel communicator is NULL", name);
    return create(p, name, dim, heads, tp, false, l);
}

dt_status dt__attention_seq_create(dt_params *p, const char *name, int64_t dim, int64_t heads, dt_comm *tp,
                                   dt_layer **l)
{
    return create(p, name, dim, heads, tp, true, l);
}
