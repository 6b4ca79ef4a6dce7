/* The step every strategy shares: zero the gradients, then for each
 * micro-batch take the input, forward, loss and backward on a fresh context
 * keyed by (seed, step, micro-batch, rank), then the strategy's update.
 * Single-process training is the simplest strategy: no communication, local
 * clipping, one optimizer step. */
#include <math.h>
#include <stdlib.h>

#include "base/clock.h"
#include "base/status.h"
#include "parallel/common/strategy.h"

static dt_status strategy_init(dt_strategy *s, dt_model *m, dt_optimizer *o, const dt_strategy_config *cfg)
{
    if (!m || (!o && !s->ops->no_optimizer) || !cfg)
        return dt__fail(DT_ERR_INVALID, "strategy: %s is NULL",
                        !m ? "the model" : !o && !s->ops->no_optimizer ? "the optimizer" : "the config");
    if (cfg->micro_batches < 1 || !(cfg->grad_clip >= 0))
        return dt__fail(DT_ERR_INVALID, "strategy: micro_batches %d (>= 1), grad_clip %g (>= 0)", cfg->micro_batches,
                        cfg->grad_clip);
    s->model = m;
    s->opt = o;
    s->cfg = *cfg;
    return dt_arena_create_on(dt_model_device(m), &s->arena); /* the activations live where the model runs */
}

dt_status dt__strategy_new(const dt__strategy_ops *ops, size_t impl_size, dt_model *m, dt_optimizer *o,
                           const dt_strategy_config *cfg, dt_strategy **out)
{
    dt_strategy *s = calloc(1, sizeof *s);
    void *impl = impl_size ? calloc(1, impl_size) : NULL;
    if (!s || (impl_size && !impl)) {
        free(s);
        free(impl);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    s->ops = ops;
    s->impl = impl;
    return dt__strategy_finish(s, strategy_init(s, m, o, cfg), out);
}

dt_status dt__strategy_finish(dt_strategy *s, dt_status st, dt_strategy **out)
{
    if (st != DT_OK)
        dt_strategy_destroy(s);
    else
        *out = s;
    return st;
}

static dt_status micro_step(dt_strategy *s, int64_t step, int micro, const dt_micro_batch *mb, float *loss)
{
    if (micro > 0)
        dt_arena_reset(s->arena); /* the step reset it for the first */
    dt_ctx ctx = {.arena = s->arena,
                  .key = {s->cfg.seed, (uint64_t)step, (uint32_t)micro, s->key_group},
                  .training = true,
                  .reclaim = true, /* one micro-batch at a time on this arena */
                  .input_dev = mb->x_dev};
    dt_tensor out;
    DT_CHECK(dt_model_forward(s->model, &ctx, &mb->x, &out));
    dt_tensor g = out;
    if (!(g.data = dt_arena_alloc(s->arena, dt_tensor_numel(&out))))
        return dt__fail(DT_ERR_NOMEM, "out of memory for the output gradient");
    DT_CHECK(dt_model_loss_dev(s->model, &out, mb->targets, mb->targets_dev, loss, &g));
    if (s->ops->before_backward)
        s->ops->before_backward(s, micro, s->cfg.micro_batches);
    return dt_model_backward(s->model, &ctx, &g);
}

dt_status dt_strategy_step(dt_strategy *s, int64_t step, float lr, dt_next_batch_fn next, void *user,
                           dt_step_stats *out)
{
    if (!s || !next)
        return dt__fail(DT_ERR_INVALID, "strategy_step: %s is NULL", s ? "the batch source" : "the strategy");
    dt_step_stats st = {0};
    dt_params_zero_grads(dt_model_params(s->model));
    if (s->ops->step) {
        dt_status r = s->ops->step(s, step, lr, next, user, &st);
        if (r == DT_OK && out)
            *out = st;
        return r;
    }
    dt_arena_reset(s->arena); /* the last step's activations do not count in this step's peak */
    dt_arena_reset_peak(s->arena);
    int64_t t0 = dt__now_ns();
    for (int micro = 0; micro < s->cfg.micro_batches; micro++) {
        dt_micro_batch mb = {0};
        float l = 0;
        DT_CHECK(next(user, &mb));
        DT_CHECK(micro_step(s, step, micro, &mb, &l));
        st.loss += l / (float)s->cfg.micro_batches;
    }
    st.busy_s = (double)(dt__now_ns() - t0) / 1e9;
    st.micro_in_flight = 1;
    DT_CHECK(s->ops->update(s, lr, s->cfg.grad_clip, &st.grad_norm));
    if (s->ops->timing)
        s->ops->timing(s, &st.comm_s, &st.exposed_s);
    st.activation_bytes = dt_arena_peak_bytes(s->arena);
    if (out)
        *out = st;
    return DT_OK;
}

dt_status dt_strategy_sync(dt_strategy *s)
{
    if (!s)
        return dt__fail(DT_ERR_INVALID, "strategy_sync: the strategy is NULL");
    return s->ops->sync ? s->ops->sync(s) : DT_OK;
}

const char *dt_strategy_name(const dt_strategy *s) { return s ? s->ops->name : "(none)"; }

size_t dt_strategy_memory_bytes(const dt_strategy *s, size_t *buffers)
{
    size_t none = 0;
    buffers = buffers ? buffers : &none;
    *buffers = 0;
    return s && s->ops->memory ? s->ops->memory(s, buffers) : 0;
}

void dt_strategy_io_bytes(const dt_strategy *s, dt_strategy_io *out)
{
    *out = (dt_strategy_io){0};
    if (s && s->ops && s->ops->io)
        s->ops->io(s, out);
}

void dt_strategy_destroy(dt_strategy *s)
{
    if (!s)
        return;
    if (s->ops && s->ops->destroy)
        s->ops->destroy(s);
    dt_arena_destroy(s->arena);
    if (s->run) /* built by dt_strategy_create: it owns the model, the optimizer and the groups */
        s->run->release(s->run, s->model, s->opt);
    free(s);
}

/* ---- single process ---- */

static dt_status single_update(dt_strategy *s, float lr, float max_norm, float *norm)
{
    /* summed over micro-batches: their mean, as data parallel takes it; a
     * row-sparse table's untouched rows are left alone */
    float scale = s->cfg.micro_batches > 1 ? 1.0f / (float)s->cfg.micro_batches : 1.0f;
    return dt_params_optimizer_step(dt_model_params(s->model), s->opt, lr, scale, max_norm, norm);
}

static const dt__strategy_ops single_ops = {.name = "single", .update = single_update};

dt_status dt_strategy_single_create(dt_model *m, dt_optimizer *o, const dt_strategy_config *cfg, dt_strategy **out)
{
    return dt__strategy_new(&single_ops, 0, m, o, cfg, out);
}
