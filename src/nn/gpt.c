/* GPT: byte-level decoder-only transformer, pre-LayerNorm, learned positions,
 * GELU MLP 4x, output projection tied to the token embedding.  The model is
 * described as blocks [embed, h.0 .. h.L-1, head]; the embedding table wte is
 * shared by the first and the last block.  Parameter
 * names and initialisation follow GPT-2 / nanoGPT ("transformer.h.0.attn.
 * c_attn.weight"; N(0, 0.02), residual projections N(0, 0.02/sqrt(2L))). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dtrain/nn.h"
#include "nn/layer.h"
#include "nn/init.h"
#include "nn/model_internal.h"
#include "nn/saved.h"
#include "nn/tp.h"

static void init_normal(dt_params *p, const char *name, float std, uint64_t seed)
{
    int i = dt_params_find(p, name);
    if (i >= 0)
        dt__init_normal(p, i, seed, std);
}

static void init_zero(dt_params *p, const char *name)
{
    int i = dt_params_find(p, name);
    if (i >= 0)
        dt__init_const(p, i, 0.0f);
}

/* ---- embed: ids [B, T] -> wte[id] + wpe[t], then dropout ----
 * Vocabulary-parallel (tp set): this rank holds rows [v0, v0 + vl) of wte;
 * each token's row comes from its owner, the others add zeros, one
 * allreduce makes the sum whole on every rank. */
typedef struct {
    dt_layer base;
    int64_t vocab, context, dim;
    int64_t v0, vl; /* this rank's rows of wte */
    dt_tp_group tp; /* size 0: not vocabulary-parallel */
    bool sp; /* sequence parallel: the output is this rank's slice of the positions */
    int wte, wpe;
    dt_layer *drop;
} embed;

/* What the embedding keeps for its backward: the ids as the layers see them,
 * and on a device with tp a host copy (the owner's rows are picked on the
 * host). */
typedef struct {
    dt_tensor ids;
    const float *host;
} embed_saved;

/* Vocabulary-parallel rows on a device, as the host loops do them: the k
 * tokens whose rows this rank owns, their positions pos[] and local rows
 * id[] (host lists, uploaded once), then one gather and one scatter-add:
 *   forward  dst = out (zeroed), src = wte:  out[pos[r]] += wte[id[r]]
 *   backward dst = gw,           src = g:    gw[id[r]]   += g[pos[r]]
 * Row order is the host loop's (scatter-add adds in r order on cpu), and
 * zero + x = x: the cpu run's bits, after the group's sum. */
static dt_status embed_rows_on_device(dt_ctx *ctx, const embed *E, const float *host_ids, int64_t n, bool forward,
                                      float *dst, const float *src)
{
    const dt_compute_ops *ops = dt__ops(ctx);
    int64_t D = E->dim, k = 0;
    float *h = dt__arena_host(ctx->arena, 2 * (n ? n : 1)); /* ids, then positions */
    if (!h)
        return dt__fail(DT_ERR_NOMEM, "%s: out of host memory for %lld token ids", E->base.name, (long long)n);
    for (int64_t i = 0; i < n; i++) {
        int64_t id = (int64_t)host_ids[i] - E->v0;
        if (id >= 0 && id < E->vl) {
            h[k] = (float)id;
            h[n + k++] = (float)i;
        }
    }
    if (!k)
        return DT_OK;
    dt_arena_mark mark = dt_arena_get_mark(ctx->arena);
    float *dev = dt_arena_alloc(ctx->arena, 2 * k), *rows = dt_arena_alloc(ctx->arena, k * D);
    dt_status s = dev && rows ? ops->upload(dev, h, (size_t)k * sizeof *h)
                              : dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", E->base.name);
    if (s == DT_OK)
        s = ops->upload(dev + k, h + n, (size_t)k * sizeof *h);
    if (s == DT_OK && forward) {
        ops->rows_gather(rows, src, dev, k, D);
        ops->rows_scatter_add(dst, dev + k, rows, k, D);
    } else if (s == DT_OK) {
        ops->rows_gather(rows, src, dev + k, k, D);
        ops->rows_scatter_add(dst, dev, rows, k, D);
    }
    dt_arena_rewind(ctx->arena, mark);
    return s;
}

static dt_status embed_forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    embed *E = (embed *)l;
    if (x->ndim != 2 || x->shape[1] > E->context)
        return dt__fail(DT_ERR_INVALID, "%s: expects token ids [batch, time <= %lld]", l->name, (long long)E->context);
    int64_t B = x->shape[0], T = x->shape[1], D = E->dim;
    const dt_compute_ops *ops = dt__ops(ctx);
    /* the ids are checked where the host can read them: a device model's
     * input is uploaded by dt_model_forward, which leaves the host's copy in
     * ctx->input */
    const float *host_ids = ops->host ? x->data : ctx->input && dt_tensor_numel(ctx->input) == B * T ? ctx->input->data : NULL;
    if (!host_ids)
        return dt__fail(DT_ERR_INVALID, "%s: the token ids on %s have no host copy to check", l->name, ops->name);
    for (int64_t i = 0; i < B * T; i++) {
        float f = host_ids[i];
        if (!(f >= 0 && f < (float)E->vocab) || f != floorf(f))
            return dt__fail(DT_ERR_INVALID, "%s: token id %g outside 0..%lld", l->name, f, (long long)E->vocab - 1);
    }
    embed_saved *ids = DT_SAVE(ctx, l, embed_saved);
    int t = E->tp.size ? E->tp.size : 1;
    if (E->sp && T % t)
        return dt__fail(DT_ERR_INVALID, "%s: sequence parallel: %lld positions are not divisible by %d ranks", l->name,
                        (long long)T, t);
    /* sequence parallel: this rank's slice is kept, the whole sum is a temporary */
    float *local = ids && E->sp ? dt_arena_alloc(ctx->arena, B * T * D / t) : NULL;
    dt_arena_mark mark = dt_arena_get_mark(ctx->arena);
    float *out = ids && (local || !E->sp) ? dt_arena_alloc(ctx->arena, B * T * D) : NULL;
    if (!out)
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    ids->ids = *x;
    ids->host = x->data;
    const float *wpe = dt_param_value(ctx->params, E->wpe);
    if (E->tp.size && !ops->host) { /* the host's ids pick the rows; kept for the backward */
        float *keep = dt__arena_host(ctx->arena, B * T);
        if (!keep)
            return dt__fail(DT_ERR_NOMEM, "%s: out of host memory for %lld token ids", l->name, (long long)(B * T));
        memcpy(keep, host_ids, (size_t)(B * T) * sizeof *keep);
        ids->host = keep;
        ops->zero(out, (size_t)(B * T * D) * sizeof *out);
        DT_CHECK(embed_rows_on_device(ctx, E, keep, B * T, true, out, dt_param_value(ctx->params, E->wte)));
    } else if (E->tp.size) {
        const float *wte = dt_param_value(ctx->params, E->wte);
        for (int64_t i = 0; i < B * T; i++) {
            int64_t id = (int64_t)x->data[i] - E->v0;
            if (id >= 0 && id < E->vl)
                memcpy(out + i * D, wte + id * D, (size_t)D * sizeof *out);
            else
                memset(out + i * D, 0, (size_t)D * sizeof *out);
        }
    }
    if (E->tp.size) {
        if (E->sp) { /* summed, and split into the slices of the positions */
            float *scratch = dt_arena_alloc(ctx->arena, B * T * D);
            dt_status s = scratch ? dt__sp_reduce_scatter(&E->tp, out, local, scratch, B, T / t, D)
                                  : dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
            dt_arena_rewind(ctx->arena, mark);
            if (s != DT_OK)
                return dt__wrap(s, "%s: vocabulary-parallel embedding: ", l->name);
            int64_t Tl = T / t, p0 = Tl * E->tp.rank;
            for (int64_t b = 0; b < B; b++) /* positions p0 .. p0 + Tl - 1 */
                ops->axpy(local + b * Tl * D, 1.0f, wpe + p0 * D, Tl * D);
            dt_tensor h = dt_tensor_view(local, 3, (int64_t[]){B, Tl, D});
            return E->drop->ops->forward(E->drop, ctx, &h, y);
        }
        dt_status s = E->tp.allreduce_sum(E->tp.user, out, B * T * D);
        if (s != DT_OK)
            return dt__wrap(s, "%s: vocabulary-parallel embedding: ", l->name);
    } else {
        ops->rows_gather(out, dt_param_value(ctx->params, E->wte), x->data, B * T, D);
    }
    ops->rows_add(out, wpe, B, T * D); /* each sequence adds positions 0..T-1 */
    dt_tensor h = dt_tensor_view(out, 3, (int64_t[]){B, T, D});
    return E->drop->ops->forward(E->drop, ctx, &h, y);
}

static dt_status embed_backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    (void)dx, (void)need_dx;
    embed *E = (embed *)l;
    dt_tensor g;
    DT_CHECK(E->drop->ops->backward(E->drop, ctx, dy, &g, true));
    const embed_saved *saved = DT_LOAD(ctx, l, embed_saved);
    if (!saved)
        return DT_ERR_INVALID;
    const dt_tensor *ids = &saved->ids;
    int64_t B = ids->shape[0], T = ids->shape[1], D = E->dim;
    dt_arena_mark mark = dt_arena_get_mark(ctx->arena);
    if (E->sp) { /* positions: this slice's part (tp_partial); then the whole gradient for the tokens */
        int t = E->tp.size;
        int64_t Tl = T / t, p0 = Tl * E->tp.rank;
        dt__ops(ctx)->rows_sum_add(dt_param_grad(ctx->params, E->wpe) + p0 * D, g.data, B, Tl * D);
        float *whole = dt_arena_alloc(ctx->arena, B * T * D), *scratch = dt_arena_alloc(ctx->arena, B * T * D);
        dt_status s = whole && scratch ? dt__sp_gather(&E->tp, g.data, whole, scratch, B, Tl, D)
                                       : dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
        if (s != DT_OK) {
            dt_arena_rewind(ctx->arena, mark);
            return dt__wrap(s, "%s: vocabulary-parallel embedding: ", l->name);
        }
        g.data = whole;
    }
    if (E->tp.size && !dt__ops(ctx)->host) { /* as below, picked by the host's copy of the ids */
        dt_status s = embed_rows_on_device(ctx, E, saved->host, B * T, false, dt_param_grad(ctx->params, E->wte), g.data);
        if (s != DT_OK) {
            dt_arena_rewind(ctx->arena, mark);
            return s;
        }
    } else if (E->tp.size) { /* only this rank's rows: each token's gradient goes to its owner */
        float *gw = dt_param_grad(ctx->params, E->wte);
        for (int64_t i = 0; i < B * T; i++) {
            int64_t id = (int64_t)ids->data[i] - E->v0;
            if (id >= 0 && id < E->vl)
                dt__ops(ctx)->axpy(gw + id * D, 1.0f, g.data + i * D, D);
        }
    } else {
        dt__ops(ctx)->rows_scatter_add(dt_param_grad(ctx->params, E->wte), ids->data, g.data, B * T, D);
    }
    if (!E->sp)
        dt__ops(ctx)->rows_sum_add(dt_param_grad(ctx->params, E->wpe), g.data, B, T * D); /* rows are sequences */
    dt_arena_rewind(ctx->arena, mark);
    dt_params_grad_ready(ctx->params, E->wpe);
    dt_params_grad_ready(ctx->params, E->wte); /* final: a tied head in this stage added its part earlier */
    return DT_OK;
}

static void embed_init(dt_layer *l, dt_params *p, uint64_t seed)
{
    (void)l;
    init_normal(p, "transformer.wte.weight", 0.02f, seed);
    init_normal(p, "transformer.wpe.weight", 0.02f, seed);
}

static void embed_destroy(dt_layer *l)
{
    dt_layer_destroy(((embed *)l)->drop);
    free(l);
}

static const dt_layer_ops embed_ops = {"gpt-embed", embed_forward, embed_backward, embed_init, embed_destroy};

/* ---- block: x + attn(ln_1(x)), then + mlp(ln_2(.)) ----
 * Two residual sequences in one sequence; this wrapper adds GPT-2's
 * initialisation (residual projections scaled by 1/sqrt(2L)). */
typedef struct {
    dt_layer base;
    int layers;
    dt_layer *body;
} block;

static dt_status block_forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    dt_layer *b = ((block *)l)->body;
    return b->ops->forward(b, ctx, x, y);
}

static dt_status block_backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    dt_layer *b = ((block *)l)->body;
    return b->ops->backward(b, ctx, dy, dx, need_dx);
}

static void block_init(dt_layer *l, dt_params *p, uint64_t seed)
{
    block *K = (block *)l;
    K->body->ops->init(K->body, p, seed); /* LayerNorms (ones, zeros); the linears are set below */
    char name[160];
    float resid = 0.02f / sqrtf(2.0f * (float)K->layers);
    struct {
        const char *suffix;
        float std;
    } w[] = {{"attn.c_attn", 0.02f}, {"attn.c_proj", resid}, {"mlp.c_fc", 0.02f}, {"mlp.c_proj", resid}};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
        snprintf(name, sizeof name, "%s.%s.weight", l->name, w[i].suffix);
        init_normal(p, name, w[i].std, seed);
        snprintf(name, sizeof name, "%s.%s.bias", l->name, w[i].suffix);
        init_zero(p, name);
    }
}

static void block_destroy(dt_layer *l)
{
    dt_layer_destroy(((block *)l)->body);
    free(l);
}

static const dt_layer_ops block_ops = {"gpt-block", block_forward, block_backward, block_init, block_destroy};

/* ---- head: ln_f, then logits = h wte^T ----
 * Vocabulary-parallel (tp set): this rank's logits are those of its rows of
 * wte, [.., vocab / t]; backward sums the input gradient over the group. */
typedef struct {
    dt_layer base;
    int64_t vocab, dim; /* vocab: this rank's classes */
    dt_tp_group tp;     /* size 0: not vocabulary-parallel */
    bool sp; /* sequence parallel: ln_f on this rank's slice, gathered before the logits */
    int wte;
    dt_layer *ln_f;
} head;

/* Sequence parallel: the whole [B, t Tl, D] of the slices h [B, Tl, D], a
 * temporary of the arena (the caller rewinds to a mark taken before). */
static float *head_whole(head *H, dt_ctx *ctx, const dt_tensor *h, dt_status *st)
{
    int64_t whole = dt_tensor_numel(h) * H->tp.size;
    float *out = dt_arena_alloc(ctx->arena, whole), *scratch = dt_arena_alloc(ctx->arena, whole);
    *st = out && scratch ? dt__sp_gather(&H->tp, h->data, out, scratch, h->shape[0], h->shape[1], H->dim)
                         : dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", H->base.name);
    if (*st != DT_OK)
        *st = dt__wrap(*st, "%s: vocabulary-parallel output layer: ", H->base.name);
    return *st == DT_OK ? out : NULL;
}

static dt_status head_forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    head *H = (head *)l;
    dt_tensor h;
    DT_CHECK(H->ln_f->ops->forward(H->ln_f, ctx, x, &h));
    dt_tensor *saved = DT_SAVE(ctx, l, dt_tensor);
    if (!saved)
        return DT_ERR_NOMEM;
    *saved = h; /* sequence parallel: this rank's slice, gathered again in backward */
    *y = h;
    if (H->sp)
        y->shape[1] *= H->tp.size;
    y->shape[y->ndim - 1] = H->vocab;
    int64_t n = dt_tensor_numel(y) / H->vocab;
    if (!(y->data = dt_arena_alloc(ctx->arena, n * H->vocab)))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    dt_arena_mark mark = dt_arena_get_mark(ctx->arena);
    dt_status st = DT_OK;
    const float *in = H->sp ? head_whole(H, ctx, &h, &st) : h.data;
    if (in)
        dt__gemm_packed(ctx, 0, 1, n, H->vocab, H->dim, 1.0f, in, dt_param_value(ctx->params, H->wte), 0.0f, y->data);
    dt_arena_rewind(ctx->arena, mark);
    return st;
}

static dt_status head_backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    (void)need_dx;
    head *H = (head *)l;
    const dt_tensor *h = DT_LOAD(ctx, l, dt_tensor);
    if (!h)
        return DT_ERR_INVALID;
    int64_t n = dt_tensor_numel(dy) / H->vocab; /* every position's row */
    dt_tensor dh = *h;
    if (!(dh.data = dt_arena_alloc(ctx->arena, dt_tensor_numel(h))))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    dt_arena_mark mark = dt_arena_get_mark(ctx->arena);
    dt_status st = DT_OK;
    const float *in = H->sp ? head_whole(H, ctx, h, &st) : h->data;
    float *g = !in ? NULL : H->sp ? dt_arena_alloc(ctx->arena, n * H->dim) : dh.data;
    if (in && !g)
        st = dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    if (g) {
        float *dwte = dt_param_grad(ctx->params, H->wte);
        const float *wte = dt_param_value(ctx->params, H->wte);
        dt__linear_grads(ctx, H->vocab, H->dim, n, dy->data, in, wte, dwte, NULL, g, NULL); /* (wte: the embedding hands it on) */
        if (H->sp) { /* summed and split into this rank's slice of the positions */
            float *scratch = dt_arena_alloc(ctx->arena, n * H->dim);
            st = scratch ? dt__sp_reduce_scatter(&H->tp, g, dh.data, scratch, h->shape[0], h->shape[1], H->dim)
                         : dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
        } else if (H->tp.size) {
            st = H->tp.allreduce_sum(H->tp.user, g, n * H->dim);
        }
        if (st != DT_OK && H->tp.size)
            st = dt__wrap(st, "%s: vocabulary-parallel output layer: ", l->name);
    }
    dt_arena_rewind(ctx->arena, mark);
    DT_CHECK(st);
    return H->ln_f->ops->backward(H->ln_f, ctx, &dh, dx, true);
}

static void head_init(dt_layer *l, dt_params *p, uint64_t seed)
{
    head *H = (head *)l;
    H->ln_f->ops->init(H->ln_f, p, seed);
    init_normal(p, "transformer.wte.weight", 0.02f, seed); /* tied: the same bits as the embedding's init */
}

static void head_destroy(dt_layer *l)
{
    dt_layer_destroy(((head *)l)->ln_f);
    free(l);
}

static const dt_layer_ops head_ops = {"gpt-head", head_forward, head_backward, head_init, head_destroy};

/* ---- the description ---- */

/* The configuration's tensor-parallel group (NULL: none), its size and this
 * rank's place in it (1 and 0 without one). */
static const dt_tp_group *tp_of(const dt_gpt_config *c) { return c->tp.size ? &c->tp : NULL; }
static int tp_size(const dt_gpt_config *c) { return c->tp.size ? c->tp.size : 1; }
static int tp_rank(const dt_gpt_config *c) { return c->tp.size ? c->tp.rank : 0; }

/* The tied table: this rank's rows of it under tensor parallelism. */
static dt_status use_wte(const dt_gpt_config *c, dt_params *p, int *index)
{
    int t = tp_size(c);
    DT_CHECK(dt__params_use(p, "transformer.wte.weight", 2, (int64_t[]){c->vocab / t, c->dim}, index));
    return t > 1 ? dt_param_set_shard(p, *index, t, tp_rank(c), 0, 1) : DT_OK;
}

/* Sequence parallel: tensor parallel over more than one rank, asked for. */
static bool seq_parallel(const dt_gpt_config *c) { return c->sequence_parallel && tp_size(c) > 1; }

/* A dropout between the split regions: over this rank's slice of the
 * positions under sequence parallelism (the same masks as without). */
static dt_status make_dropout(const dt_gpt_config *c, const char *name, dt_layer **out)
{
    if (seq_parallel(c))
        return dt__dropout_seq_create(name, c->dropout, tp_size(c), tp_rank(c), out);
    return dt_dropout_create(name, c->dropout, out);
}

/* A LayerNorm; under sequence parallelism it sees this rank's slice of the
 * positions, so its gradients are parts of the whole (tp_partial). */
static dt_status make_layernorm(const dt_gpt_config *c, dt_params *p, const char *name, dt_layer **out)
{
    DT_CHECK(dt_layernorm_create(p, name, c->dim, 1e-5f, out));
    if (seq_parallel(c)) {
        char n[160];
        snprintf(n, sizeof n, "%s.weight", name);
        dt_param_set_tp_partial(p, dt_params_find(p, n));
        snprintf(n, sizeof n, "%s.bias", name);
        dt_param_set_tp_partial(p, dt_params_find(p, n));
    }
    return DT_OK;
}

static dt_status make_embed(const dt_gpt_config *c, dt_params *p, dt_layer **out)
{
    embed *E = dt__layer_new(sizeof *E, &embed_ops, "transformer.embed");
    if (!E)
        return DT_ERR_NOMEM;
    E->vocab = c->vocab;
    E->context = c->context;
    E->dim = c->dim;
    E->tp = c->tp;
    E->sp = seq_parallel(c);
    int t = tp_size(c);
    E->vl = c->vocab / t;
    E->v0 = E->vl * tp_rank(c);
    dt_status s = use_wte(c, p, &E->wte);
    if (s == DT_OK)
        s = dt_params_add(p, "transformer.wpe.weight", 2, (int64_t[]){c->context, c->dim}, &E->wpe);
    if (s == DT_OK && E->sp)
        dt_param_set_tp_partial(p, E->wpe);
    if (s == DT_OK)
        s = make_dropout(c, "transformer.drop", &E->drop);
    if (s != DT_OK) {
        free(E);
        return s;
    }
    *out = &E->base;
    return DT_OK;
}

static dt_status destroy_all(dt_layer **items, int n, dt_status s)
{
    for (int i = 0; i < n; i++)
        dt_layer_destroy(items[i]);
    return s;
}

/* Append x + f(x) to body, f the sequence of items (consumed, also on failure). */
static dt_status add_branch(dt_layer *body, const char *name, dt_layer **items, int n)
{
    dt_layer *seq = NULL, *res = NULL;
    dt_status s = dt_sequential_create(name, &seq);
    if (s != DT_OK)
        return destroy_all(items, n, s);
    for (int i = 0; i < n; i++) {
        if (s == DT_OK)
            s = dt_sequential_append(seq, items[i]); /* consumes the item */
        else
            dt_layer_destroy(items[i]);
    }
    if (s != DT_OK) {
        dt_layer_destroy(seq);
        return s;
    }
    DT_CHECK(dt_residual_create(name, seq, &res)); /* consumes seq */
    return dt_sequential_append(body, res);
}

static dt_status make_block(const dt_gpt_config *c, int i, dt_params *p, dt_layer **out)
{
    block *K = dt__layer_new(sizeof *K, &block_ops, "transformer.h.%d", i);
    if (!K)
        return DT_ERR_NOMEM;
    K->layers = (int)c->layers;
    const char *b = K->base.name;
    char n[160];
    dt_layer *a[3] = {0}, *m[5] = {0};
    dt_status s = dt_sequential_create(b, &K->body);
    bool sp = seq_parallel(c);
    const dt_tp_group *tp = tp_of(c);
    snprintf(n, sizeof n, "%s.ln_1", b);
    if (s == DT_OK)
        s = make_layernorm(c, p, n, &a[0]);
    snprintf(n, sizeof n, "%s.attn", b);
    if (s == DT_OK)
        s = sp      ? dt__attention_seq_create(p, n, c->dim, c->heads, tp, &a[1])
            : tp    ? dt_attention_parallel_create(p, n, c->dim, c->heads, tp, &a[1])
                    : dt_attention_create(p, n, c->dim, c->heads, &a[1]);
    snprintf(n, sizeof n, "%s.attn_dropout", b);
    if (s == DT_OK)
        s = make_dropout(c, n, &a[2]);
    snprintf(n, sizeof n, "%s.ln_2", b);
    if (s == DT_OK)
        s = make_layernorm(c, p, n, &m[0]);
    snprintf(n, sizeof n, "%s.mlp.c_fc", b);
    if (s == DT_OK)
        s = tp ? dt__linear_parallel_create(p, n, c->dim, 4 * c->dim, true, DT_TP_COLUMN, 1, sp, tp, &m[1])
               : dt_linear_create(p, n, c->dim, 4 * c->dim, true, &m[1]);
    snprintf(n, sizeof n, "%s.mlp.gelu", b);
    if (s == DT_OK)
        s = dt_gelu_create(n, &m[2]);
    snprintf(n, sizeof n, "%s.mlp.c_proj", b);
    if (s == DT_OK)
        s = tp ? dt__linear_parallel_create(p, n, 4 * c->dim, c->dim, true, DT_TP_ROW, 1, sp, tp, &m[3])
               : dt_linear_create(p, n, 4 * c->dim, c->dim, true, &m[3]);
    snprintf(n, sizeof n, "%s.mlp_dropout", b);
    if (s == DT_OK)
        s = make_dropout(c, n, &m[4]);
    snprintf(n, sizeof n, "%s.attn_branch", b);
    s = s == DT_OK ? add_branch(K->body, n, a, 3) : destroy_all(a, 3, s);
    snprintf(n, sizeof n, "%s.mlp_branch", b);
    s = s == DT_OK ? add_branch(K->body, n, m, 5) : destroy_all(m, 5, s);
    if (s != DT_OK) {
        block_destroy(&K->base);
        return s;
    }
    *out = &K->base;
    return DT_OK;
}

static dt_status make_head(const dt_gpt_config *c, dt_params *p, dt_layer **out)
{
    head *H = dt__layer_new(sizeof *H, &head_ops, "lm_head");
    if (!H)
        return DT_ERR_NOMEM;
    H->vocab = c->vocab / tp_size(c);
    H->dim = c->dim;
    H->tp = c->tp;
    H->sp = seq_parallel(c);
    dt_status s = use_wte(c, p, &H->wte);
    if (s == DT_OK)
        s = make_layernorm(c, p, "transformer.ln_f", &H->ln_f);
    if (s != DT_OK) {
        free(H);
        return s;
    }
    *out = &H->base;
    return DT_OK;
}

static dt_status make_gpt_block(const dt_model_desc *d, int index, dt_params *p, dt_layer **out)
{
    const dt_gpt_config *c = dt__desc_config(d);
    if (index == 0)
        return make_embed(c, p, out);
    if (index == c->layers + 1)
        return make_head(c, p, out);
    return make_block(c, index - 1, p, out);
}

dt_status dt_gpt_describe(const dt_gpt_config *c, dt_model_desc **out)
{
    if (!c || !out)
        return dt__fail(DT_ERR_INVALID, "gpt: %s is NULL", c ? "out" : "the configuration");
    if (c->vocab <= 0 || c->vocab > (1 << 24) || c->context <= 0 || c->layers <= 0 || c->layers > 100000 ||
        c->heads <= 0 || c->dim <= 0 || c->dim % c->heads || !(c->dropout >= 0 && c->dropout < 1))
        return dt__fail(DT_ERR_INVALID,
                        "gpt: vocab %lld (1..2^24), context %lld, layers %lld, heads %lld, dim %lld (a multiple of "
                        "heads), dropout %g",
                        (long long)c->vocab, (long long)c->context, (long long)c->layers, (long long)c->heads,
                        (long long)c->dim, c->dropout);
    if (c->tp.size)
        DT_CHECK(dt__tp_check(&c->tp, "gpt"));
    int t = tp_size(c);
    if (c->sequence_parallel && (!c->tp.size || c->context % t))
        return dt__fail(DT_ERR_INVALID, "gpt: sequence parallel needs tensor parallelism (tp) and a context divisible "
                                        "by its %d ranks (context %lld)", t, (long long)c->context);
    if (c->vocab % t || c->heads % t)
        return dt__fail(DT_ERR_INVALID,
                        "gpt: tensor parallel over %d ranks needs vocab and heads divisible by %d (vocab %lld, heads "
                        "%lld)",
                        t, t, (long long)c->vocab, (long long)c->heads);
    dt_model_desc *d = NULL;
    DT_CHECK(dt__desc_new(c, sizeof *c, &d));
    dt__desc_set_input(d, 1, &c->context, c->vocab);
    if (c->tp.size)
        dt__desc_set_output_split(d, c->vocab, c->vocab / t * tp_rank(c), &c->tp);
    /* Cost hints per sample (one sequence of `context` tokens).  Activation
     * floats are what forward allocates in the arena and keeps for backward. */
    double T = (double)c->context, D = (double)c->dim, V = (double)c->vocab, H = (double)c->heads;
    double drop = c->dropout > 0 ? 2 : 0; /* a dropout keeps its output and its mask */
    double block_flops = 24 * T * D * D + 4 * T * T * D;
    double block_act = T * D * (27 + 2 * drop) + 2 * T + H * T * T;
    int L = (int)c->layers;
    dt_status s = dt__desc_add(d, "transformer.embed", "gpt-embed", make_gpt_block, c->vocab * c->dim + c->context * c->dim,
                               T * D, 4 * T * D * (1 + drop));
    for (int i = 0; s == DT_OK && i < L; i++) {
        char name[64];
        snprintf(name, sizeof name, "transformer.h.%d", i);
        s = dt__desc_add(d, name, "gpt-block", make_gpt_block, 12 * c->dim * c->dim + 13 * c->dim, block_flops,
                         4 * block_act);
    }
    if (s == DT_OK)
        s = dt__desc_add(d, "lm_head", "gpt-head", make_gpt_block, c->vocab * c->dim + 2 * c->dim, 2 * T * D * V,
                         4 * (2 * T * D + T + T * V));
    if (s == DT_OK)
        s = dt__desc_share(d, "transformer.wte.weight", 0, L + 1);
    if (s != DT_OK) {
        dt_model_desc_destroy(d);
        return s;
    }
    *out = d;
    return DT_OK;
}

dt_status dt_gpt_create(const dt_gpt_config *c, dt_model **out)
{
    dt_model_desc *d = NULL;
    return dt__build_whole(dt_gpt_describe(c, &d), &d, out);
}
