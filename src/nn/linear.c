/* Linear: y[n, out] = x[n, in] W^T + b, W stored [out, in] as in PyTorch.
 * x may have any leading dimensions; they are flattened into n. */
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
    int64_t in, out;
    int w, b; /* parameter indices (b = -1 without bias) */
} linear;

static int64_t rows(const dt_tensor *x, int64_t in) { return dt_tensor_numel(x) / in; }

static dt_status forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    linear *L = (linear *)l;
    if (x->shape[x->ndim - 1] != L->in)
        return dt__fail(DT_ERR_INVALID, "%s: input's last dimension is %lld, expected %lld", l->name,
                        (long long)x->shape[x->ndim - 1], (long long)L->in);
    int64_t n = rows(x, L->in);
    dt_tensor *saved = DT_SAVE(ctx, l, dt_tensor);
    if (!saved)
        return DT_ERR_NOMEM;
    *saved = *x;
    *y = *x;
    y->shape[y->ndim - 1] = L->out;
    if (!(y->data = dt_arena_alloc(ctx->arena, n * L->out)))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    const float *W = dt_param_value(ctx->params, L->w);
    if (L->b >= 0)
        dt__gemm_bias_packed(ctx, 0, 1, n, L->out, L->in, x->data, W, dt_param_value(ctx->params, L->b), y->data);
    else
        dt__gemm_packed(ctx, 0, 1, n, L->out, L->in, 1.0f, x->data, W, 0.0f, y->data);
    return DT_OK;
}

static dt_status backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    linear *L = (linear *)l;
    const dt_tensor *x = DT_LOAD(ctx, l, dt_tensor);
    if (!x)
        return DT_ERR_INVALID;
    int64_t n = rows(x, L->in);
    /* dW[out, in] += dy^T x ; db += column sums of dy */
    if (need_dx) {
        *dx = *x;
        if (!(dx->data = dt_arena_alloc(ctx->arena, n * L->in)))
            return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    }
    dt__linear_grads(ctx, L->out, L->in, n, dy->data, x->data, dt_param_value(ctx->params, L->w),
                     dt_param_grad(ctx->params, L->w), L->b >= 0 ? dt_param_grad(ctx->params, L->b) : NULL,
                     need_dx ? dx->data : NULL, (const int[]){L->w, L->b});
    return DT_OK;
}

/* PyTorch's nn.Linear default: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias. */
static void init(dt_layer *l, dt_params *p, uint64_t seed)
{
    linear *L = (linear *)l;
    float bound = 1.0f / sqrtf((float)L->in);
    dt__init_uniform(p, L->w, seed, bound);
    if (L->b >= 0)
        dt__init_uniform(p, L->b, seed, bound);
}

static void destroy(dt_layer *l) { free(l); }

static const dt_layer_ops ops = {"linear", forward, backward, init, destroy};

dt_status dt_linear_create(dt_params *p, const char *name, int64_t in, int64_t out, bool bias, dt_layer **l)
{
    if (in <= 0 || out <= 0)
        return dt__fail(DT_ERR_INVALID, "linear %s: sizes %lld x %lld", name, (long long)in, (long long)out);
    linear *L = dt__layer_new(sizeof *L, &ops, "%s", name);
    if (!L)
        return DT_ERR_NOMEM;
    L->in = in;
    L->out = out;
    L->b = -1;
    dt_status s = dt__layer_param(p, &L->base, "weight", 2, (int64_t[]){out, in}, &L->w);
    if (s == DT_OK && bias)
        s = dt__layer_param(p, &L->base, "bias", 1, (int64_t[]){out}, &L->b);
    if (s != DT_OK) {
        free(L);
        return s;
    }
    *l = &L->base;
    return DT_OK;
}

void dt_layer_destroy(dt_layer *l)
{
    if (l)
        l->ops->destroy(l);
}
