/* The two entries of dp_sync.h: data parallelism's allreduce and ZeRO. */
#include <stdlib.h>

#include "base/status.h"
#include "parallel/common/dp_sync.h"
#include "parallel/zero/internal.h"
#include "tensor/backend.h"

/* ---- allreduce (dt_ddp) ---- */

typedef struct {
    dt_ddp *ddp; /* NULL: dp has one rank */
} allreduce;

static void allreduce_before_backward(void *impl, bool last)
{
    allreduce *A = impl;
    if (A->ddp)
        dt_ddp_set_sync(A->ddp, last); /* buckets start during the last backward */
}

static dt_status allreduce_update(void *impl, dt_strategy *s, dt_comm *stages, dt_comm *tied, float lr, float *norm,
                                  double *comm, double *exposed)
{
    allreduce *A = impl;
    dt_params *p = dt_model_params(s->model);
    *comm = *exposed = 0;
    if (A->ddp) {
        DT_CHECK(dt_ddp_finish(A->ddp)); /* the mean over micro-batches and replicas */
        dt_ddp_last_timing(A->ddp, comm, exposed);
    } else if (s->cfg.micro_batches > 1)
        dt_params_device(p)->scale(dt_params_device_grads(p), 1.0f / (float)s->cfg.micro_batches,
                                   dt_params_numel(p));
    DT_CHECK(dt_params_reduce_tp_partial(p, s->cfg.tp));
    if (tied)
        DT_CHECK(dt_model_reduce_shared(s->model, tied));
    DT_CHECK(dt_clip_grad_norm_stages(s->model, s->cfg.grad_clip, s->cfg.tp, stages, norm));
    return dt_optimizer_step(s->opt, dt_params_device_values(p), dt_params_device_grads(p), dt_params_numel(p), lr);
}

static void allreduce_destroy(void *impl)
{
    allreduce *A = impl;
    if (A)
        dt_ddp_destroy(A->ddp);
    free(A);
}

static const dt__dp_sync_ops allreduce_ops = {.name = "allreduce",
                                              .before_backward = allreduce_before_backward,
                                              .update = allreduce_update,
                                              .destroy = allreduce_destroy};

dt_status dt__dp_sync_allreduce(dt_model *m, dt_comm *dp, const dt_strategy_config *cfg, dt__dp_sync *out)
{
    allreduce *A = calloc(1, sizeof *A);
    if (!A)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    if (dp && dt_comm_size(dp) > 1) {
        dt_status st = dt_ddp_create(dp, dt_model_params(m), &cfg->ddp, &A->ddp);
        if (st != DT_OK) {
            free(A);
            return st;
        }
        dt_ddp_set_accumulation(A->ddp, cfg->micro_batches);
    }
    *out = (dt__dp_sync){&allreduce_ops, A};
    return DT_OK;
}

/* ---- ZeRO (a deferred ZeRO strategy over the same model) ---- */

static dt_status zero_update(void *impl, dt_strategy *s, dt_comm *stages, dt_comm *tied, float lr, float *norm,
                             double *comm, double *exposed)
{
    (void)stages; /* the ZeRO strategy was made with them */
    dt_strategy *z = impl;
    if (tied) /* before the reduce-scatter: a unit of this stage is not one of the other's */
        DT_CHECK(dt_model_reduce_shared(s->model, tied));
    DT_CHECK(z->ops->update(z, lr, s->cfg.grad_clip, norm));
    z->ops->timing(z, comm, exposed);
    return DT_OK;
}

static dt_status zero_sync(void *impl) { return dt_strategy_sync(impl); }

static size_t zero_memory(const void *impl, size_t *buffers) { return dt_strategy_memory_bytes(impl, buffers); }

static void zero_destroy(void *impl) { dt_strategy_destroy(impl); }

static const dt__dp_sync_ops zero_ops = {
    .name = "zero", .update = zero_update, .sync = zero_sync, .memory = zero_memory, .destroy = zero_destroy};

dt_status dt__dp_sync_zero(dt_model *m, dt_optimizer *o, dt_comm *dp, int stage, dt_comm *stages,
                           const dt_strategy_config *cfg, dt__dp_sync *out)
{
    if (!dp)
        return dt__fail(DT_ERR_INVALID, "zero in a pipeline: the dp group is NULL");
    if (stage != 1 && stage != 2)
        return dt__fail(DT_ERR_INVALID, "zero in a pipeline: zero_stage %d with tp/pp is not built: use 1 or 2", stage);
    dt_strategy *z = NULL;
    DT_CHECK(dt__strategy_zero_make(m, o, dp, stage, cfg, stages, true, &z));
    *out = (dt__dp_sync){&zero_ops, z};
    return DT_OK;
}

void dt__dp_sync_destroy(dt__dp_sync *d)
{
    if (d && d->ops && d->ops->destroy)
        d->ops->destroy(d->impl);
    if (d)
        *d = (dt__dp_sync){0};
}
