/* The two containers every model is built from: a sequence of layers (a
 * GPT block's sub-layers, a whole model, a pipeline stage) and a residual
 * connection y = x + f(x).
 *
 * Recomputation lives in the sequence: a child marked for it keeps only its
 * input during forward (its activations are freed by rewinding the arena to
 * where it started) and runs its forward again just before its backward.
 * Layers are deterministic and dropout is keyed by (ctx->key, layer, index),
 * so the re-run produces the same bits and the gradients equal the run
 * without recomputation exactly.  The price is one more forward of each
 * recomputed child; docs/engine.md has the measured memory and time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/trace.h"
#include "dtrain/nn.h"
#include "nn/copies.h"
#include "nn/layer.h"
#include "nn/saved.h"

typedef struct {
    dt_layer base;
    dt_layer **items;
    bool *recompute;
    int *copies; /* > 1: the item's rows run as that many copies (nn/copies.h) */
    dt__copies *runner; /* the copies' threads, made on the first dt_sequential_set_copies */
    int n, cap;
    dt_block_hook hook;
    void *hook_user;
} sequential;

static dt_status hook(sequential *S, dt_hook_point at, int i, dt_ctx *ctx)
{
    return S->hook ? S->hook(S->hook_user, at, i, ctx) : DT_OK;
}

static const dt_layer_ops seq_ops;

static sequential *as_seq(dt_layer *l) { return l && l->ops == &seq_ops ? (sequential *)l : NULL; }

/* Keep the tensor *t that was allocated after mark m and free everything
 * else allocated since: it moves down to m (memmove: the places may overlap). */
static dt_status keep_only(dt_ctx *ctx, dt_arena_mark m, dt_tensor *t, const char *who)
{
    if (!t->data || !dt_arena_since(ctx->arena, m, t->data)) {
        dt_arena_rewind(ctx->arena, m);
        return DT_OK;
    }
    int64_t n = dt_tensor_numel(t);
    const float *old = t->data;
    dt_arena_rewind(ctx->arena, m);
    float *kept = dt_arena_alloc(ctx->arena, n);
    if (!kept) /* cannot happen: the space was in use a moment ago */
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", who);
    if (kept != old)
        dt__ops(ctx)->copy(kept, old, (size_t)n * sizeof(float)); /* memmove semantics on every backend */
    t->data = kept;
    return DT_OK;
}

/* Item i's forward and backward: its own, or as copies of its rows. */
static dt_status item_forward(sequential *S, int i, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    dt_layer *c = S->items[i];
    return S->copies[i] > 1 ? dt__copies_forward(S->runner, S->copies[i], c, ctx, x, y) : c->ops->forward(c, ctx, x, y);
}

static dt_status item_backward(sequential *S, int i, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    dt_layer *c = S->items[i];
    return S->copies[i] > 1 ? dt__copies_backward(S->runner, c, ctx, dy, dx, need_dx)
                            : c->ops->backward(c, ctx, dy, dx, need_dx);
}

static dt_status forward_recomputed(sequential *S, int i, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    dt_layer *child = S->items[i];
    dt_arena_mark m = dt_arena_get_mark(ctx->arena);
    dt_saved *below = ctx->saved;
    DT_CHECK(item_forward(S, i, ctx, x, y));
    ctx->saved = below; /* the child's records die with the rewind */
    DT_CHECK(keep_only(ctx, m, y, child->name));
    dt_tensor *input = DT_SAVE(ctx, child, dt_tensor); /* popped by backward_recomputed */
    if (!input)
        return DT_ERR_NOMEM;
    *input = *x;
    return DT_OK;
}

static dt_status backward_recomputed(sequential *S, int i, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx,
                                     bool need_dx)
{
    dt_layer *child = S->items[i];
    const dt_tensor *saved = DT_LOAD(ctx, child, dt_tensor);
    if (!saved)
        return DT_ERR_INVALID;
    dt_tensor x = *saved, y;
    dt_arena_mark m = dt_arena_get_mark(ctx->arena);
    int64_t t0 = dt__trace_begin();
    DT_CHECK(item_forward(S, i, ctx, &x, &y));
    if (t0) {
        char name[96]; /* the trace keeps 47 characters */
        snprintf(name, sizeof name, "recompute %s", child->name);
        dt__trace_end("recompute", name, t0, "\"micro_batch\":%u", ctx->key.micro);
    }
    DT_CHECK(item_backward(S, i, ctx, dy, dx, need_dx));
    if (!need_dx) {
        dt_arena_rewind(ctx->arena, m);
        return DT_OK;
    }
    return keep_only(ctx, m, dx, child->name);
}

/* With ctx->reclaim a sequence keeps where each child's forward began (a
 * record pushed after the last child's, so its backward finds it on top). */
typedef struct {
    int n;
    dt_arena_mark at[];
} seq_marks;

#define LOCAL_MARKS 16 /* children's marks held on the stack; more are malloc'd */

static dt_status seq_forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    sequential *S = (sequential *)l;
    dt_tensor cur = *x;
    bool reclaim = ctx->training && ctx->reclaim;
    dt_arena_mark local[LOCAL_MARKS], *marks = local;
    if (reclaim && S->n > LOCAL_MARKS && !(marks = malloc((size_t)S->n * sizeof *marks)))
        return dt__fail(DT_ERR_NOMEM, "%s: out of memory for %d marks", l->name, S->n);
    dt_status s = DT_OK;
    for (int i = 0; s == DT_OK && i < S->n; i++) {
        dt_tensor next = {0};
        dt_layer *c = S->items[i];
        dt_arena_mark began = dt_arena_get_mark(ctx->arena);
        dt_saved *below = ctx->saved;
        if (reclaim)
            marks[i] = began;
        s = hook(S, DT_BEFORE_FORWARD, i, ctx);
        if (s == DT_OK)
            s = S->recompute[i] && ctx->training ? forward_recomputed(S, i, ctx, &cur, &next)
                                                 : item_forward(S, i, ctx, &cur, &next);
        if (s == DT_OK)
            s = hook(S, DT_AFTER_FORWARD, i, ctx);
        if (s == DT_OK && ctx->reclaim && !ctx->training) { /* inference: only the output lives on */
            ctx->saved = below; /* what the child saved is freed with the rest */
            s = keep_only(ctx, dt__arena_later(ctx->arena, began, ctx->keep), &next, c->name);
        }
        cur = next;
    }
    seq_marks *r = s == DT_OK && reclaim ? dt__ctx_push(ctx, l, sizeof *r + (size_t)S->n * sizeof *marks) : NULL;
    if (r) {
        r->n = S->n;
        memcpy(r->at, marks, (size_t)S->n * sizeof *marks);
    } else if (s == DT_OK && reclaim) {
        s = DT_ERR_NOMEM;
    }
    if (marks != local)
        free(marks);
    if (s == DT_OK)
        *y = cur;
    return s;
}

/* After child i's backward: free what it and the children after it
 * allocated since its forward began (not below ctx->keep), keeping its
 * input gradient d (moved down) when there is one.  Where less is free
 * below d than d's own size, d stays and only what lies above it is freed:
 * the move would copy more than it frees, and the next child's reclaim
 * frees the rest (the cnn's pooling and convolution layers: half the
 * copies, the same peak within 1%). */
static dt_status reclaim_after(dt_ctx *ctx, dt_arena_mark began, dt_tensor *d, bool want, const char *who)
{
    dt_arena_mark to = dt__arena_later(ctx->arena, began, ctx->keep), end;
    size_t bytes = want && d->data ? (size_t)dt_tensor_numel(d) * sizeof(float) : 0;
    if (bytes && dt__arena_gap(ctx->arena, to, d->data) < bytes &&
        dt__arena_mark_after(ctx->arena, d->data, bytes, &end)) {
        dt_arena_rewind(ctx->arena, end);
        return DT_OK;
    }
    if (want)
        return keep_only(ctx, to, d, who);
    dt_arena_rewind(ctx->arena, to);
    return DT_OK;
}

static dt_status seq_backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    sequential *S = (sequential *)l;
    dt_tensor g = *dy;
    /* Leading reshapes (the cnn's "image") only relabel the input, so the
     * layer after them needs no input gradient either (for conv1 that is a
     * whole backward-data pass). */
    int views = 0;
    while (views < S->n && !strcmp(S->items[views]->ops->kind, "reshape"))
        views++;
    dt_arena_mark local[LOCAL_MARKS], *marks = NULL;
    if (ctx->reclaim) { /* copied off the record: the space is reused as backward goes */
        const seq_marks *r = dt__ctx_pop(ctx, l);
        if (!r)
            return DT_ERR_INVALID;
        if (r->n != S->n)
            return dt__fail(DT_ERR_INVALID, "%s: backward over %d children, forward ran %d", l->name, S->n, r->n);
        marks = S->n <= LOCAL_MARKS ? local : malloc((size_t)S->n * sizeof *marks);
        if (!marks)
            return dt__fail(DT_ERR_NOMEM, "%s: out of memory for %d marks", l->name, S->n);
        memcpy(marks, r->at, (size_t)S->n * sizeof *marks);
    }
    dt_status s = DT_OK;
    for (int i = S->n - 1; s == DT_OK && i >= 0; i--) {
        dt_tensor d = {0};
        bool want = i > views || need_dx;
        dt_layer *c = S->items[i];
        s = hook(S, DT_BEFORE_BACKWARD, i, ctx);
        if (s == DT_OK)
            s = S->recompute[i] && ctx->training ? backward_recomputed(S, i, ctx, &g, &d, want)
                                                 : item_backward(S, i, ctx, &g, &d, want);
        if (s == DT_OK)
            s = hook(S, DT_AFTER_BACKWARD, i, ctx);
        if (s == DT_OK && marks)
            s = reclaim_after(ctx, marks[i], &d, want, c->name);
        g = d;
    }
    if (marks != local)
        free(marks);
    if (s == DT_OK && need_dx)
        *dx = g;
    return s;
}

static void seq_init(dt_layer *l, dt_params *p, uint64_t seed)
{
    sequential *S = (sequential *)l;
    for (int i = 0; i < S->n; i++)
        S->items[i]->ops->init(S->items[i], p, seed);
}

static void seq_destroy(dt_layer *l)
{
    sequential *S = (sequential *)l;
    for (int i = 0; i < S->n; i++)
        dt_layer_destroy(S->items[i]);
    free(S->items);
    free(S->recompute);
    free(S->copies);
    dt__copies_destroy(S->runner);
    free(S);
}

static const dt_layer_ops seq_ops = {"sequential", seq_forward, seq_backward, seq_init, seq_destroy};

dt_status dt_sequential_create(const char *name, dt_layer **out)
{
    sequential *S = dt__layer_new(sizeof *S, &seq_ops, "%s", name);
    if (!S)
        return DT_ERR_NOMEM;
    *out = &S->base;
    return DT_OK;
}

dt_status dt_sequential_append(dt_layer *seq, dt_layer *l)
{
    sequential *S = as_seq(seq);
    if (!S || !l) {
        dt_layer_destroy(l);
        return dt__fail(DT_ERR_INVALID, "sequential_append: %s", S ? "no layer given" : "not a sequential container");
    }
    if (S->n == S->cap) {
        int cap = S->cap ? 2 * S->cap : 8;
        dt_layer **items = realloc(S->items, (size_t)cap * sizeof *items);
        if (items)
            S->items = items;
        bool *rc = items ? realloc(S->recompute, (size_t)cap * sizeof *rc) : NULL;
        if (rc)
            S->recompute = rc;
        int *cp = rc ? realloc(S->copies, (size_t)cap * sizeof *cp) : NULL;
        if (!cp) {
            dt_layer_destroy(l);
            return dt__fail(DT_ERR_NOMEM, "out of memory");
        }
        S->copies = cp;
        S->cap = cap;
    }
    S->recompute[S->n] = false;
    S->copies[S->n] = 1;
    /* a linear's or conv2d's output is read by the next layer alone (their
     * backward reads their input): a ReLU there can overwrite it */
    if (S->n > 0 && (!strcmp(S->items[S->n - 1]->ops->kind, "linear") || !strcmp(S->items[S->n - 1]->ops->kind, "conv2d")))
        dt__relu_set_in_place(l);
    /* a linear reads its input in its forward and its backward (dW) only */
    if (S->n > 0 && !strcmp(l->ops->kind, "linear"))
        dt__gelu_set_grad_over_output(S->items[S->n - 1]);
    S->items[S->n++] = l;
    return DT_OK;
}

int dt_sequential_count(const dt_layer *seq)
{
    const sequential *S = as_seq((dt_layer *)seq);
    return S ? S->n : 0;
}

dt_layer *dt_sequential_at(dt_layer *seq, int i)
{
    sequential *S = as_seq(seq);
    return S && i >= 0 && i < S->n ? S->items[i] : NULL;
}

void dt_sequential_set_hooks(dt_layer *seq, dt_block_hook fn, void *user)
{
    sequential *S = as_seq(seq);
    if (S) {
        S->hook = fn;
        S->hook_user = user;
    }
}

dt_status dt_sequential_set_recompute(dt_layer *seq, int i, bool on)
{
    sequential *S = as_seq(seq);
    if (!S || i < 0 || i >= S->n)
        return dt__fail(DT_ERR_INVALID, "recompute: %s has no item %d", S ? seq->name : "(not a sequence)", i);
    S->recompute[i] = on;
    return DT_OK;
}

dt_status dt_sequential_set_copies(dt_layer *seq, int i, int copies)
{
    sequential *S = as_seq(seq);
    if (!S || i < 0 || i >= S->n)
        return dt__fail(DT_ERR_INVALID, "copies: %s has no item %d", S ? seq->name : "(not a sequence)", i);
    if (copies < 1 || copies > DT_ARENA_COMPANIONS)
        return dt__fail(DT_ERR_INVALID, "copies: %d for %s (1..%d)", copies, S->items[i]->name, DT_ARENA_COMPANIONS);
    if (!S->runner && copies > 1)
        DT_CHECK(dt__copies_create(DT_ARENA_COMPANIONS, &S->runner));
    S->copies[i] = copies;
    return DT_OK;
}

/* ---- residual: y = x + f(x); backward dx = dy + f'(dy) ---- */
typedef struct {
    dt_layer base;
    dt_layer *f;
} residual;

static dt_status add_into_new(dt_ctx *ctx, const dt_tensor *a, const dt_tensor *b, dt_tensor *y, const char *who)
{
    *y = *a;
    if (!(y->data = dt_arena_alloc(ctx->arena, dt_tensor_numel(a))))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", who);
    dt__residual_add(ctx, a, b, y);
    return DT_OK;
}

static dt_status res_forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    residual *R = (residual *)l;
    if (ctx->training && ctx->reclaim) { /* where this forward began, popped after f's backward */
        dt_arena_mark began = dt_arena_get_mark(ctx->arena), *r = DT_SAVE(ctx, l, dt_arena_mark);
        if (!r)
            return DT_ERR_NOMEM;
        *r = began;
    }
    dt_tensor fx;
    DT_CHECK(R->f->ops->forward(R->f, ctx, x, &fx));
    return add_into_new(ctx, x, &fx, y, l->name);
}

/* With ctx->reclaim: dy is kept (ctx->keep) while f's backward frees f's
 * activations, then dx = dy + df moves down to where the forward began. */
static dt_status res_backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    residual *R = (residual *)l;
    dt_tensor df;
    dt_arena_mark keep = ctx->keep;
    if (ctx->reclaim)
        ctx->keep = dt__arena_later(ctx->arena, keep, dt_arena_get_mark(ctx->arena));
    dt_status s = R->f->ops->backward(R->f, ctx, dy, &df, true);
    ctx->keep = keep;
    DT_CHECK(s);
    if (need_dx)
        DT_CHECK(add_into_new(ctx, dy, &df, dx, l->name));
    if (!ctx->reclaim)
        return DT_OK;
    const dt_arena_mark *began = DT_LOAD(ctx, l, dt_arena_mark);
    if (!began)
        return DT_ERR_INVALID;
    return reclaim_after(ctx, *began, dx, need_dx, l->name);
}

static void res_init(dt_layer *l, dt_params *p, uint64_t seed) { ((residual *)l)->f->ops->init(((residual *)l)->f, p, seed); }

static void res_destroy(dt_layer *l)
{
    dt_layer_destroy(((residual *)l)->f);
    free(l);
}

static const dt_layer_ops res_ops = {"residual", res_forward, res_backward, res_init, res_destroy};

dt_status dt_residual_create(const char *name, dt_layer *f, dt_layer **out)
{
    if (!f)
        return dt__fail(DT_ERR_INVALID, "residual %s: no layer", name);
    residual *R = dt__layer_new(sizeof *R, &res_ops, "%s", name);
    if (!R) {
        dt_layer_destroy(f);
        return DT_ERR_NOMEM;
    }
    R->f = f;
    *out = &R->base;
    return DT_OK;
}
