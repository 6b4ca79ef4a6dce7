/* Dropout: in training, zero each element with probability p and scale the
 * rest by 1/(1-p); the mask comes from ctx->rng, so a seeded run repeats. */
#include <stdio.h>
#include <stdlib.h>

#include "base/status.h"
#include "dtrain/nn.h"

typedef struct {
    dt_layer base;
    float prob;
    float *mask; /* scale per element, or NULL when the layer was the identity */
    dt_tensor x;
} dropout;

static dt_status forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    dropout *D = (dropout *)l;
    D->x = *x;
    D->mask = NULL;
    if (!ctx->training || D->prob == 0.0f) {
        *y = *x; /* identity: share the buffer */
        return DT_OK;
    }
    if (!ctx->rng)
        return dt__fail(DT_ERR_INVALID, "%s: training needs ctx->rng for dropout masks", l->name);
    int64_t n = dt_tensor_numel(x);
    *y = *x;
    y->data = dt_arena_alloc(ctx->arena, n);
    D->mask = dt_arena_alloc(ctx->arena, n);
    if (!y->data || !D->mask)
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    float keep = 1.0f / (1.0f - D->prob);
    for (int64_t i = 0; i < n; i++) {
        D->mask[i] = dt_rng_uniform(ctx->rng) < D->prob ? 0.0f : keep;
        y->data[i] = x->data[i] * D->mask[i];
    }
    return DT_OK;
}

static dt_status backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    dropout *D = (dropout *)l;
    if (!need_dx)
        return DT_OK;
    if (!D->mask) {
        *dx = *dy;
        return DT_OK;
    }
    int64_t n = dt_tensor_numel(&D->x);
    *dx = D->x;
    if (!(dx->data = dt_arena_alloc(ctx->arena, n)))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    for (int64_t i = 0; i < n; i++)
        dx->data[i] = dy->data[i] * D->mask[i];
    return DT_OK;
}

static void init(dt_layer *l, dt_params *p, dt_rng *rng)
{
    (void)l, (void)p, (void)rng;
}

static void destroy(dt_layer *l) { free(l); }

static const dt_layer_ops ops = {"dropout", forward, backward, init, destroy};

dt_status dt_dropout_create(const char *name, float prob, dt_layer **l)
{
    if (!(prob >= 0.0f && prob < 1.0f))
        return dt__fail(DT_ERR_INVALID, "dropout %s: probability %g outside [0, 1)", name, prob);
    dropout *D = calloc(1, sizeof *D);
    if (!D)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    D->base.ops = &ops;
    D->prob = prob;
    snprintf(D->base.name, sizeof D->base.name, "%s", name);
    *l = &D->base;
    return DT_OK;
}
