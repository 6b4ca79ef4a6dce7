/* LayerNorm over the last dimension: y = (x - mean) / sqrt(var + eps) * w + b
 * (biased variance, as PyTorch).  Saves the normalised input and 1/std. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/status.h"
#include "dtrain/nn.h"
#include "nn/layer.h"
#include "nn/init.h"
#include "nn/saved.h"
#include "tensor/threads.h"

typedef struct {
    dt_layer base;
    int64_t dim;
    float eps;
    int w, b;
} layernorm;

typedef struct {
    dt_tensor x;
    float *xhat, *rstd; /* the normalised input and 1/std per row */
} ln_saved;

/* Rows are independent, so forward and the input gradient split by rows;
 * the weight and bias gradients sum over rows, so they split by columns and
 * add rows in order (the same bits for any thread count). */
typedef struct {
    const layernorm *L;
    ln_saved *sv;
    const float *x, *dy, *w, *b;
    float *y, *dx, *dw, *db;
    int64_t rows;
} ln_args;

#define GRAIN_ROWS 16

/* Row sums in LANES independent f32 partial sums (a fixed order, so the same
 * bits every time; vectorised), added together in double. */
#define LANES 16

static double lane_sum(const float *x, int64_t n)
{
    float part[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++)
            part[l] += x[i + l];
    double s = 0;
    for (; i < n; i++)
        s += x[i];
    for (int l = 0; l < LANES; l++)
        s += part[l];
    return s;
}

static double lane_sqdev(const float *x, int64_t n, float mean)
{
    float part[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++)
            part[l] += (x[i + l] - mean) * (x[i + l] - mean);
    double s = 0;
    for (; i < n; i++)
        s += (double)(x[i] - mean) * (x[i] - mean);
    for (int l = 0; l < LANES; l++)
        s += part[l];
    return s;
}

static void forward_rows(int64_t r0, int64_t r1, void *p)
{
    ln_args *a = p;
    const layernorm *L = a->L;
    int64_t D = L->dim;
    const float *restrict w = a->w, *restrict b = a->b;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict xr = a->x + r * D;
        float mean = (float)(lane_sum(xr, D) / (double)D);
        double var = lane_sqdev(xr, D, mean) / (double)D;
        float rstd = (float)(1.0 / sqrt(var + L->eps));
        a->sv->rstd[r] = rstd;
        float *restrict xh = a->sv->xhat + r * D, *restrict y = a->y + r * D;
        for (int64_t i = 0; i < D; i++) {
            float h = (xr[i] - mean) * rstd;
            xh[i] = h;
            y[i] = h * w[i] + b[i];
        }
    }
}

static dt_status forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    layernorm *L = (layernorm *)l;
    int64_t D = L->dim, n = dt_tensor_numel(x) / D;
    if (x->shape[x->ndim - 1] != D)
        return dt__fail(DT_ERR_INVALID, "%s: last dimension %lld, expected %lld", l->name,
                        (long long)x->shape[x->ndim - 1], (long long)D);
    ln_saved *sv = DT_SAVE(ctx, l, ln_saved);
    if (!sv)
        return DT_ERR_NOMEM;
    sv->x = *x;
    *y = *x;
    y->data = dt_arena_alloc(ctx->arena, n * D);
    sv->xhat = dt_arena_alloc(ctx->arena, n * D);
    sv->rstd = dt_arena_alloc(ctx->arena, n);
    if (!y->data || !sv->xhat || !sv->rstd)
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    ln_args a = {.L = L, .sv = sv, .x = x->data, .y = y->data, .rows = n, .w = dt_param_value(ctx->params, L->w),
                 .b = dt_param_value(ctx->params, L->b)};
    dt__parallel_for(n, GRAIN_ROWS, forward_rows, &a);
    return DT_OK;
}

static void input_grad_rows(int64_t r0, int64_t r1, void *p)
{
    ln_args *a = p;
    const layernorm *L = a->L;
    int64_t D = L->dim;
    const float *restrict w = a->w;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict g = a->dy + r * D, *restrict h = a->sv->xhat + r * D;
        float pgw[LANES] = {0}, pgwh[LANES] = {0};
        int64_t i = 0;
        for (; i + LANES <= D; i += LANES)
            for (int l = 0; l < LANES; l++) {
                float gw = g[i + l] * w[i + l];
                pgw[l] += gw;
                pgwh[l] += gw * h[i + l];
            }
        double mean_gw = 0, mean_gwh = 0;
        for (; i < D; i++) {
            float gw = g[i] * w[i];
            mean_gw += gw;
            mean_gwh += gw * h[i];
        }
        for (int l = 0; l < LANES; l++) {
            mean_gw += pgw[l];
            mean_gwh += pgwh[l];
        }
        float mgw = (float)(mean_gw / (double)D), mgwh = (float)(mean_gwh / (double)D), rstd = a->sv->rstd[r];
        float *restrict dx = a->dx + r * D;
        for (int64_t j = 0; j < D; j++)
            dx[j] = rstd * (g[j] * w[j] - mgw - h[j] * mgwh);
    }
}

static void param_grad_cols(int64_t c0, int64_t c1, void *p)
{
    ln_args *a = p;
    int64_t D = a->L->dim;
    float *restrict dw = a->dw, *restrict db = a->db;
    for (int64_t r = 0; r < a->rows; r++) {
        const float *restrict g = a->dy + r * D, *restrict h = a->sv->xhat + r * D;
        for (int64_t i = c0; i < c1; i++) {
            dw[i] += g[i] * h[i];
            db[i] += g[i];
        }
    }
}

static dt_status backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    layernorm *L = (layernorm *)l;
    ln_saved *sv = DT_LOAD(ctx, l, ln_saved);
    if (!sv)
        return DT_ERR_INVALID;
    int64_t D = L->dim, n = dt_tensor_numel(&sv->x) / D;
    ln_args a = {.L = L, .sv = sv, .dy = dy->data, .rows = n, .w = dt_param_value(ctx->params, L->w),
                 .dw = dt_param_grad(ctx->params, L->w), .db = dt_param_grad(ctx->params, L->b)};
    if (need_dx) {
        *dx = sv->x;
        if (!(dx->data = dt_arena_alloc(ctx->arena, n * D)))
            return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
        a.dx = dx->data;
        dt__parallel_for(n, GRAIN_ROWS, input_grad_rows, &a);
    }
    dt__parallel_for(D, n >= 1024 ? 16 : D, param_grad_cols, &a); /* split only when there are many rows */
    dt_params_grad_ready(ctx->params, L->w);
    dt_params_grad_ready(ctx->params, L->b);
    return DT_OK;
}

static void init(dt_layer *l, dt_params *p, uint64_t seed)
{
    (void)seed;
    layernorm *L = (layernorm *)l;
    dt__init_const(p, L->w, 1.0f);
    dt__init_const(p, L->b, 0.0f);
}

static void destroy(dt_layer *l) { free(l); }

static const dt_layer_ops ops = {"layernorm", forward, backward, init, destroy};

dt_status dt_layernorm_create(dt_params *p, const char *name, int64_t dim, float eps, dt_layer **l)
{
    if (dim <= 0 || !(eps > 0))
        return dt__fail(DT_ERR_INVALID, "layernorm %s: dim %lld, eps %g", name, (long long)dim, eps);
    layernorm *L = dt__layer_new(sizeof *L, &ops, "%s", name);
    if (!L)
        return DT_ERR_NOMEM;
    L->dim = dim;
    L->eps = eps;
    dt_status s = dt__layer_param(p, &L->base, "weight", 1, &dim, &L->w);
    if (s == DT_OK)
        s = dt__layer_param(p, &L->base, "bias", 1, &dim, &L->b);
    if (s != DT_OK) {
        free(L);
        return s;
    }
    *l = &L->base;
    return DT_OK;
}
