/* Element-wise activations: ReLU and GELU (tanh approximation).
 * This file is compiled with -O3 -ffast-math (CMakeLists.txt) so that the
 * GELU loops call glibc's vectorised tanhf (libmvec): scalar tanhf was a
 * quarter of gpt-mini's step time.  The forward keeps tanh for the backward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/status.h"
#include "dtrain/nn.h"
#include "nn/layer.h"
#include "nn/saved.h"
#include "tensor/threads.h"

#define GRAIN 16384

typedef struct {
    dt_layer base;
    int gelu;
} act;

typedef struct {
    dt_tensor x;
    float *tanh_u; /* gelu: tanh of the inner polynomial */
} act_saved;

typedef struct {
    const float *x, *dy;
    float *out, *t;
} act_args;

static void relu_fwd(int64_t b, int64_t e, void *p)
{
    act_args *a = p;
    const float *restrict x = a->x;
    float *restrict out = a->out;
    for (int64_t i = b; i < e; i++)
        out[i] = x[i] > 0 ? x[i] : 0;
}

static void relu_bwd(int64_t b, int64_t e, void *p)
{
    act_args *a = p;
    const float *restrict x = a->x, *restrict dy = a->dy;
    float *restrict out = a->out;
    for (int64_t i = b; i < e; i++)
        out[i] = x[i] > 0 ? dy[i] : 0;
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

static void gelu_fwd(int64_t b, int64_t e, void *p)
{
    act_args *a = p;
    const float *restrict x = a->x;
    float *restrict out = a->out, *restrict t = a->t;
    for (int64_t i = b; i < e; i++)
        t[i] = tanhf(GELU_K * (x[i] + GELU_C * x[i] * x[i] * x[i]));
    for (int64_t i = b; i < e; i++)
        out[i] = 0.5f * x[i] * (1.0f + t[i]);
}

static void gelu_bwd(int64_t b, int64_t e, void *p)
{
    act_args *a = p;
    const float *restrict x = a->x, *restrict t = a->t, *restrict dy = a->dy;
    float *restrict out = a->out;
    for (int64_t i = b; i < e; i++) {
        float du = GELU_K * (1.0f + 3.0f * GELU_C * x[i] * x[i]);
        out[i] = dy[i] * (0.5f * (1.0f + t[i]) + 0.5f * x[i] * (1.0f - t[i] * t[i]) * du);
    }
}

static dt_status forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    act *A = (act *)l;
    int64_t n = dt_tensor_numel(x);
    act_saved *sv = DT_SAVE(ctx, l, act_saved);
    if (!sv)
        return DT_ERR_NOMEM;
    sv->x = *x;
    *y = *x;
    y->data = dt_arena_alloc(ctx->arena, n);
    sv->tanh_u = A->gelu ? dt_arena_alloc(ctx->arena, n) : NULL;
    if (!y->data || (A->gelu && !sv->tanh_u))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    act_args a = {.x = x->data, .out = y->data, .t = sv->tanh_u};
    dt__parallel_for(n, GRAIN, A->gelu ? gelu_fwd : relu_fwd, &a);
    return DT_OK;
}

static dt_status backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    act *A = (act *)l;
    const act_saved *sv = DT_LOAD(ctx, l, act_saved);
    if (!sv)
        return DT_ERR_INVALID;
    if (!need_dx)
        return DT_OK;
    int64_t n = dt_tensor_numel(&sv->x);
    *dx = sv->x;
    if (!(dx->data = dt_arena_alloc(ctx->arena, n)))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    act_args a = {.x = sv->x.data, .dy = dy->data, .out = dx->data, .t = sv->tanh_u};
    dt__parallel_for(n, GRAIN, A->gelu ? gelu_bwd : relu_bwd, &a);
    return DT_OK;
}

static void init(dt_layer *l, dt_params *p, uint64_t seed)
{
    (void)l, (void)p, (void)seed;
}

static void destroy(dt_layer *l) { free(l); }

static const dt_layer_ops relu_ops = {"relu", forward, backward, init, destroy};
static const dt_layer_ops gelu_ops = {"gelu", forward, backward, init, destroy};

static dt_status create(const char *name, int gelu, dt_layer **l)
{
    act *A = dt__layer_new(sizeof *A, gelu ? &gelu_ops : &relu_ops, "%s", name);
    if (!A)
        return DT_ERR_NOMEM;
    A->gelu = gelu;
    *l = &A->base;
    return DT_OK;
}

dt_status dt_relu_create(const char *name, dt_layer **l) { return create(name, 0, l); }
dt_status dt_gelu_create(const char *name, dt_layer **l) { return create(name, 1, l); }

void dt_residual_add(const dt_tensor *a, const dt_tensor *b, dt_tensor *y)
{
    dt_vec_add(y->data, a->data, b->data, dt_tensor_numel(a));
}
