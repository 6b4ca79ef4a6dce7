/* Models as block descriptions, and their instantiation.
 *
 * A description lists a model's blocks in order (name, kind, parameters,
 * cost hints) with the function that creates each.  Instantiating blocks
 * [lo, hi) registers only their parameters and chains them in one sequential
 * container: the whole model is [0, n), a pipeline stage any range.  A tied
 * parameter (GPT's wte, used by the embedding and the output head) is
 * declared shared; each stage that holds one of its users registers it, and
 * the stages reduce its gradient between them (dt_model_shared_params). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/trace.h"
#include "dtrain/nn.h"
#include "nn/loss.h"
#include "nn/model_internal.h"
#include "nn/subs.h"
#include "tensor/backend.h"

typedef struct {
    dt_block_info info;
    dt__block_make make;
} block_desc;

typedef struct {
    char name[96];
    int first, last;
} shared_decl;

/* The last block's output split by class over a tensor-parallel group
 * (vocab classes in all, this rank's from start); tp size 0: not split. */
typedef struct {
    int64_t vocab, start;
    dt_tp_group tp;
} output_split;

struct dt_model_desc {
    void *config;
    block_desc *blocks;
    int n, cap;
    shared_decl *shared;
    int nshared;
    output_split split;
    int input_ndim; /* 0: the builder did not say */
    int64_t input_shape[DT_MAX_DIMS], input_ids;
};

/* The hook context of one chunk's sequence: its blocks' local numbers start
 * at `local`, their whole-model numbers at `global`. */
typedef struct {
    struct dt_model *m;
    int local, global;
} chunk_hook;

struct dt_model {
    dt_params *params;
    /* One sequence per chunk: blocks [chunk_lo[c], chunk_hi[c]) of the whole
     * model, one range for a model or a stage, several for an interleaved
     * pipeline rank's virtual stages. */
    dt_layer **chunks;
    int *chunk_lo, *chunk_hi;
    chunk_hook *hooks;
    int nchunks;
    int n, total; /* blocks held; blocks in the whole model */
    dt_block_info *info;
    int *first_param, *num_params;
    dt_shared_param *shared;
    int nshared;
    dt__subs block_hooks;         /* dt_model_add_hook's, in the order added */
    dt_subscription legacy_hook;  /* the one dt_model_set_hooks keeps */
    dt_dtype precision; /* of the matrix products: DT_F32 or DT_BF16 */
    output_split split; /* when this model holds the last block */
    const dt_compute_ops *dev; /* NULL: the host (dt_model_to_device) */
    int32_t *dtargets;         /* the loss's targets copied to the device (grow-only) */
    int64_t dtargets_cap;
};

/* ---- descriptions ---- */

dt_status dt__desc_new(const void *config, size_t config_bytes, dt_model_desc **out)
{
    dt_model_desc *d = calloc(1, sizeof *d);
    if (!d || !(d->config = malloc(config_bytes ? config_bytes : 1))) {
        free(d);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    memcpy(d->config, config, config_bytes);
    *out = d;
    return DT_OK;
}

const void *dt__desc_config(const dt_model_desc *d) { return d->config; }

dt_status dt__desc_add(dt_model_desc *d, const char *name, const char *kind, dt__block_make make, int64_t params,
                       double flops, double act_bytes)
{
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 16;
        block_desc *b = realloc(d->blocks, (size_t)cap * sizeof *b);
        if (!b)
            return dt__fail(DT_ERR_NOMEM, "out of memory");
        d->blocks = b;
        d->cap = cap;
    }
    block_desc *b = &d->blocks[d->n++];
    memset(b, 0, sizeof *b);
    snprintf(b->info.name, sizeof b->info.name, "%s", name);
    b->info.kind = kind;
    b->info.params = params;
    b->info.flops = flops;
    b->info.act_bytes = act_bytes;
    b->make = make;
    return DT_OK;
}

dt_status dt__desc_share(dt_model_desc *d, const char *name, int first, int last)
{
    shared_decl *s = realloc(d->shared, (size_t)(d->nshared + 1) * sizeof *s);
    if (!s)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    d->shared = s;
    snprintf(s[d->nshared].name, sizeof s->name, "%s", name);
    s[d->nshared].first = first;
    s[d->nshared].last = last;
    d->nshared++;
    return DT_OK;
}

int dt_model_desc_blocks(const dt_model_desc *d) { return d ? d->n : 0; }

void dt__desc_set_input(dt_model_desc *d, int ndim, const int64_t *shape, int64_t ids)
{
    d->input_ndim = ndim > 0 && ndim < DT_MAX_DIMS ? ndim : 0;
    for (int i = 0; i < d->input_ndim; i++)
        d->input_shape[i] = shape[i];
    d->input_ids = ids;
}

dt_status dt_model_desc_input(const dt_model_desc *d, int *ndim, int64_t *shape, int64_t *ids)
{
    if (!d || !ndim || !shape || !ids)
        return dt__fail(DT_ERR_INVALID, "dt_model_desc_input: an argument is NULL");
    if (!d->input_ndim)
        return dt__fail(DT_ERR_INVALID, "the model's description does not give the shape of its input");
    *ndim = d->input_ndim;
    for (int i = 0; i < d->input_ndim; i++)
        shape[i] = d->input_shape[i];
    *ids = d->input_ids;
    return DT_OK;
}

const dt_block_info *dt_model_desc_block(const dt_model_desc *d, int i)
{
    return d && i >= 0 && i < d->n ? &d->blocks[i].info : NULL;
}

void dt_model_desc_destroy(dt_model_desc *d)
{
    if (!d)
        return;
    free(d->config);
    free(d->blocks);
    free(d->shared);
    free(d);
}

dt_status dt__params_use(dt_params *p, const char *name, int ndim, const int64_t *shape, int *index)
{
    int i = dt_params_find(p, name);
    if (i < 0)
        return dt_params_add(p, name, ndim, shape, index);
    const dt_param_info *pi = dt_params_info(p, i);
    bool same = pi->ndim == ndim;
    for (int k = 0; same && k < ndim; k++)
        same = pi->shape[k] == shape[k];
    if (!same)
        return dt__fail(DT_ERR_INVALID, "shared parameter '%s' used with two different shapes", name);
    *index = i;
    return DT_OK;
}

/* ---- instantiation ---- */

static _Thread_local int64_t block_t0; /* the open block span's start; 0: none */

/* Call the hooks added: before a block's forward or backward in the order
 * added, after it in reverse, so that a later hook runs nested inside an
 * earlier one (a monitor added after ZeRO sees the block's storage bound
 * from its first call to its last). */
static dt_status call_hooks(dt_model *m, dt_hook_point at, int i, dt_ctx *ctx)
{
    bool before = at == DT_BEFORE_FORWARD || at == DT_BEFORE_BACKWARD;
    for (int k = 0; k < m->block_hooks.n; k++) {
        const dt__sub *h = &m->block_hooks.at[before ? k : m->block_hooks.n - 1 - k];
        DT_CHECK(((dt_block_hook)h->fn)(h->user, at, i, ctx));
    }
    return DT_OK;
}

/* The root sequence's hook: the users' first (they may bind storage), then a
 * check that the block about to run has storage for its parameters.  After
 * a block's backward, a failure of a gradient-ready subscriber during it
 * stops the pass first. */
static dt_status model_hook(void *user, dt_hook_point at, int item, dt_ctx *ctx)
{
    const chunk_hook *ch = user;
    dt_model *m = ch->m;
    int i = ch->local + item, global = ch->global + item, bad = -1;
    /* The timeline's block spans run from before the user's hook (ZeRO's
     * gather) to after its hook (ZeRO's reduce-scatter): one block runs at
     * a time on a thread, so one start per thread is enough. */
    if (dt__tracing() && (at == DT_BEFORE_FORWARD || at == DT_BEFORE_BACKWARD))
        block_t0 = dt__trace_now();
    if (at == DT_AFTER_BACKWARD)
        DT_CHECK(dt_params_grad_ready_status(m->params));
    DT_CHECK(call_hooks(m, at, i, ctx));
    if (at != DT_BEFORE_FORWARD && at != DT_BEFORE_BACKWARD) {
        if (block_t0) {
            char name[96]; /* the trace keeps 47 characters */
            snprintf(name, sizeof name, "%s %s", at == DT_AFTER_FORWARD ? "forward" : "backward", m->info[i].name);
            dt__trace_end(at == DT_AFTER_FORWARD ? "forward" : "backward", name, block_t0,
                          "\"block\":%d,\"micro_batch\":%u,\"step\":%llu,\"training\":%s", global,
                          ctx ? ctx->key.micro : 0, ctx ? (unsigned long long)ctx->key.step : 0ULL,
                          ctx && ctx->training ? "true" : "false");
            block_t0 = 0;
        }
        return DT_OK;
    }
    /* forward reads values; backward also writes gradients */
    bool (*has)(const dt_params *, int) = at == DT_BEFORE_FORWARD ? dt_param_has_value : dt_param_has_storage;
    for (int k = m->first_param[i]; bad < 0 && k < m->first_param[i] + m->num_params[i]; k++)
        bad = has(m->params, k) ? -1 : k;
    for (int k = 0; bad < 0 && k < m->nshared; k++) /* a tied parameter this block uses */
        if (m->shared[k].first_block == global || m->shared[k].last_block == global)
            bad = has(m->params, m->shared[k].param) ? -1 : m->shared[k].param;
    if (bad >= 0)
        return dt__fail(DT_ERR_INVALID, "%s: parameter %s has no storage before its %s (no hook bound it)",
                        m->info[i].name, dt_params_info(m->params, bad)->name,
                        at == DT_BEFORE_FORWARD ? "forward" : "backward");
    return DT_OK;
}


static dt_status check_ranges(const dt_model_desc *d, const int *bounds, int nchunks)
{
    if (!d || !bounds || nchunks < 1)
        return dt__fail(DT_ERR_INVALID, "model_instantiate: %s", !d ? "the description is NULL"
                                                                     : !bounds ? "the ranges are NULL" : "no range");
    for (int c = 0; c < nchunks; c++) {
        int lo = bounds[2 * c], hi = bounds[2 * c + 1];
        if (lo < 0 || hi > d->n || lo >= hi)
            return dt__fail(DT_ERR_INVALID, "model_instantiate: blocks [%d, %d) outside the model's %d blocks", lo,
                            hi, d->n);
        if (c > 0 && lo < bounds[2 * c - 1])
            return dt__fail(DT_ERR_INVALID, "model_instantiate: range [%d, %d) overlaps or precedes [%d, %d)", lo, hi,
                            bounds[2 * c - 2], bounds[2 * c - 1]);
    }
    return DT_OK;
}

static dt_status instantiate(const dt_model_desc *d, const int *bounds, int nchunks, bool external, float *values,
                             float *grads, dt_model **out)
{
    if (!out)
        return dt__fail(DT_ERR_INVALID, "model_instantiate: out is NULL");
    DT_CHECK(check_ranges(d, bounds, nchunks));
    int n = 0;
    for (int c = 0; c < nchunks; c++)
        n += bounds[2 * c + 1] - bounds[2 * c];
    dt_model *m = calloc(1, sizeof *m);
    dt_status s = m ? DT_OK : dt__fail(DT_ERR_NOMEM, "out of memory");
    if (s == DT_OK && (!(m->info = calloc((size_t)n, sizeof *m->info)) ||
                       !(m->first_param = calloc((size_t)n, sizeof(int))) ||
                       !(m->num_params = calloc((size_t)n, sizeof(int))) ||
                       !(m->chunks = calloc((size_t)nchunks, sizeof *m->chunks)) ||
                       !(m->chunk_lo = calloc((size_t)nchunks, sizeof(int))) ||
                       !(m->chunk_hi = calloc((size_t)nchunks, sizeof(int))) ||
                       !(m->hooks = calloc((size_t)nchunks, sizeof *m->hooks))))
        s = dt__fail(DT_ERR_NOMEM, "out of memory");
    if (s == DT_OK) {
        m->n = n;
        m->total = d->n;
        if (bounds[2 * nchunks - 1] == d->n)
            m->split = d->split;
        s = dt_params_create(&m->params);
    }
    int local = 0;
    for (int c = 0; s == DT_OK && c < nchunks; c++) {
        int lo = bounds[2 * c], hi = bounds[2 * c + 1];
        bool whole = lo == 0 && hi == d->n;
        char name[32];
        snprintf(name, sizeof name, nchunks > 1 ? "chunk %d" : "stage", c);
        s = dt_sequential_create(whole ? "model" : name, &m->chunks[c]);
        if (s != DT_OK)
            break;
        m->nchunks = c + 1;
        m->chunk_lo[c] = lo;
        m->chunk_hi[c] = hi;
        m->hooks[c] = (chunk_hook){m, local, lo};
        for (int i = lo; s == DT_OK && i < hi; i++, local++) {
            dt_layer *b = NULL;
            int before = dt_params_count(m->params);
            s = d->blocks[i].make(d, i, m->params, &b);
            if (s == DT_OK)
                s = dt_sequential_append(m->chunks[c], b);
            m->info[local] = d->blocks[i].info;
            m->first_param[local] = before;
            m->num_params[local] = dt_params_count(m->params) - before;
        }
    }
    if (s == DT_OK)
        s = external ? dt_params_finalize_external(m->params, values, grads) : dt_params_finalize(m->params);
    for (int c = 0; s == DT_OK && c < nchunks; c++)
        dt_sequential_set_hooks(m->chunks[c], model_hook, &m->hooks[c]);
    for (int k = 0; s == DT_OK && k < d->nshared; k++) {
        int idx = dt_params_find(m->params, d->shared[k].name);
        if (idx < 0)
            continue;
        dt_shared_param *sh = realloc(m->shared, (size_t)(m->nshared + 1) * sizeof *sh);
        if (!sh) {
            s = dt__fail(DT_ERR_NOMEM, "out of memory");
            break;
        }
        m->shared = sh;
        sh[m->nshared++] = (dt_shared_param){idx, d->shared[k].first, d->shared[k].last};
    }
    if (s != DT_OK) {
        dt_model_destroy(m);
        return s;
    }
    *out = m;
    return DT_OK;
}

dt_status dt_model_instantiate(const dt_model_desc *d, int lo, int hi, dt_model **out)
{
    return instantiate(d, (int[]){lo, hi}, 1, false, NULL, NULL, out);
}

dt_status dt_model_instantiate_chunks(const dt_model_desc *d, const int *bounds, int nchunks, dt_model **out)
{
    return instantiate(d, bounds, nchunks, false, NULL, NULL, out);
}

dt_status dt_model_instantiate_external(const dt_model_desc *d, int lo, int hi, float *values, float *grads,
                                        dt_model **out)
{
    return instantiate(d, (int[]){lo, hi}, 1, true, values, grads, out);
}

dt_status dt__build_whole(dt_status describe_status, dt_model_desc **d, dt_model **out)
{
    /* d is read here, after the describe call has filled it (arguments have
     * no evaluation order, so the caller passes its address) */
    dt_status s = describe_status == DT_OK ? dt_model_instantiate(*d, 0, (*d)->n, out) : describe_status;
    dt_model_desc_destroy(describe_status == DT_OK ? *d : NULL);
    return s;
}

/* ---- the instantiated model ---- */

dt_params *dt_model_params(dt_model *m) { return m->params; }
int dt_model_num_layers(const dt_model *m) { return m->n; }

void dt_model_block_range(const dt_model *m, int *lo, int *hi)
{
    *lo = m->chunk_lo[0];
    *hi = m->chunk_hi[m->nchunks - 1];
}

int dt_model_chunks(const dt_model *m) { return m->nchunks; }

void dt_model_chunk_range(const dt_model *m, int c, int *lo, int *hi)
{
    bool ok = c >= 0 && c < m->nchunks;
    *lo = ok ? m->chunk_lo[c] : 0;
    *hi = ok ? m->chunk_hi[c] : 0;
}

int dt_model_whole_blocks(const dt_model *m) { return m->total; }

const dt_block_info *dt_model_block(const dt_model *m, int i) { return i >= 0 && i < m->n ? &m->info[i] : NULL; }

void dt_model_block_params(const dt_model *m, int i, int *first, int *count)
{
    bool ok = i >= 0 && i < m->n;
    *first = ok ? m->first_param[i] : 0;
    *count = ok ? m->num_params[i] : 0;
}

int dt_model_shared_params(const dt_model *m, const dt_shared_param **out)
{
    *out = m->shared;
    return m->nshared;
}

dt_status dt_model_add_hook(dt_model *m, dt_block_hook hook, void *user, dt_subscription *token)
{
    if (!m) {
        if (token)
            *token = 0;
        return dt__fail(DT_ERR_INVALID, "model_add_hook: the model is NULL");
    }
    return dt__subs_add(&m->block_hooks, (dt__sub_fn)hook, user, token, "model_add_hook");
}

void dt_model_remove_hook(dt_model *m, dt_subscription token)
{
    if (m)
        dt__subs_remove(&m->block_hooks, token);
}

void dt_model_set_hooks(dt_model *m, dt_block_hook hook, void *user)
{
    dt__subs_remove(&m->block_hooks, m->legacy_hook);
    m->legacy_hook = 0;
    if (hook)
        dt_model_add_hook(m, hook, user, &m->legacy_hook);
}

dt_status dt_model_set_recompute(dt_model *m, int i, bool on)
{
    for (int c = 0; c < m->nchunks; c++) {
        int items = m->chunk_hi[c] - m->chunk_lo[c];
        if (i >= m->hooks[c].local && i < m->hooks[c].local + items)
            return dt_sequential_set_recompute(m->chunks[c], i - m->hooks[c].local, on);
    }
    return dt__fail(DT_ERR_INVALID, "recompute: the model holds no block %d (it has %d)", i, m->n);
}

dt_status dt_model_set_copies(dt_model *m, int i, int copies)
{
    for (int c = 0; c < m->nchunks; c++) {
        int items = m->chunk_hi[c] - m->chunk_lo[c];
        if (i >= m->hooks[c].local && i < m->hooks[c].local + items)
            return dt_sequential_set_copies(m->chunks[c], i - m->hooks[c].local, copies);
    }
    return dt__fail(DT_ERR_INVALID, "copies: the model holds no block %d (it has %d)", i, m->n);
}

dt_status dt_model_set_precision(dt_model *m, dt_dtype precision)
{
    if (precision != DT_F32 && precision != DT_BF16)
        return dt__fail(DT_ERR_INVALID, "model precision %s: only f32 and bf16 are supported",
                        dt_dtype_name(precision) ? dt_dtype_name(precision) : "(invalid dtype)");
    m->precision = precision;
    return DT_OK;
}

dt_dtype dt_model_precision(const dt_model *m) { return m->precision; }

void dt_model_init(dt_model *m, uint64_t seed)
{
    for (int c = 0; c < m->nchunks; c++)
        m->chunks[c]->ops->init(m->chunks[c], m->params, seed);
}

static dt_status check_chunk(const dt_model *m, int c, const char *what)
{
    if (c < 0 || c >= m->nchunks)
        return dt__fail(DT_ERR_INVALID, "%s: chunk %d of a model holding %d", what, c, m->nchunks);
    return DT_OK;
}

dt_status dt_model_to_device(dt_model *m, const dt_device *d)
{
    if (!m)
        return dt__fail(DT_ERR_INVALID, "model_to_device: the model is NULL");
    if (!d || d->host)
        return m->dev ? dt__fail(DT_ERR_INVALID, "model_to_device: the model is on %s already", m->dev->name) : DT_OK;
    DT_CHECK(dt_params_to_device(m->params, d));
    m->dev = d;
    return DT_OK;
}

const dt_device *dt_model_device(const dt_model *m) { return m && m->dev ? m->dev : &dt__cpu_ops; }

dt_status dt_model_forward_chunk(dt_model *m, int c, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    DT_CHECK(check_chunk(m, c, "model_forward_chunk"));
    ctx->params = m->params;
    ctx->compute = m->precision;
    ctx->ops = m->dev;
    ctx->input = x;
    if (!m->dev || m->chunk_lo[c] > 0)
        return m->chunks[c]->ops->forward(m->chunks[c], ctx, x, y);
    /* the model's input (token ids, features) comes from the host: copied
     * into the arena unless the prefetcher did it already (ctx->input_dev);
     * the layers that check it read ctx->input */
    dt_tensor xd = *x;
    if (ctx->input_dev) { /* the layers only read their input */
        xd.data = (float *)ctx->input_dev;
        return m->chunks[c]->ops->forward(m->chunks[c], ctx, &xd, y);
    }
    int64_t n = dt_tensor_numel(x);
    if (!(xd.data = dt_arena_alloc(ctx->arena, n)))
        return dt__fail(DT_ERR_NOMEM, "model_forward: out of activation memory on %s for the input", m->dev->name);
    DT_CHECK(m->dev->upload(xd.data, x->data, (size_t)n * sizeof(float)));
    return m->chunks[c]->ops->forward(m->chunks[c], ctx, &xd, y);
}

dt_status dt_model_backward_chunk(dt_model *m, int c, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx)
{
    DT_CHECK(check_chunk(m, c, "model_backward_chunk"));
    ctx->params = m->params;
    ctx->compute = m->precision;
    ctx->ops = m->dev;
    dt_tensor unused;
    return m->chunks[c]->ops->backward(m->chunks[c], ctx, dy, dx ? dx : &unused, dx != NULL);
}

static dt_status one_chunk(const dt_model *m, const char *what)
{
    if (m->nchunks != 1)
        return dt__fail(DT_ERR_INVALID, "%s: the model holds %d chunks of blocks (an interleaved pipeline rank's): "
                        "run each with dt_model_forward_chunk / dt_model_backward_chunk", what, m->nchunks);
    return DT_OK;
}

dt_status dt_model_forward(dt_model *m, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    DT_CHECK(one_chunk(m, "model_forward"));
    return dt_model_forward_chunk(m, 0, ctx, x, y);
}

dt_status dt_model_backward(dt_model *m, dt_ctx *ctx, const dt_tensor *dy)
{
    DT_CHECK(one_chunk(m, "model_backward"));
    dt_tensor dx;
    return dt_model_backward_chunk(m, 0, ctx, dy, m->chunk_lo[0] > 0 ? &dx : NULL);
}

dt_status dt_model_backward_dx(dt_model *m, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx)
{
    DT_CHECK(one_chunk(m, "model_backward_dx"));
    return dt_model_backward_chunk(m, 0, ctx, dy, dx);
}

void dt_model_destroy(dt_model *m)
{
    if (!m)
        return;
    for (int c = 0; m->chunks && c < m->nchunks; c++)
        dt_layer_destroy(m->chunks[c]);
    free(m->chunks);
    free(m->chunk_lo);
    free(m->chunk_hi);
    free(m->hooks);
    dt__subs_free(&m->block_hooks);
    dt_params_destroy(m->params);
    free(m->info);
    free(m->first_param);
    free(m->num_params);
    free(m->shared);
    if (m->dev)
        m->dev->free(m->dtargets);
    free(m);
}

void dt__desc_set_output_split(dt_model_desc *d, int64_t vocab, int64_t start, const dt_tp_group *tp)
{
    d->split = (output_split){vocab, start, *tp};
}

/* The vocabulary-parallel loss of a model on a device: its slice of the
 * logits comes to the host, the host's kernel runs (bitwise the cpu run's),
 * and the gradient goes back.  A copy of rows x classes / tp floats each
 * way per micro-batch: correct everywhere, a device kernel is the faster
 * form (docs/gpu.md). */
static dt_status loss_parallel_on_device(dt_model *m, const dt_tensor *out, const int32_t *targets, float *loss,
                                         dt_tensor *dout)
{
    size_t bytes = (size_t)dt_tensor_numel(out) * sizeof(float);
    dt_tensor h = *out, hg = dout ? *dout : *out;
    h.data = malloc(bytes ? bytes : 1);
    hg.data = dout ? malloc(bytes ? bytes : 1) : NULL;
    dt_status s = h.data && (!dout || hg.data) ? DT_OK
                  : dt__fail(DT_ERR_NOMEM, "model_loss: out of memory for a host copy of %zu bytes of logits", bytes);
    if (s == DT_OK)
        s = m->dev->download(h.data, out->data, bytes);
    if (s == DT_OK)
        s = dt_softmax_cross_entropy_parallel(&h, targets, m->split.vocab, m->split.start, &m->split.tp, loss,
                                              dout ? &hg : NULL);
    if (s == DT_OK && dout)
        s = m->dev->upload(dout->data, hg.data, bytes);
    free(h.data);
    free(hg.data);
    return s;
}

dt_status dt_model_loss(dt_model *m, const dt_tensor *out, const int32_t *targets, float *loss, dt_tensor *dout)
{
    return dt_model_loss_dev(m, out, targets, NULL, loss, dout);
}

dt_status dt_model_loss_dev(dt_model *m, const dt_tensor *out, const int32_t *targets, const int32_t *targets_dev,
                            float *loss, dt_tensor *dout)
{
    if (!m || !out || !targets || !loss)
        return dt__fail(DT_ERR_INVALID, "model_loss: %s is NULL",
                        !m ? "the model" : !out ? "the output" : !targets ? "targets" : "loss");
    if (m->split.tp.size && !m->dev)
        return dt_softmax_cross_entropy_parallel(out, targets, m->split.vocab, m->split.start, &m->split.tp, loss,
                                                 dout);
    if (m->split.tp.size)
        return loss_parallel_on_device(m, out, targets, loss, dout);
    if (!m->dev)
        return dt_softmax_cross_entropy(out, targets, loss, dout);
    /* on a device: the targets (host memory) are checked here and copied over */
    int64_t C = out->shape[out->ndim - 1], n = dt_tensor_numel(out) / C, counted = 0;
    DT_CHECK(dt__ce_count_targets(targets, n, C, &counted));
    if (targets_dev) /* the prefetcher uploaded them */
        return m->dev->xent(loss, dout ? dout->data : NULL, out->data, targets_dev, n, C, counted);
    if (n > m->dtargets_cap) {
        m->dev->free(m->dtargets);
        m->dtargets_cap = 0;
        if (!(m->dtargets = m->dev->alloc((size_t)n * sizeof *m->dtargets)))
            return dt__wrap(DT_ERR_NOMEM, "model_loss: targets on %s: ", m->dev->name);
        m->dtargets_cap = n;
    }
    DT_CHECK(m->dev->upload(m->dtargets, targets, (size_t)n * sizeof *targets));
    return m->dev->xent(loss, dout ? dout->data : NULL, out->data, m->dtargets, n, C, counted);
}
