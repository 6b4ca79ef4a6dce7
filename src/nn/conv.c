/* conv2d (NCHW, square kernel, stride 1, zero padding) through im2col + GEMM,
 * and 2x2/stride-2 max pooling.  Weights [out, in, k, k] as PyTorch's Conv2d;
 * backward recomputes im2col per image instead of keeping it. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dtrain/nn.h"
#include "nn/layer.h"
#include "nn/init.h"
#include "nn/saved.h"

typedef struct {
    dt_layer base;
    int64_t cin, cout, k, pad;
    int w, b;
} conv2d;

static void im2col(const float *img, int64_t C, int64_t H, int64_t W, int64_t k, int64_t pad, int64_t OH, int64_t OW,
                   float *cols)
{
    for (int64_t c = 0; c < C; c++)
        for (int64_t ky = 0; ky < k; ky++)
            for (int64_t kx = 0; kx < k; kx++) {
                float *row = cols + ((c * k + ky) * k + kx) * OH * OW;
                for (int64_t oy = 0; oy < OH; oy++) {
                    int64_t iy = oy + ky - pad;
                    for (int64_t ox = 0; ox < OW; ox++) {
                        int64_t ix = ox + kx - pad;
                        row[oy * OW + ox] = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? img[(c * H + iy) * W + ix] : 0.0f;
                    }
                }
            }
}

static void col2im_add(const float *cols, int64_t C, int64_t H, int64_t W, int64_t k, int64_t pad, int64_t OH,
                       int64_t OW, float *img)
{
    for (int64_t c = 0; c < C; c++)
        for (int64_t ky = 0; ky < k; ky++)
            for (int64_t kx = 0; kx < k; kx++) {
                const float *row = cols + ((c * k + ky) * k + kx) * OH * OW;
                for (int64_t oy = 0; oy < OH; oy++) {
                    int64_t iy = oy + ky - pad;
                    if (iy < 0 || iy >= H)
                        continue;
                    for (int64_t ox = 0; ox < OW; ox++) {
                        int64_t ix = ox + kx - pad;
                        if (ix >= 0 && ix < W)
                            img[(c * H + iy) * W + ix] += row[oy * OW + ox];
                    }
                }
            }
}

static dt_status conv_forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    conv2d *L = (conv2d *)l;
    if (x->ndim != 4 || x->shape[1] != L->cin)
        return dt__fail(DT_ERR_INVALID, "%s: expects [batch, %lld, height, width]", l->name, (long long)L->cin);
    int64_t N = x->shape[0], H = x->shape[2], W = x->shape[3];
    int64_t OH = H + 2 * L->pad - L->k + 1, OW = W + 2 * L->pad - L->k + 1, CKK = L->cin * L->k * L->k;
    if (OH <= 0 || OW <= 0)
        return dt__fail(DT_ERR_INVALID, "%s: %lldx%lld input is smaller than the kernel", l->name, (long long)H, (long long)W);
    dt_tensor *saved = DT_SAVE(ctx, l, dt_tensor);
    if (!saved)
        return DT_ERR_NOMEM;
    *saved = *x;
    *y = dt_tensor_view(NULL, 4, (int64_t[]){N, L->cout, OH, OW});
    y->data = dt_arena_alloc(ctx->arena, N * L->cout * OH * OW);
    float *cols = dt_arena_alloc(ctx->arena, CKK * OH * OW); /* one image's im2col */
    if (!y->data || !cols)
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    const float *Wt = dt_param_value(ctx->params, L->w), *b = dt_param_value(ctx->params, L->b);
    for (int64_t n = 0; n < N; n++) {
        float *out = y->data + n * L->cout * OH * OW;
        for (int64_t o = 0; o < L->cout; o++)
            for (int64_t i = 0; i < OH * OW; i++)
                out[o * OH * OW + i] = b[o];
        im2col(x->data + n * L->cin * H * W, L->cin, H, W, L->k, L->pad, OH, OW, cols);
        dt_sgemm(0, 0, L->cout, OH * OW, CKK, 1.0f, Wt, cols, 1.0f, out);
    }
    return DT_OK;
}

static dt_status conv_backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    conv2d *L = (conv2d *)l;
    const dt_tensor *x = DT_LOAD(ctx, l, dt_tensor);
    if (!x)
        return DT_ERR_INVALID;
    int64_t N = x->shape[0], H = x->shape[2], W = x->shape[3];
    int64_t OH = dy->shape[2], OW = dy->shape[3], CKK = L->cin * L->k * L->k;
    float *dW = dt_param_grad(ctx->params, L->w), *db = dt_param_grad(ctx->params, L->b);
    const float *Wt = dt_param_value(ctx->params, L->w);
    float *dcols = need_dx ? dt_arena_alloc(ctx->arena, CKK * OH * OW) : NULL;
    float *cols = dt_arena_alloc(ctx->arena, CKK * OH * OW); /* recomputed per image, not kept from forward */
    if (!cols)
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    if (need_dx) {
        *dx = *x;
        dx->data = dt_arena_calloc(ctx->arena, N * L->cin * H * W); /* col2im accumulates */
        if (!dx->data || !dcols)
            return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    }
    for (int64_t n = 0; n < N; n++) {
        const float *g = dy->data + n * L->cout * OH * OW;
        im2col(x->data + n * L->cin * H * W, L->cin, H, W, L->k, L->pad, OH, OW, cols);
        dt_sgemm(0, 1, L->cout, CKK, OH * OW, 1.0f, g, cols, 1.0f, dW);
        for (int64_t o = 0; o < L->cout; o++) {
            double s = 0;
            for (int64_t i = 0; i < OH * OW; i++)
                s += g[o * OH * OW + i];
            db[o] += (float)s;
        }
        if (need_dx) {
            dt_sgemm(1, 0, CKK, OH * OW, L->cout, 1.0f, Wt, g, 0.0f, dcols);
            col2im_add(dcols, L->cin, H, W, L->k, L->pad, OH, OW, dx->data + n * L->cin * H * W);
        }
    }
    dt_params_grad_ready(ctx->params, L->w);
    dt_params_grad_ready(ctx->params, L->b);
    return DT_OK;
}

/* PyTorch's Conv2d default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in*k*k. */
static void conv_init(dt_layer *l, dt_params *p, uint64_t seed)
{
    conv2d *L = (conv2d *)l;
    float bound = 1.0f / sqrtf((float)(L->cin * L->k * L->k));
    dt__init_uniform(p, L->w, seed, bound);
    dt__init_uniform(p, L->b, seed, bound);
}

static void free_layer(dt_layer *l) { free(l); }

static const dt_layer_ops conv_ops = {"conv2d", conv_forward, conv_backward, conv_init, free_layer};

dt_status dt_conv2d_create(dt_params *p, const char *name, int64_t in, int64_t out, int64_t k, int64_t pad, dt_layer **l)
{
    if (in <= 0 || out <= 0 || k <= 0 || pad < 0 || pad >= k)
        return dt__fail(DT_ERR_INVALID, "conv2d %s: in %lld, out %lld, kernel %lld, padding %lld", name, (long long)in,
                        (long long)out, (long long)k, (long long)pad);
    conv2d *L = dt__layer_new(sizeof *L, &conv_ops, "%s", name);
    if (!L)
        return DT_ERR_NOMEM;
    L->cin = in;
    L->cout = out;
    L->k = k;
    L->pad = pad;
    dt_status s = dt__layer_param(p, &L->base, "weight", 4, (int64_t[]){out, in, k, k}, &L->w);
    if (s == DT_OK)
        s = dt__layer_param(p, &L->base, "bias", 1, &out, &L->b);
    if (s != DT_OK) {
        free(L);
        return s;
    }
    *l = &L->base;
    return DT_OK;
}

/* ---- 2x2 max pooling, stride 2 ---- */
typedef struct {
    dt_tensor x;
    int32_t *arg; /* flat input index of each output's maximum */
} pool_saved;

static dt_status pool_forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    if (x->ndim != 4 || x->shape[2] < 2 || x->shape[3] < 2)
        return dt__fail(DT_ERR_INVALID, "%s: expects [batch, channels, height >= 2, width >= 2]", l->name);
    int64_t NC = x->shape[0] * x->shape[1], H = x->shape[2], W = x->shape[3], OH = H / 2, OW = W / 2;
    pool_saved *P = DT_SAVE(ctx, l, pool_saved);
    if (!P)
        return DT_ERR_NOMEM;
    P->x = *x;
    *y = dt_tensor_view(NULL, 4, (int64_t[]){x->shape[0], x->shape[1], OH, OW});
    y->data = dt_arena_alloc(ctx->arena, NC * OH * OW);
    P->arg = (int32_t *)dt_arena_alloc(ctx->arena, NC * OH * OW);
    if (!y->data || !P->arg)
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    for (int64_t c = 0; c < NC; c++)
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++) {
                int64_t best = -1;
                float mx = -FLT_MAX;
                for (int64_t dy = 0; dy < 2; dy++)
                    for (int64_t dxx = 0; dxx < 2; dxx++) {
                        int64_t i = (c * H + 2 * oy + dy) * W + 2 * ox + dxx;
                        if (best < 0 || x->data[i] > mx) {
                            mx = x->data[i];
                            best = i;
                        }
                    }
                int64_t o = (c * OH + oy) * OW + ox;
                y->data[o] = mx;
                P->arg[o] = (int32_t)best;
            }
    return DT_OK;
}

static dt_status pool_backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    const pool_saved *P = DT_LOAD(ctx, l, pool_saved);
    if (!P)
        return DT_ERR_INVALID;
    if (!need_dx)
        return DT_OK;
    *dx = P->x;
    if (!(dx->data = dt_arena_calloc(ctx->arena, dt_tensor_numel(&P->x))))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    for (int64_t o = 0; o < dt_tensor_numel(dy); o++)
        dx->data[P->arg[o]] += dy->data[o];
    return DT_OK;
}

static void no_init(dt_layer *l, dt_params *p, uint64_t seed)
{
    (void)l, (void)p, (void)seed;
}

static const dt_layer_ops pool_ops = {"maxpool2d", pool_forward, pool_backward, no_init, free_layer};

dt_status dt_maxpool2d_create(const char *name, dt_layer **l)
{
    dt_layer *P = dt__layer_new(sizeof *P, &pool_ops, "%s", name);
    if (!P)
        return DT_ERR_NOMEM;
    *l = P;
    return DT_OK;
}

/* ---- reshape: same data, a new per-sample shape (the batch dimension stays) ---- */
typedef struct {
    dt_layer base;
    int ndim;
    int64_t shape[DT_MAX_DIMS];
} reshape;

static dt_status reshape_forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    reshape *R = (reshape *)l;
    int64_t per = 1;
    for (int i = 0; i < R->ndim; i++)
        per *= R->shape[i];
    if (dt_tensor_numel(x) != x->shape[0] * per)
        return dt__fail(DT_ERR_INVALID, "%s: %lld values per sample cannot be reshaped to %lld", l->name,
                        (long long)(dt_tensor_numel(x) / x->shape[0]), (long long)per);
    dt_tensor *saved = DT_SAVE(ctx, l, dt_tensor);
    if (!saved)
        return DT_ERR_NOMEM;
    *saved = *x;
    *y = *x;
    y->ndim = R->ndim + 1;
    for (int i = 0; i < R->ndim; i++)
        y->shape[i + 1] = R->shape[i];
    return DT_OK;
}

static dt_status reshape_backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    const dt_tensor *x = DT_LOAD(ctx, l, dt_tensor);
    if (!x)
        return DT_ERR_INVALID;
    if (need_dx) {
        *dx = *x;
        dx->data = dy->data;
    }
    return DT_OK;
}

static const dt_layer_ops reshape_ops = {"reshape", reshape_forward, reshape_backward, no_init, free_layer};

dt_status dt_reshape_create(const char *name, int ndim, const int64_t *shape, dt_layer **l)
{
    if (ndim < 1 || ndim >= DT_MAX_DIMS)
        return dt__fail(DT_ERR_INVALID, "reshape %s: %d dimensions per sample", name, ndim);
    reshape *R = dt__layer_new(sizeof *R, &reshape_ops, "%s", name);
    if (!R)
        return DT_ERR_NOMEM;
    R->ndim = ndim;
    memcpy(R->shape, shape, (size_t)ndim * sizeof *shape);
    *l = &R->base;
    return DT_OK;
}
