/* GPT: byte-level decoder-only transformer, pre-LayerNorm, learned positions,
 * GELU MLP 4x, output projection tied to the token embedding.  Blocks are
 * layers of the model's ordered list: [embed, h.0 .. h.L-1, head].  Parameter
 * names and initialisation follow GPT-2 / nanoGPT ("transformer.h.0.attn.
 * c_attn.weight"; N(0, 0.02), residual projections N(0, 0.02/sqrt(2L))). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/status.h"
#include "dtrain/nn.h"
#include "nn/model_internal.h"

static void init_normal(dt_params *p, const char *name, float std, dt_rng *rng)
{
    int i = dt_params_find(p, name);
    if (i < 0)
        return;
    float *w = dt_param_value(p, i);
    for (int64_t k = 0; k < dt_params_info(p, i)->numel; k++)
        w[k] = std * dt_rng_normal(rng);
}

static void init_zero(dt_params *p, const char *name)
{
    int i = dt_params_find(p, name);
    if (i >= 0)
        dt_vec_zero(dt_param_value(p, i), dt_params_info(p, i)->numel);
}

/* ---- embed: ids [B, T] -> wte[id] + wpe[t] ---- */
typedef struct {
    dt_layer base;
    int64_t vocab, context, dim;
    int wte, wpe;
    dt_layer *drop;
    dt_tensor ids;
} embed;

static dt_status embed_forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    embed *E = (embed *)l;
    if (x->ndim != 2 || x->shape[1] > E->context)
        return dt__fail(DT_ERR_INVALID, "%s: expects token ids [batch, time <= %lld]", l->name, (long long)E->context);
    int64_t B = x->shape[0], T = x->shape[1], D = E->dim;
    float *out = dt_arena_alloc(ctx->arena, B * T * D);
    if (!out)
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    for (int64_t i = 0; i < B * T; i++) {
        float f = x->data[i];
        if (!(f >= 0 && f < (float)E->vocab) || f != floorf(f))
            return dt__fail(DT_ERR_INVALID, "%s: token id %g outside 0..%lld", l->name, f, (long long)E->vocab - 1);
    }
    const float *wpe = dt_param_value(ctx->params, E->wpe);
    dt_rows_gather(out, dt_param_value(ctx->params, E->wte), x->data, B * T, D);
    for (int64_t b = 0; b < B; b++) /* each sequence adds positions 0..T-1 */
        dt_vec_axpy(out + b * T * D, 1.0f, wpe, T * D);
    E->ids = *x;
    dt_tensor h = dt_tensor_view(out, 3, (int64_t[]){B, T, D});
    return E->drop->ops->forward(E->drop, ctx, &h, y);
}

static dt_status embed_backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    (void)dx, (void)need_dx;
    embed *E = (embed *)l;
    dt_tensor g;
    DT_CHECK(E->drop->ops->backward(E->drop, ctx, dy, &g, true));
    int64_t B = E->ids.shape[0], T = E->ids.shape[1], D = E->dim;
    dt_rows_scatter_add(dt_param_grad(ctx->params, E->wte), E->ids.data, g.data, B * T, D);
    dt_rows_sum_add(dt_param_grad(ctx->params, E->wpe), g.data, B, T * D); /* rows are sequences */
    dt_params_grad_ready(ctx->params, E->wpe);
    dt_params_grad_ready(ctx->params, E->wte); /* final: the tied head added its part earlier */
    return DT_OK;
}

static void embed_init(dt_layer *l, dt_params *p, dt_rng *rng)
{
    (void)l;
    init_normal(p, "transformer.wte.weight", 0.02f, rng);
    init_normal(p, "transformer.wpe.weight", 0.02f, rng);
}

static void embed_destroy(dt_layer *l)
{
    dt_layer_destroy(((embed *)l)->drop);
    free(l);
}

static const dt_layer_ops embed_ops = {"gpt-embed", embed_forward, embed_backward, embed_init, embed_destroy};

/* ---- block: x + attn(ln_1(x)), then + mlp(ln_2(.)) ---- */
typedef struct {
    dt_layer base;
    int layers;
    dt_layer *ln1, *attn, *drop1, *ln2, *fc, *gelu, *proj, *drop2;
    dt_tensor x1;
} block;

static dt_status run_forward(dt_layer **chain, int n, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    dt_tensor cur = *x;
    for (int i = 0; i < n; i++) {
        dt_tensor next;
        DT_CHECK(chain[i]->ops->forward(chain[i], ctx, &cur, &next));
        cur = next;
    }
    *y = cur;
    return DT_OK;
}

static dt_status run_backward(dt_layer **chain, int n, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx)
{
    dt_tensor g = *dy;
    for (int i = n - 1; i >= 0; i--) {
        dt_tensor d;
        DT_CHECK(chain[i]->ops->backward(chain[i], ctx, &g, &d, true));
        g = d;
    }
    *dx = g;
    return DT_OK;
}

static dt_status add_into_new(dt_ctx *ctx, const dt_tensor *a, const dt_tensor *b, dt_tensor *y)
{
    *y = *a;
    if (!(y->data = dt_arena_alloc(ctx->arena, dt_tensor_numel(a))))
        return dt__fail(DT_ERR_NOMEM, "out of activation memory");
    dt_residual_add(a, b, y);
    return DT_OK;
}

static dt_status block_forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    block *K = (block *)l;
    dt_tensor a, m;
    DT_CHECK(run_forward((dt_layer *[]){K->ln1, K->attn, K->drop1}, 3, ctx, x, &a));
    DT_CHECK(add_into_new(ctx, x, &a, &K->x1));
    DT_CHECK(run_forward((dt_layer *[]){K->ln2, K->fc, K->gelu, K->proj, K->drop2}, 5, ctx, &K->x1, &m));
    return add_into_new(ctx, &K->x1, &m, y);
}

static dt_status block_backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    (void)need_dx;
    block *K = (block *)l;
    dt_tensor dm, dx1, da;
    DT_CHECK(run_backward((dt_layer *[]){K->ln2, K->fc, K->gelu, K->proj, K->drop2}, 5, ctx, dy, &dm));
    DT_CHECK(add_into_new(ctx, dy, &dm, &dx1)); /* the residual passes dy straight through */
    DT_CHECK(run_backward((dt_layer *[]){K->ln1, K->attn, K->drop1}, 3, ctx, &dx1, &da));
    return add_into_new(ctx, &dx1, &da, dx);
}

static void block_init(dt_layer *l, dt_params *p, dt_rng *rng)
{
    block *K = (block *)l;
    K->ln1->ops->init(K->ln1, p, rng);
    K->ln2->ops->init(K->ln2, p, rng);
    const char *n = l->name;
    char name[160];
    float resid = 0.02f / sqrtf(2.0f * (float)K->layers);
    struct {
        const char *suffix;
        float std;
    } w[] = {{"attn.c_attn", 0.02f}, {"attn.c_proj", resid}, {"mlp.c_fc", 0.02f}, {"mlp.c_proj", resid}};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
        snprintf(name, sizeof name, "%s.%s.weight", n, w[i].suffix);
        init_normal(p, name, w[i].std, rng);
        snprintf(name, sizeof name, "%s.%s.bias", n, w[i].suffix);
        init_zero(p, name);
    }
}

static void block_destroy(dt_layer *l)
{
    block *K = (block *)l;
    dt_layer *subs[] = {K->ln1, K->attn, K->drop1, K->ln2, K->fc, K->gelu, K->proj, K->drop2};
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        dt_layer_destroy(subs[i]);
    free(K);
}

static const dt_layer_ops block_ops = {"gpt-block", block_forward, block_backward, block_init, block_destroy};

/* ---- head: ln_f, then logits = h wte^T ---- */
typedef struct {
    dt_layer base;
    int64_t vocab, dim;
    int wte;
    dt_layer *ln_f;
    dt_tensor h;
} head;

static dt_status head_forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    head *H = (head *)l;
    DT_CHECK(H->ln_f->ops->forward(H->ln_f, ctx, x, &H->h));
    int64_t n = dt_tensor_numel(x) / H->dim;
    *y = *x;
    y->shape[y->ndim - 1] = H->vocab;
    if (!(y->data = dt_arena_alloc(ctx->arena, n * H->vocab)))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    dt_sgemm(0, 1, n, H->vocab, H->dim, 1.0f, H->h.data, dt_param_value(ctx->params, H->wte), 0.0f, y->data);
    return DT_OK;
}

static dt_status head_backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    (void)need_dx;
    head *H = (head *)l;
    int64_t n = dt_tensor_numel(&H->h) / H->dim;
    dt_sgemm(1, 0, H->vocab, H->dim, n, 1.0f, dy->data, H->h.data, 1.0f, dt_param_grad(ctx->params, H->wte));
    dt_tensor dh = H->h;
    if (!(dh.data = dt_arena_alloc(ctx->arena, n * H->dim)))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    dt_sgemm(0, 0, n, H->dim, H->vocab, 1.0f, dy->data, dt_param_value(ctx->params, H->wte), 0.0f, dh.data);
    return H->ln_f->ops->backward(H->ln_f, ctx, &dh, dx, true);
}

static void head_init(dt_layer *l, dt_params *p, dt_rng *rng)
{
    head *H = (head *)l;
    H->ln_f->ops->init(H->ln_f, p, rng);
}

static void head_destroy(dt_layer *l)
{
    dt_layer_destroy(((head *)l)->ln_f);
    free(l);
}

static const dt_layer_ops head_ops = {"gpt-head", head_forward, head_backward, head_init, head_destroy};

/* ---- assembly ---- */

static dt_status make_block(dt_params *p, const dt_gpt_config *c, int i, dt_layer **out)
{
    block *K = calloc(1, sizeof *K);
    if (!K)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    K->base.ops = &block_ops;
    K->layers = (int)c->layers;
    snprintf(K->base.name, sizeof K->base.name, "transformer.h.%d", i);
    char n[160];
    const char *b = K->base.name;
    dt_status s;
    snprintf(n, sizeof n, "%s.ln_1", b);
    s = dt_layernorm_create(p, n, c->dim, 1e-5f, &K->ln1);
    snprintf(n, sizeof n, "%s.attn", b);
    if (s == DT_OK)
        s = dt_attention_create(p, n, c->dim, c->heads, &K->attn);
    snprintf(n, sizeof n, "%s.ln_2", b);
    if (s == DT_OK)
        s = dt_layernorm_create(p, n, c->dim, 1e-5f, &K->ln2);
    snprintf(n, sizeof n, "%s.mlp.c_fc", b);
    if (s == DT_OK)
        s = dt_linear_create(p, n, c->dim, 4 * c->dim, true, &K->fc);
    if (s == DT_OK)
        s = dt_gelu_create("gelu", &K->gelu);
    snprintf(n, sizeof n, "%s.mlp.c_proj", b);
    if (s == DT_OK)
        s = dt_linear_create(p, n, 4 * c->dim, c->dim, true, &K->proj);
    if (s == DT_OK)
        s = dt_dropout_create("attn_dropout", c->dropout, &K->drop1);
    if (s == DT_OK)
        s = dt_dropout_create("mlp_dropout", c->dropout, &K->drop2);
    if (s != DT_OK) {
        block_destroy(&K->base);
        return s;
    }
    *out = &K->base;
    return DT_OK;
}

dt_status dt_gpt_create(const dt_gpt_config *c, dt_model **out)
{
    if (c->vocab <= 0 || c->context <= 0 || c->layers <= 0 || c->heads <= 0 || c->dim <= 0 || c->dim % c->heads ||
        !(c->dropout >= 0 && c->dropout < 1))
        return dt__fail(DT_ERR_INVALID,
                        "gpt: vocab %lld, context %lld, layers %lld, heads %lld, dim %lld (a multiple of heads), dropout %g",
                        (long long)c->vocab, (long long)c->context, (long long)c->layers, (long long)c->heads,
                        (long long)c->dim, c->dropout);
    dt_model *m = NULL;
    DT_CHECK(dt__model_new((int)c->layers + 2, &m));
    dt_params *p = dt_model_params(m);
    embed *E = calloc(1, sizeof *E);
    head *H = calloc(1, sizeof *H);
    dt_status s = E && H ? DT_OK : dt__fail(DT_ERR_NOMEM, "out of memory");
    if (s == DT_OK) {
        E->base.ops = &embed_ops;
        snprintf(E->base.name, sizeof E->base.name, "transformer.embed");
        E->vocab = c->vocab;
        E->context = c->context;
        E->dim = c->dim;
        s = dt_params_add(p, "transformer.wte.weight", 2, (int64_t[]){c->vocab, c->dim}, &E->wte);
        if (s == DT_OK)
            s = dt_params_add(p, "transformer.wpe.weight", 2, (int64_t[]){c->context, c->dim}, &E->wpe);
        if (s == DT_OK)
            s = dt_dropout_create("embed_dropout", c->dropout, &E->drop);
        if (s == DT_OK) {
            dt__model_append(m, &E->base);
            E = NULL;
        }
    }
    for (int i = 0; s == DT_OK && i < c->layers; i++) {
        dt_layer *b = NULL;
        if ((s = make_block(p, c, i, &b)) == DT_OK)
            dt__model_append(m, b);
    }
    if (s == DT_OK) {
        H->base.ops = &head_ops;
        snprintf(H->base.name, sizeof H->base.name, "lm_head");
        H->vocab = c->vocab;
        H->dim = c->dim;
        H->wte = dt_params_find(p, "transformer.wte.weight");
        s = dt_layernorm_create(p, "transformer.ln_f", c->dim, 1e-5f, &H->ln_f);
        if (s == DT_OK) {
            dt__model_append(m, &H->base);
            H = NULL;
        }
    }
    if (s == DT_OK)
        s = dt_params_finalize(p);
    if (E)
        dt_layer_destroy(E->drop);
    free(E);
    free(H);
    if (s != DT_OK) {
        dt_model_destroy(m);
        return s;
    }
    *out = m;
    return DT_OK;
}
