/* GELU (tanh approximation) and ReLU, element-wise.
 *
 * Every expression is the cpu's (src/nn/activations.c), in its order, and
 * this file is compiled with --fmad=false (CMakeLists.txt) so products round
 * before sums as there.  ReLU gives the cpu's bits.  GELU's tanhf is CUDA's
 * (at most 2 ulp) where the cpu has glibc's vectorised one (-ffast-math):
 * t and y may differ from the cpu's by a few ulp.
 *
 * The bf16 entries (gelu_fwd_bf16, gelu_bwd_bf16) keep no t: the backward
 * recomputes it with the same expression, so their y and dx are bitwise the
 * f32 pair's, for one tensor less in memory and in traffic (GPT-2: 8192 x
 * 3072 floats a layer). */
#include <cuda_runtime.h>
#include <math.h>

#include "cuda/common.cuh"
#include "cuda/ops.h"

#define THREADS 256
#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

__global__ static void gelu_fwd_kernel(float *y, float *t, const float *x, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float xi = x[i];
        float ti = tanhf(GELU_K * (xi + GELU_C * xi * xi * xi));
        t[i] = ti;
        y[i] = 0.5f * xi * (1.0f + ti);
    }
}

__global__ static void gelu_bwd_kernel(float *dx, const float *dy, const float *x, const float *t, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float xi = x[i], ti = t[i];
        float du = GELU_K * (1.0f + 3.0f * GELU_C * xi * xi);
        dx[i] = dy[i] * (0.5f * (1.0f + ti) + 0.5f * xi * (1.0f - ti * ti) * du);
    }
}

__device__ static inline float gelu_tanh(float xi) { return tanhf(GELU_K * (xi + GELU_C * xi * xi * xi)); }

__global__ static void gelu_fwd_nt_kernel(float *y, const float *x, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float xi = x[i];
        y[i] = 0.5f * xi * (1.0f + gelu_tanh(xi));
    }
}

__global__ static void gelu_bwd_nt_kernel(float *dx, const float *dy, const float *x, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float xi = x[i], ti = gelu_tanh(xi);
        float du = GELU_K * (1.0f + 3.0f * GELU_C * xi * xi);
        dx[i] = dy[i] * (0.5f * (1.0f + ti) + 0.5f * xi * (1.0f - ti * ti) * du);
    }
}

__global__ static void relu_fwd_kernel(float *y, const float *x, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = x[i] > 0 ? x[i] : 0;
}

__global__ static void relu_bwd_kernel(float *dx, const float *dy, const float *x, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dx[i] = x[i] > 0 ? dy[i] : 0;
}

void dt__cuda_gelu_fwd(float *y, float *t, const float *x, int64_t n)
{
    if (n <= 0 || !dt__cuda_enter())
        return;
    gelu_fwd_kernel<<<dt__grid(n, THREADS), THREADS, 0, dt__stream()>>>(y, t, x, n);
    DT_CUDA_LAUNCHED();
}

void dt__cuda_gelu_bwd(float *dx, const float *dy, const float *x, const float *t, int64_t n)
{
    if (n <= 0 || !dt__cuda_enter())
        return;
    gelu_bwd_kernel<<<dt__grid(n, THREADS), THREADS, 0, dt__stream()>>>(dx, dy, x, t, n);
    DT_CUDA_LAUNCHED();
}

bool dt__cuda_gelu_fwd_bf16(float *y, const float *x, int64_t n)
{
    if (n <= 0 || !dt__cuda_enter())
        return true; /* (a failure to enter is recorded for the next status) */
    gelu_fwd_nt_kernel<<<dt__grid(n, THREADS), THREADS, 0, dt__stream()>>>(y, x, n);
    DT_CUDA_LAUNCHED();
    return true;
}

bool dt__cuda_gelu_bwd_bf16(float *dx, const float *dy, const float *x, int64_t n)
{
    if (n <= 0 || !dt__cuda_enter())
        return true;
    gelu_bwd_nt_kernel<<<dt__grid(n, THREADS), THREADS, 0, dt__stream()>>>(dx, dy, x, n);
    DT_CUDA_LAUNCHED();
    return true;
}

void dt__cuda_relu_fwd(float *y, const float *x, int64_t n)
{
    if (n <= 0 || !dt__cuda_enter())
        return;
    relu_fwd_kernel<<<dt__grid(n, THREADS), THREADS, 0, dt__stream()>>>(y, x, n);
    DT_CUDA_LAUNCHED();
}

void dt__cuda_relu_bwd(float *dx, const float *dy, const float *x, int64_t n)
{
    if (n <= 0 || !dt__cuda_enter())
        return;
    relu_bwd_kernel<<<dt__grid(n, THREADS), THREADS, 0, dt__stream()>>>(dx, dy, x, n);
    DT_CUDA_LAUNCHED();
}
