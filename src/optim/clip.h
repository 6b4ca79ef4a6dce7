/* Gradient clipping on a compute backend (dt_clip_grad_norm's device form). */
#ifndef DT_OPTIM_CLIP_H
#define DT_OPTIM_CLIP_H

#include "tensor/backend.h"

/* The L2 norm of grad[0..n) (the backend's memory); when max_norm > 0 and
 * the norm exceeds it, grad is scaled by max_norm / (norm + 1e-6) as torch's
 * clip_grad_norm_ does.  Waits for the norm (a host value). */
float dt__clip_grad_norm_on(const dt_compute_ops *ops, float *grad, int64_t n, float max_norm);

#endif
