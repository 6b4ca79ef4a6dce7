/* A layer run as copies of its input's rows (nn/copies.h): the contexts,
 * arenas and whole outputs around dt__copies_run. */
#include <stdlib.h>

#include "base/status.h"
#include "nn/copies.h"
#include "nn/layer.h"
#include "nn/saved.h"

/* What the forward keeps: the copies, their first rows (b0[n] = B), the
 * top of each one's saved records, and their arenas. */
typedef struct {
    int n;
    int64_t b0[DT_ARENA_COMPANIONS + 1];
    dt_saved *saved[DT_ARENA_COMPANIONS];
    dt_arena *arena[DT_ARENA_COMPANIONS];
} rows_saved;

typedef struct {
    dt_layer *child;
    const rows_saved *rs;
    dt_ctx *sub;             /* one per copy */
    const dt_tensor *in;     /* x, or dy */
    dt_tensor *out;          /* y, or dx, per copy */
    bool need_dx;
} job;

/* Rows [b0, b1) of t (a view). */
static dt_tensor rows_of(const dt_tensor *t, int64_t b0, int64_t b1)
{
    dt_tensor v = *t;
    int64_t row = t->shape[0] ? dt_tensor_numel(t) / t->shape[0] : 0;
    v.shape[0] = b1 - b0;
    v.data = t->data + b0 * row;
    return v;
}

static dt_status forward_copy(void *p, int k)
{
    job *j = p;
    dt_tensor x = rows_of(j->in, j->rs->b0[k], j->rs->b0[k + 1]);
    return j->child->ops->forward(j->child, &j->sub[k], &x, &j->out[k]);
}

static dt_status backward_copy(void *p, int k)
{
    job *j = p;
    dt_tensor dy = rows_of(j->in, j->rs->b0[k], j->rs->b0[k + 1]);
    dt__params_quiet(k != j->rs->n - 1);
    dt_status s = j->child->ops->backward(j->child, &j->sub[k], &dy, &j->out[k], j->need_dx);
    dt__params_quiet(false);
    return s;
}

/* The copies' outputs, each of its rows, put together in ctx->arena. */
static dt_status concat(const dt_layer *child, dt_ctx *ctx, const rows_saved *rs, const dt_tensor *part,
                        dt_tensor *whole)
{
    *whole = part[0];
    whole->shape[0] = rs->b0[rs->n];
    for (int k = 0; k < rs->n; k++) {
        dt_tensor want = part[0];
        want.shape[0] = rs->b0[k + 1] - rs->b0[k];
        if (part[k].ndim != want.ndim || dt_tensor_numel(&part[k]) != dt_tensor_numel(&want))
            return dt__fail(DT_ERR_INVALID, "%s: copy %d's output has %lld values, copy 0's shape gives %lld",
                            child->name, k, (long long)dt_tensor_numel(&part[k]), (long long)dt_tensor_numel(&want));
    }
    int64_t n = dt_tensor_numel(whole), row = rs->b0[rs->n] ? n / rs->b0[rs->n] : 0;
    if (!(whole->data = dt_arena_alloc(ctx->arena, n)))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory for the copies' output", child->name);
    for (int k = 0; k < rs->n; k++)
        dt__ops(ctx)->copy(whole->data + rs->b0[k] * row, part[k].data, (size_t)dt_tensor_numel(&part[k]) * sizeof(float));
    return DT_OK;
}

dt_status dt__copies_forward(dt__copies *r, int n, dt_layer *child, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    int64_t B = x->ndim > 0 ? x->shape[0] : 0;
    if (n > B)
        n = B > 1 ? (int)B : 1; /* at most a row each (an evaluation's last, smaller batch) */
    rows_saved rs = {.n = n};
    if (n == 1) { /* whole, the record on top of the child's */
        DT_CHECK(child->ops->forward(child, ctx, x, y));
    } else {
        dt_ctx sub[DT_ARENA_COMPANIONS];
        dt_tensor out[DT_ARENA_COMPANIONS];
        /* Copy k < n-1 takes two shares of the rows, the last copy one:
         * the last copy's exchange is the one nothing after it in the block
         * covers (the block ends), so the smaller it is, the less stays
         * exposed; the others' are covered by the copies computing after
         * them.  B >= n, so every copy gets at least one row. */
        for (int k = 0; k < n; k++)
            rs.b0[k] = (2 * k * B + n - 1) / (2 * n - 1); /* round(2kB / (2n - 1)) */
        rs.b0[n] = B;
        for (int k = 0; k < n; k++) {
            if (!(rs.arena[k] = dt_arena_link(ctx->arena, k)))
                return dt__wrap(DT_ERR_NOMEM, "%s: copies: ", child->name);
            sub[k] = *ctx;
            sub[k].arena = rs.arena[k];
            sub[k].saved = NULL;
            sub[k].row0 = ctx->row0 + rs.b0[k];
            /* the copies' arenas are freed whole with their owner's rewind (the sequence around the copied
             * block frees it after its backward): no reclaim inside a copy, whose marks would be the owner's */
            sub[k].reclaim = false;
            sub[k].keep = (dt_arena_mark){0};
        }
        job j = {child, &rs, sub, x, out, false};
        DT_CHECK(dt__copies_run(r, n, forward_copy, &j));
        for (int k = 0; k < n; k++)
            rs.saved[k] = sub[k].saved;
        DT_CHECK(concat(child, ctx, &rs, out, y));
    }
    rows_saved *keep = dt__ctx_push(ctx, child, sizeof *keep);
    if (!keep)
        return DT_ERR_NOMEM;
    *keep = rs;
    return DT_OK;
}

dt_status dt__copies_backward(dt__copies *r, dt_layer *child, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx,
                              bool need_dx)
{
    const rows_saved *rs = dt__ctx_pop(ctx, child);
    if (!rs)
        return DT_ERR_INVALID;
    if (rs->n == 1)
        return child->ops->backward(child, ctx, dy, dx, need_dx);
    if (dy->ndim < 1 || dy->shape[0] != rs->b0[rs->n])
        return dt__fail(DT_ERR_INVALID, "%s: the output gradient has %lld rows, the forward's copies %lld",
                        child->name, (long long)(dy->ndim ? dy->shape[0] : 0), (long long)rs->b0[rs->n]);
    dt_ctx sub[DT_ARENA_COMPANIONS];
    dt_tensor out[DT_ARENA_COMPANIONS];
    for (int k = 0; k < rs->n; k++) {
        sub[k] = *ctx;
        sub[k].arena = rs->arena[k];
        sub[k].saved = rs->saved[k];
        sub[k].row0 = ctx->row0 + rs->b0[k];
        sub[k].reclaim = false; /* as in the forward */
        sub[k].keep = (dt_arena_mark){0};
    }
    job j = {child, rs, sub, dy, out, need_dx};
    DT_CHECK(dt__copies_run(r, rs->n, backward_copy, &j));
    return need_dx ? concat(child, ctx, rs, out, dx) : DT_OK;
}
