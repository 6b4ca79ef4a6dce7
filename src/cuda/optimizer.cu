/* The optimizers' element-wise updates: src/optim/optimizer.c's adamw_range
 * and sgd_range, expression for expression and in the same order.  With
 * --fmad=false (CMakeLists.txt) every product and sum rounds on its own, as
 * in the cpu's C11 build, and sqrtf and division are IEEE round-to-nearest
 * on both (nvcc's defaults -prec-sqrt=true -prec-div=true): the same bits. */
#include <cuda_runtime.h>
#include <math.h>

#include "cuda/common.cuh"
#include "cuda/ops.h"

#define THREADS 256

__global__ static void adamw_kernel(float *p, const float *g, float *m, float *v, int64_t n, float lr,
                                    float weight_decay, float beta1, float beta2, float eps, float bc1,
                                    float bc2_sqrt)
{
    const float step_size = lr / bc1, decay = 1.0f - lr * weight_decay;
    const float one_b1 = 1.0f - beta1, b2 = beta2, one_b2 = 1.0f - beta2;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float gi = g[i], pi = p[i] * decay;
        float mi = m[i] + (gi - m[i]) * one_b1;
        float vi = v[i] * b2 + one_b2 * gi * gi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = pi - step_size * mi / denom;
        m[i] = mi;
        v[i] = vi;
    }
}

/* mu = 0: p -= lr d (buf unused). */
__global__ static void sgd_plain_kernel(float *p, const float *g, int64_t n, float lr, float wd)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        p[i] -= lr * (wd != 0 ? g[i] + wd * p[i] : g[i]);
}

__global__ static void sgd_momentum_kernel(float *p, const float *g, float *buf, int64_t n, float lr, float wd,
                                           float mu, bool nesterov, bool first)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float d = wd != 0 ? g[i] + wd * p[i] : g[i];
        float b = first ? d : mu * buf[i] + d;
        buf[i] = b;
        p[i] -= lr * (nesterov ? d + mu * b : b);
    }
}

void dt__cuda_adamw(float *p, const float *g, float *m, float *v, int64_t n, float lr, float weight_decay,
                    float beta1, float beta2, float eps, float bc1, float bc2_sqrt)
{
    if (n <= 0 || !dt__cuda_enter())
        return;
    adamw_kernel<<<dt__grid(n, THREADS), THREADS, 0, dt__stream()>>>(p, g, m, v, n, lr, weight_decay, beta1, beta2,
                                                                     eps, bc1, bc2_sqrt);
    DT_CUDA_LAUNCHED();
}

void dt__cuda_sgd(float *p, const float *g, float *buf, int64_t n, float lr, float weight_decay, float momentum,
                  bool nesterov, bool first)
{
    if (n <= 0 || !dt__cuda_enter())
        return;
    if (momentum == 0)
        sgd_plain_kernel<<<dt__grid(n, THREADS), THREADS, 0, dt__stream()>>>(p, g, n, lr, weight_decay);
    else
        sgd_momentum_kernel<<<dt__grid(n, THREADS), THREADS, 0, dt__stream()>>>(p, g, buf, n, lr, weight_decay,
                                                                                momentum, nesterov, first);
    DT_CUDA_LAUNCHED();
}
