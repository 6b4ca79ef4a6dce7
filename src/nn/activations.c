/* Element-wise activations: ReLU and GELU (tanh approximation), on the
 * context's backend (the cpu kernels are in src/tensor/cpu_activations.c).
 * The forward keeps GELU's tanh for the backward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/status.h"
#include "dtrain/nn.h"
#include "nn/layer.h"
#include "nn/saved.h"

typedef struct {
    dt_layer base;
    int gelu;
    bool in_place; /* relu: writes its output over its input (dt__relu_set_in_place) */
    bool grad_over_output; /* gelu: the backward's dx over the forward's y (dt__gelu_set_grad_over_output) */
} act;

typedef struct {
    dt_tensor x;
    float *tanh_u; /* gelu: tanh of the inner polynomial (NULL: bf16, recomputed in the backward) */
    float *y;      /* the output */
} act_saved;

static dt_status forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    act *A = (act *)l;
    int64_t n = dt_tensor_numel(x);
    act_saved *sv = DT_SAVE(ctx, l, act_saved);
    if (!sv)
        return DT_ERR_NOMEM;
    sv->x = *x; /* in place: x's memory holds the output, positive exactly where x was */
    *y = *x;
    y->data = A->in_place ? x->data : dt_arena_alloc(ctx->arena, n);
    if (!y->data)
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    sv->y = y->data;
    const dt_compute_ops *ops = dt__ops(ctx);
    sv->tanh_u = NULL; /* bf16: the backward recomputes tanh */
    if (A->gelu && ctx->compute == DT_BF16 && ops->gelu_fwd_bf16 && ops->gelu_bwd_bf16 &&
        ops->gelu_fwd_bf16(y->data, x->data, n))
        return DT_OK;
    if (A->gelu && !(sv->tanh_u = dt_arena_alloc(ctx->arena, n)))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    if (A->gelu)
        ops->gelu_fwd(y->data, sv->tanh_u, x->data, n);
    else
        dt__ops(ctx)->relu_fwd(y->data, x->data, n);
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
    if (!(dx->data = A->grad_over_output ? sv->y : dt_arena_alloc(ctx->arena, n)))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    if (A->gelu && !sv->tanh_u) {
        if (!dt__ops(ctx)->gelu_bwd_bf16(dx->data, dy->data, sv->x.data, n))
            return dt__fail(DT_ERR_INVALID, "%s: the bf16 GELU ran forward but not backward", l->name);
    } else if (A->gelu) {
        dt__ops(ctx)->gelu_bwd(dx->data, dy->data, sv->x.data, sv->tanh_u, n);
    }
    else
        dt__ops(ctx)->relu_bwd(dx->data, dy->data, sv->x.data, n);
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

void dt__relu_set_in_place(dt_layer *l)
{
    if (l && l->ops == &relu_ops)
        ((act *)l)->in_place = true;
}
dt_status dt_gelu_create(const char *name, dt_layer **l) { return create(name, 1, l); }

void dt__gelu_set_grad_over_output(dt_layer *l)
{
    if (l && l->ops == &gelu_ops)
        ((act *)l)->grad_over_output = true;
}

void dt_residual_add(const dt_tensor *a, const dt_tensor *b, dt_tensor *y)
{
    dt_vec_add(y->data, a->data, b->data, dt_tensor_numel(a));
}

void dt__residual_add(const dt_ctx *ctx, const dt_tensor *a, const dt_tensor *b, dt_tensor *y)
{
    dt__ops(ctx)->add(y->data, a->data, b->data, dt_tensor_numel(a));
}
