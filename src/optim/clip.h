/* Gradient clipping on a compute backend (dt_clip_grad_norm's device form). */
#ifndef DT_OPTIM_CLIP_H
#define DT_OPTIM_CLIP_H

#include "tensor/backend.h"

/* torch's clip_grad_norm_ coefficient: max_norm / (norm + 1e-6) in f32
 * when max_norm > 0 and norm exceeds it, else 1 (also for a NaN norm).  A
 * clipping coefficient is always below 1, so `c != 1.0f` tells a clip.
 * Every clipping of the library computes it here, so that every strategy
 * clips to the same bits. */
static inline float dt__clip_coefficient(float norm, float max_norm)
{
    return max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6f) : 1.0f;
}

/* The L2 norm of grad[0..n) (the backend's memory); when max_norm > 0 and
 * the norm exceeds it, grad is scaled by max_norm / (norm + 1e-6) as torch's
 * clip_grad_norm_ does.  Waits for the norm (a host value). */
float dt__clip_grad_norm_on(const dt_compute_ops *ops, float *grad, int64_t n, float max_norm);

#endif
