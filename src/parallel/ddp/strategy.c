/* Data parallel as a strategy: gradient buckets start their allreduce during
 * the last micro-batch's backward (dt_ddp), and the update follows each
 * bucket as it lands, or waits for all of them when clipping needs the
 * global norm.  Dropout keys differ by rank, as the ranks' data do.  On a
 * device the buckets are the device's gradient buffer, reduced in place
 * (the communicator stages device pointers), and the update runs there. */
#include <stdlib.h>

#include "base/status.h"
#include "parallel/common/strategy.h"

static void ddp_before_backward(dt_strategy *s, int micro, int count)
{
    dt_ddp_set_sync(s->impl, micro == count - 1); /* communicate on the last micro-batch only */
}

static dt_status ddp_update(dt_strategy *s, float lr, float max_norm, float *norm)
{
    if (!s->cfg.tp || dt_comm_size(s->cfg.tp) == 1)
        return dt_ddp_step(s->impl, s->opt, lr, max_norm, norm);
    /* Tensor-parallel shards: the norm needs every bucket and the group. */
    DT_CHECK(dt_ddp_finish(s->impl));
    dt_params *p = dt_model_params(s->model);
    DT_CHECK(dt_params_reduce_tp_partial(p, s->cfg.tp)); /* sequence parallel: sums of the slices' parts */
    DT_CHECK(dt_clip_grad_norm_tp(p, max_norm, s->cfg.tp, norm));
    return dt_optimizer_step(s->opt, dt_params_device_values(p), dt_params_device_grads(p), dt_params_numel(p), lr);
}

static void ddp_timing(const dt_strategy *s, double *comm, double *exposed) { dt_ddp_last_timing(s->impl, comm, exposed); }

static void ddp_destroy(dt_strategy *s) { dt_ddp_destroy(s->impl); }

static const dt__strategy_ops ddp_ops = {
    .name = "ddp", .before_backward = ddp_before_backward, .update = ddp_update, .timing = ddp_timing, .destroy = ddp_destroy};

dt_status dt_strategy_ddp_create(dt_model *m, dt_optimizer *o, dt_comm *c, const dt_strategy_config *cfg,
                                 dt_strategy **out)
{
    if (!c)
        return dt__fail(DT_ERR_INVALID, "strategy ddp: the communicator is NULL");
    dt_strategy *s = NULL;
    DT_CHECK(dt__strategy_new(&ddp_ops, 0, m, o, cfg, &s));
    dt_ddp *d = NULL;
    dt_status st = dt_ddp_create(c, dt_model_params(m), &cfg->ddp, &d);
    if (st == DT_OK) {
        dt_ddp_set_accumulation(d, cfg->micro_batches);
        s->impl = d;
        s->key_group = (uint32_t)dt_comm_rank(c);
    }
    return dt__strategy_finish(s, st, out);
}
