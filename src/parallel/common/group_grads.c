/* Gradient operations over a group of ranks that each hold part of the
 * model: the global norm for clipping (tensor, pipeline and ZeRO shards each
 * count their own elements once), and the sum of a tied parameter's copies
 * between the pipeline stages that hold them.  The registry's gradients are
 * where it lives (dt_params_device): every touch of their memory goes
 * through that device's entries, the norm's sum of squares comes back as a
 * host value. */
#include <math.h>
#include <stdlib.h>

#include "base/status.h"
#include "dtrain/parallel.h"
#include "optim/clip.h"
#include "parallel/common/strategy.h"
#include "tensor/backend.h"

dt_status dt_clip_grad_norm_group(float *grad, int64_t n, float max_norm, dt_comm *group, float *norm)
{
    if ((n > 0 && !grad) || n < 0)
        return dt__fail(DT_ERR_INVALID, "clip_grad_norm_group: %lld gradients at %p", (long long)n, (void *)grad);
    double sumsq = n ? dt_vec_sumsq(grad, n) : 0.0;
    if (group)
        DT_CHECK(dt_allreduce(&sumsq, &sumsq, 1, DT_F64, DT_SUM, group));
    float total = (float)sqrt(sumsq);
    if (norm)
        *norm = total;
    float c = dt__clip_coefficient(total, max_norm); /* torch's clip_grad_norm_ */
    if (c != 1.0f && n)
        dt_vec_scale(grad, c, n);
    return DT_OK;
}

/* The sum of squares of p's gradients this rank contributes: a shard's
 * whole, a replica's 1/t share (the t replicas add up to one), nothing for
 * the parameters in `skip` (NULL: none). */
static double sumsq_share(dt_params *p, int t, const bool *skip)
{
    const dt_compute_ops *ops = dt_params_device(p);
    double shards = 0, replicas = 0;
    for (int i = 0; i < dt_params_count(p); i++) {
        if (skip && skip[i])
            continue;
        const dt_param_info *in = dt_params_info(p, i);
        double sq = ops->sumsq(dt_param_grad(p, i), in->numel);
        if (in->parts > 1)
            shards += sq;
        else
            replicas += sq;
    }
    return shards + replicas / t;
}

static dt_status clip_by(dt_params *p, double sumsq, float max_norm, float *norm)
{
    float total = (float)sqrt(sumsq);
    if (norm)
        *norm = total;
    float c = dt__clip_coefficient(total, max_norm);
    const dt_compute_ops *ops = dt_params_device(p);
    if (c != 1.0f)
        for (int i = 0; i < dt_params_count(p); i++)
            ops->scale(dt_param_grad(p, i), c, dt_params_info(p, i)->numel);
    return DT_OK;
}

dt_status dt_clip_grad_norm_tp(dt_params *p, float max_norm, dt_comm *tp, float *norm)
{
    if (!p)
        return dt__fail(DT_ERR_INVALID, "clip_grad_norm_tp: the registry is NULL");
    int t = tp ? dt_comm_size(tp) : 1;
    double sumsq = sumsq_share(p, t, NULL);
    if (tp && t > 1)
        DT_CHECK(dt_allreduce(&sumsq, &sumsq, 1, DT_F64, DT_SUM, tp));
    return clip_by(p, sumsq, max_norm, norm);
}

static bool holds_block(const dt_model *m, int block)
{
    for (int c = 0; c < dt_model_chunks(m); c++) {
        int lo, hi;
        dt_model_chunk_range(m, c, &lo, &hi);
        if (block >= lo && block < hi)
            return true;
    }
    return false;
}

dt_status dt_clip_grad_norm_stages(dt_model *m, float max_norm, dt_comm *tp, dt_comm *stages, float *norm)
{
    if (!m)
        return dt__fail(DT_ERR_INVALID, "clip_grad_norm_stages: the model is NULL");
    dt_params *p = dt_model_params(m);
    bool *skip = calloc((size_t)dt_params_count(p) + 1, sizeof *skip);
    if (!skip)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    const dt_shared_param *sh;
    int n = dt_model_shared_params(m, &sh);
    for (int k = 0; k < n; k++) /* a tied copy counts on the stage of its first user only */
        skip[sh[k].param] = !holds_block(m, sh[k].first_block);
    int t = tp ? dt_comm_size(tp) : 1;
    double sumsq = sumsq_share(p, t, skip);
    free(skip);
    if (tp && t > 1)
        DT_CHECK(dt_allreduce(&sumsq, &sumsq, 1, DT_F64, DT_SUM, tp));
    if (stages && dt_comm_size(stages) > 1)
        DT_CHECK(dt_allreduce(&sumsq, &sumsq, 1, DT_F64, DT_SUM, stages));
    return clip_by(p, sumsq, max_norm, norm);
}

dt_status dt__grad_norm_weights(dt_model *m, int t, float **out)
{
    dt_params *p = dt_model_params(m);
    float *w = malloc(((size_t)dt_params_count(p) + 1) * sizeof *w);
    if (!w)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < dt_params_count(p); i++)
        w[i] = dt_params_info(p, i)->parts > 1 ? 1.0f : 1.0f / (float)t;
    const dt_shared_param *sh;
    int n = dt_model_shared_params(m, &sh);
    for (int k = 0; k < n; k++) /* as dt_clip_grad_norm_stages */
        if (!holds_block(m, sh[k].first_block))
            w[sh[k].param] = 0;
    *out = w;
    return DT_OK;
}

dt_status dt_params_reduce_tp_partial(dt_params *p, dt_comm *tp)
{
    if (!p)
        return dt__fail(DT_ERR_INVALID, "params_reduce_tp_partial: the registry is NULL");
    for (int i = 0; tp && i < dt_params_count(p); i++) {
        const dt_param_info *in = dt_params_info(p, i);
        if (in->tp_partial) {
            float *g = dt_param_grad(p, i);
            DT_CHECK(dt_allreduce(g, g, (size_t)in->numel, DT_F32, DT_SUM, tp));
        }
    }
    return DT_OK;
}

dt_status dt_model_reduce_shared(dt_model *m, dt_comm *stages)
{
    if (!m || !stages)
        return dt__fail(DT_ERR_INVALID, "model_reduce_shared: %s is NULL", m ? "the communicator" : "the model");
    const dt_shared_param *sh;
    int n = dt_model_shared_params(m, &sh);
    dt_params *p = dt_model_params(m);
    for (int i = 0; i < n; i++) {
        float *g = dt_param_grad(p, sh[i].param);
        DT_CHECK(dt_allreduce(g, g, (size_t)dt_params_info(p, sh[i].param)->numel, DT_F32, DT_SUM, stages));
    }
    return DT_OK;
}
