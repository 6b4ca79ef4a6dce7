#include <math.h>

#include "dtrain/optim.h"
#include "dtrain/tensor.h"
#include "optim/clip.h"

float dt_lr_at(const dt_lr_schedule *s, int64_t step)
{
    if (s->warmup_steps > 0 && step < s->warmup_steps)
        return s->base_lr * (float)(step + 1) / (float)s->warmup_steps;
    if (s->kind == DT_LR_CONSTANT)
        return s->base_lr;
    int64_t span = s->total_steps - s->warmup_steps;
    double progress = span > 0 ? (double)(step - s->warmup_steps) / (double)span : 1.0;
    if (progress > 1.0)
        progress = 1.0;
    return s->min_lr + (float)(0.5 * (s->base_lr - s->min_lr) * (1.0 + cos(M_PI * progress)));
}

float dt_clip_grad_norm(float *grad, int64_t n, float max_norm)
{
    float norm = (float)sqrt(dt_vec_sumsq(grad, n)), c = dt__clip_coefficient(norm, max_norm);
    if (c != 1.0f)
        dt_vec_scale(grad, c, n);
    return norm;
}

float dt__clip_grad_norm_on(const dt_compute_ops *ops, float *grad, int64_t n, float max_norm)
{
    float norm = (float)sqrt(ops->sumsq(grad, n)), c = dt__clip_coefficient(norm, max_norm);
    if (c != 1.0f)
        ops->scale(grad, c, n);
    return norm;
}
