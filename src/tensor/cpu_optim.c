/* The cpu backend's optimizer updates over one flat range, in the operation
 * order of PyTorch's single-tensor implementations (src/optim/optimizer.c
 * splits a step into ranges over the compute threads and calls these).
 * Every setting is a local and the arrays restrict, so the loops vectorise
 * (-O3, sqrtf without errno: CMakeLists.txt). */
#include <math.h>

#include "tensor/cpu_kernels.h"

void dt__cpu_adamw(float *restrict p, const float *restrict g, float *restrict m, float *restrict v, int64_t n, float lr,
                   float weight_decay, float beta1, float beta2, float eps, float bc1, float bc2_sqrt)
{
    const float step_size = lr / bc1, decay = 1.0f - lr * weight_decay;
    const float one_b1 = 1.0f - beta1, b2 = beta2, one_b2 = 1.0f - beta2, bc2 = bc2_sqrt;
    for (int64_t i = 0; i < n; i++) {
        p[i] *= decay;
        m[i] += (g[i] - m[i]) * one_b1;
        v[i] = v[i] * b2 + one_b2 * g[i] * g[i];
        float denom = sqrtf(v[i]) / bc2 + eps;
        p[i] -= step_size * m[i] / denom;
    }
}

void dt__cpu_sgd(float *restrict p, const float *restrict g, float *restrict buf, int64_t n, float lr, float wd,
                 float mu, bool nesterov, bool first)
{
    if (mu == 0) {
        for (int64_t i = 0; i < n; i++)
            p[i] -= lr * (wd != 0 ? g[i] + wd * p[i] : g[i]);
        return;
    }
    if (first) {
        for (int64_t i = 0; i < n; i++) {
            float d = wd != 0 ? g[i] + wd * p[i] : g[i];
            buf[i] = d;
            p[i] -= lr * (nesterov ? d + mu * buf[i] : buf[i]);
        }
        return;
    }
    if (wd == 0 && !nesterov) { /* the common case, vectorised */
        for (int64_t i = 0; i < n; i++) {
            buf[i] = mu * buf[i] + g[i];
            p[i] -= lr * buf[i];
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float d = wd != 0 ? g[i] + wd * p[i] : g[i];
        buf[i] = mu * buf[i] + d;
        p[i] -= lr * (nesterov ? d + mu * buf[i] : buf[i]);
    }
}
