/* Dropout: in training, zero each element with probability p and scale the
 * rest by 1/(1-p).  Element i's draw is keyed by (ctx->key, this layer's
 * name, i) (dt_rng_key in base.h), not taken from a running stream: a
 * recomputed forward reproduces the mask exactly, a resumed run draws what
 * the uninterrupted one drew, and any thread count gives the same mask.
 * i counts over the whole micro-batch: a copy of its rows (ctx->row0) and a
 * rank's slice of the positions (sequence parallel) draw their part of it. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/status.h"
#include "dtrain/nn.h"
#include "nn/layer.h"
#include "nn/saved.h"
#include "nn/tp.h"

typedef struct {
    dt_layer base;
    float prob;
    uint64_t id; /* FNV-1a of the name: this layer's stream under a key */
    int t, r;    /* sequence parallel: rank r of t holds a slice of the positions (t = 1: whole) */
} dropout;

typedef struct {
    dt_tensor x;
    float *mask; /* scale per element, or NULL when the layer was the identity */
} dropout_saved;

static dt_status forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    dropout *D = (dropout *)l;
    dropout_saved *sv = DT_SAVE(ctx, l, dropout_saved);
    if (!sv)
        return DT_ERR_NOMEM;
    sv->x = *x;
    sv->mask = NULL;
    if (!ctx->training || D->prob == 0.0f) {
        *y = *x; /* identity: share the buffer */
        return DT_OK;
    }
    int64_t n = dt_tensor_numel(x);
    *y = *x;
    y->data = dt_arena_alloc(ctx->arena, n);
    sv->mask = dt_arena_alloc(ctx->arena, n);
    if (!y->data || !sv->mask)
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    int64_t slice = n, whole = n, first = 0;
    if (D->t > 1) { /* [B, Tl, D]: this rank's positions r Tl .. of every sequence */
        if (x->ndim != 3)
            return dt__fail(DT_ERR_INVALID, "%s: sequence parallel expects [batch, time, features]", l->name);
        slice = x->shape[1] * x->shape[2];
        whole = slice * D->t;
        first = slice * D->r;
    } else if (ctx->row0) { /* a copy's rows: element i of row b is element i of row row0 + b of the whole */
        slice = whole = n / x->shape[0];
    }
    first += ctx->row0 * whole;
    dt__ops(ctx)->dropout_fwd(y->data, sv->mask, x->data, n, dt_rng_key_stream(&ctx->key, D->id), D->prob,
                              1.0f / (1.0f - D->prob), slice, whole, first);
    return DT_OK;
}

static dt_status backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    const dropout_saved *sv = DT_LOAD(ctx, l, dropout_saved);
    if (!sv)
        return DT_ERR_INVALID;
    if (!need_dx)
        return DT_OK;
    if (!sv->mask) {
        *dx = *dy;
        return DT_OK;
    }
    int64_t n = dt_tensor_numel(&sv->x);
    *dx = sv->x;
    if (!(dx->data = dt_arena_alloc(ctx->arena, n)))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    dt__ops(ctx)->mul(dx->data, dy->data, sv->mask, n);
    return DT_OK;
}

static void init(dt_layer *l, dt_params *p, uint64_t seed)
{
    (void)l, (void)p, (void)seed;
}

static void destroy(dt_layer *l) { free(l); }

static const dt_layer_ops ops = {"dropout", forward, backward, init, destroy};

dt_status dt__dropout_seq_create(const char *name, float prob, int t, int r, dt_layer **l)
{
    DT_CHECK(dt_dropout_create(name, prob, l));
    dropout *D = (dropout *)*l;
    D->t = t;
    D->r = r;
    return DT_OK;
}

dt_status dt_dropout_create(const char *name, float prob, dt_layer **l)
{
    if (!(prob >= 0.0f && prob < 1.0f))
        return dt__fail(DT_ERR_INVALID, "dropout %s: probability %g outside [0, 1)", name, prob);
    dropout *D = dt__layer_new(sizeof *D, &ops, "%s", name);
    if (!D)
        return DT_ERR_NOMEM;
    D->prob = prob;
    D->t = 1;
    D->id = dt__fnv1a64(DT_FNV64_SEED, D->base.name, strlen(D->base.name));
    *l = &D->base;
    return DT_OK;
}
