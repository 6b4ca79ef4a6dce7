/* EmbeddingBag, mean mode: each bag of ids -> the mean of their rows of a
 * [rows, dim] table, as torch.nn.EmbeddingBag(mode="mean").  Bags arrive
 * padded to one width with -1 (see nn.h).  The table is row-sparse: the
 * backward writes the rows of the batch's ids only and records them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dtrain/nn.h"
#include "nn/init.h"
#include "nn/layer.h"
#include "nn/saved.h"
#include "tensor/threads.h"

typedef struct {
    dt_layer base;
    int64_t rows, dim;
    int w;
} bag_layer;

/* What forward keeps: the ids (the caller's input, alive until backward)
 * and how many there are. */
typedef struct {
    dt_tensor x;
    int64_t ids;
} bag_saved;

/* Row additions per thread's share: the rows are scattered over a large
 * table, and below this a hand-off to the pool (tens of microseconds on a
 * VM: the wake-ups are inter-processor interrupts) costs more than the
 * second thread saves.  A textclf step of 64 fortunes (~3,500 ids x 32)
 * runs on the calling thread. */
#define BAG_GRAIN (1 << 18)

typedef struct {
    const float *ids; /* [bags, width] */
    int64_t bags, width, dim;
    const float *table;
    float *table_grad;
    float *out;      /* forward: [bags, dim] */
    const float *dy; /* backward: [bags, dim] */
} bag_args;

static int64_t bag_count(const float *ids, int64_t width)
{
    int64_t n = 0;
    for (int64_t k = 0; k < width; k++)
        n += ids[k] >= 0;
    return n;
}

/* Bags [b, e): sum the rows in order, then divide by the count. */
static void forward_range(int64_t b, int64_t e, void *arg)
{
    const bag_args *a = arg;
    for (int64_t i = b; i < e; i++) {
        const float *ids = a->ids + i * a->width;
        float *restrict y = a->out + i * a->dim;
        memset(y, 0, (size_t)a->dim * sizeof *y);
        int64_t n = 0;
        for (int64_t k = 0; k < a->width; k++) {
            if (ids[k] < 0)
                continue;
            const float *restrict row = a->table + (int64_t)ids[k] * a->dim;
            for (int64_t j = 0; j < a->dim; j++)
                y[j] += row[j];
            n++;
        }
        if (n > 1)
            for (int64_t j = 0; j < a->dim; j++)
                y[j] /= (float)n;
    }
}

/* Columns [b, e) of every touched row: dW[id, j] += dy[bag, j] / |bag|,
 * bags and ids in order, so any thread count gives the same bits. */
static void backward_range(int64_t b, int64_t e, void *arg)
{
    const bag_args *a = arg;
    for (int64_t i = 0; i < a->bags; i++) {
        const float *ids = a->ids + i * a->width, *restrict dy = a->dy + i * a->dim;
        int64_t n = bag_count(ids, a->width);
        if (n == 0)
            continue;
        float inv = 1.0f / (float)n;
        for (int64_t k = 0; k < a->width; k++) {
            if (ids[k] < 0)
                continue;
            float *restrict g = a->table_grad + (int64_t)ids[k] * a->dim;
            for (int64_t j = b; j < e; j++)
                g[j] += dy[j] * inv;
        }
    }
}

static dt_status forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    DT_CHECK(dt__cpu_only(ctx, l));
    bag_layer *E = (bag_layer *)l;
    if (x->ndim != 2)
        return dt__fail(DT_ERR_INVALID, "%s: bags must be [batch, width] ids (-1: none), got %d dimensions",
                        l->name, x->ndim);
    int64_t bags = x->shape[0], width = x->shape[1], nids = 0;
    for (int64_t i = 0; i < bags * width; i++) {
        float f = x->data[i];
        nids += f >= 0;
        if (f != -1.0f && (!(f >= 0 && f < (float)E->rows) || f != floorf(f)))
            return dt__fail(DT_ERR_INVALID,
                            "%s: id %g in bag %lld (position %lld) is neither -1 nor in 0..%lld", l->name, f,
                            (long long)(i / width), (long long)(i % width), (long long)E->rows - 1);
    }
    *y = dt_tensor_view(NULL, 2, (int64_t[]){bags, E->dim});
    if (!(y->data = dt_arena_alloc(ctx->arena, bags * E->dim)))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    bag_saved *saved = DT_SAVE(ctx, l, bag_saved);
    if (!saved)
        return DT_ERR_NOMEM;
    *saved = (bag_saved){*x, nids};
    bag_args a = {.ids = x->data,
                  .bags = bags,
                  .width = width,
                  .dim = E->dim,
                  .table = dt_param_value(ctx->params, E->w),
                  .out = y->data};
    int64_t work = nids * E->dim, grain = work > BAG_GRAIN ? bags * BAG_GRAIN / work : bags;
    dt__parallel_for(bags, grain > 0 ? grain : 1, forward_range, &a);
    return DT_OK;
}

static dt_status backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    (void)dx;
    bag_layer *E = (bag_layer *)l;
    const bag_saved *sv = DT_LOAD(ctx, l, bag_saved);
    if (!sv)
        return DT_ERR_INVALID;
    const dt_tensor *x = &sv->x;
    if (need_dx)
        return dt__fail(DT_ERR_INVALID, "%s: ids have no gradient (an EmbeddingBag starts a model)", l->name);
    int64_t bags = x->shape[0], width = x->shape[1], n = bags * width;
    bag_args a = {.ids = x->data,
                  .bags = bags,
                  .width = width,
                  .dim = E->dim,
                  .table_grad = dt_param_grad(ctx->params, E->w),
                  .dy = dy->data};
    /* split by 16 columns (a 64-byte line of a row) when there is enough work */
    dt__parallel_for(E->dim, sv->ids * E->dim >= 2 * BAG_GRAIN ? 16 : E->dim, backward_range, &a);
    /* the rows written, for the zeroing, the sparse update and a parameter server */
    int64_t rows[512];
    int k = 0;
    for (int64_t i = 0; i < n; i++) {
        if (x->data[i] >= 0)
            rows[k++] = (int64_t)x->data[i];
        if (k == 512 || (i + 1 == n && k > 0)) {
            DT_CHECK(dt_param_touch_rows(ctx->params, E->w, rows, k));
            k = 0;
        }
    }
    dt_params_grad_ready(ctx->params, E->w);
    return DT_OK;
}

/* fastText's input vectors: U(-1/dim, 1/dim). */
static void init(dt_layer *l, dt_params *p, uint64_t seed)
{
    bag_layer *E = (bag_layer *)l;
    dt__init_uniform(p, E->w, seed, 1.0f / (float)E->dim);
}

static void destroy(dt_layer *l)
{
    free(l);
}

static const dt_layer_ops ops = {"embedding_bag", forward, backward, init, destroy};

dt_status dt_embedding_bag_create(dt_params *p, const char *name, int64_t rows, int64_t dim, dt_layer **l)
{
    if (rows <= 0 || dim <= 0 || rows > (1 << 24))
        return dt__fail(DT_ERR_INVALID, "embedding_bag %s: rows %lld (1..2^24: ids are floats), dim %lld",
                        name, (long long)rows, (long long)dim);
    bag_layer *E = dt__layer_new(sizeof *E, &ops, "%s", name);
    if (!E)
        return DT_ERR_NOMEM;
    E->rows = rows;
    E->dim = dim;
    dt_status s = dt__layer_param(p, &E->base, "weight", 2, (int64_t[]){rows, dim}, &E->w);
    if (s == DT_OK)
        s = dt_param_set_row_sparse(p, E->w);
    if (s != DT_OK) {
        free(E);
        return s;
    }
    *l = &E->base;
    return DT_OK;
}

dt_status dt_bags_from_offsets(const int64_t *ids, int64_t nids, const int64_t *offsets, int64_t nbags,
                               int64_t width, float *out)
{
    for (int64_t b = 0; b < nbags; b++) {
        int64_t from = offsets[b], to = b + 1 < nbags ? offsets[b + 1] : nids;
        if (from < 0 || to < from || to > nids)
            return dt__fail(DT_ERR_INVALID,
                            "bags: offsets of bag %lld ([%lld, %lld)) outside the %lld ids or "
                            "decreasing",
                            (long long)b, (long long)from, (long long)to, (long long)nids);
        if (to - from > width)
            return dt__fail(DT_ERR_INVALID, "bags: bag %lld holds %lld ids, more than the width %lld",
                            (long long)b, (long long)(to - from), (long long)width);
        for (int64_t k = 0; k < width; k++)
            out[b * width + k] = from + k < to ? (float)ids[from + k] : -1.0f;
    }
    return DT_OK;
}
