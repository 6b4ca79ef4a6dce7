/* Embedding: token ids (stored as floats, exact below 2^24) -> rows of a
 * [vocab, dim] table.  Ids have no gradient; the table's gradient is a
 * scatter-add of dy rows. */
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
    int64_t vocab, dim;
    int w;
} embedding;

static dt_status forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    embedding *E = (embedding *)l;
    int64_t n = dt_tensor_numel(x);
    if (x->ndim >= DT_MAX_DIMS)
        return dt__fail(DT_ERR_INVALID, "%s: ids of rank %d leave no room for the embedding dimension", l->name, x->ndim);
    *y = *x;
    y->shape[y->ndim++] = E->dim;
    if (!(y->data = dt_arena_alloc(ctx->arena, n * E->dim)))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    const float *W = dt_param_value(ctx->params, E->w);
    for (int64_t i = 0; i < n; i++) {
        float f = x->data[i];
        if (!(f >= 0 && f < (float)E->vocab) || f != floorf(f))
            return dt__fail(DT_ERR_INVALID, "%s: token id %g at position %lld is outside 0..%lld", l->name, f,
                            (long long)i, (long long)E->vocab - 1);
    }
    dt_tensor *ids = DT_SAVE(ctx, l, dt_tensor);
    if (!ids)
        return DT_ERR_NOMEM;
    *ids = *x;
    dt__ops(ctx)->rows_gather(y->data, W, x->data, n, E->dim);
    return DT_OK;
}

static dt_status backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    (void)dx, (void)need_dx;
    embedding *E = (embedding *)l;
    const dt_tensor *ids = DT_LOAD(ctx, l, dt_tensor);
    if (!ids)
        return DT_ERR_INVALID;
    float *dW = dt_param_grad(ctx->params, E->w);
    dt__ops(ctx)->rows_scatter_add(dW, ids->data, dy->data, dt_tensor_numel(ids), E->dim);
    dt_params_grad_ready(ctx->params, E->w);
    return DT_OK;
}

/* PyTorch's nn.Embedding default: N(0, 1). */
static void init(dt_layer *l, dt_params *p, uint64_t seed)
{
    dt__init_normal(p, ((embedding *)l)->w, seed, 1.0f);
}

static void destroy(dt_layer *l) { free(l); }

static const dt_layer_ops ops = {"embedding", forward, backward, init, destroy};

dt_status dt_embedding_create(dt_params *p, const char *name, int64_t vocab, int64_t dim, dt_layer **l)
{
    if (vocab <= 0 || dim <= 0 || vocab > (1 << 24))
        return dt__fail(DT_ERR_INVALID, "embedding %s: vocab %lld, dim %lld", name, (long long)vocab, (long long)dim);
    embedding *E = dt__layer_new(sizeof *E, &ops, "%s", name);
    if (!E)
        return DT_ERR_NOMEM;
    E->vocab = vocab;
    E->dim = dim;
    dt_status s = dt__layer_param(p, &E->base, "weight", 2, (int64_t[]){vocab, dim}, &E->w);
    if (s != DT_OK) {
        free(E);
        return s;
    }
    *l = &E->base;
    return DT_OK;
}
