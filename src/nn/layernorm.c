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
    dt__ops(ctx)->layernorm_fwd(y->data, sv->xhat, sv->rstd, x->data, dt_param_value(ctx->params, L->w),
                                dt_param_value(ctx->params, L->b), n, D, L->eps);
    return DT_OK;
}

static dt_status backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    layernorm *L = (layernorm *)l;
    ln_saved *sv = DT_LOAD(ctx, l, ln_saved);
    if (!sv)
        return DT_ERR_INVALID;
    int64_t D = L->dim, n = dt_tensor_numel(&sv->x) / D;
    if (need_dx) {
        *dx = sv->x;
        if (!(dx->data = dt_arena_alloc(ctx->arena, n * D)))
            return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    }
    dt__ops(ctx)->layernorm_bwd(need_dx ? dx->data : NULL, dt_param_grad(ctx->params, L->w),
                                dt_param_grad(ctx->params, L->b), dy->data, sv->xhat, sv->rstd,
                                dt_param_value(ctx->params, L->w), n, D);
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
