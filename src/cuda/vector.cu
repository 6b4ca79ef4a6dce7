/* Element-wise vector entries and the sum of squares.
 *
 * Compiled with --fmad=false (CMakeLists.txt): y += alpha x rounds the
 * product and then the sum, as the cpu does (C11 mode contracts nothing), so
 * axpy, add, mul and scale give the cpu's bits.
 *
 * sumsq sums in double in two deterministic passes: a fixed grid of blocks
 * (SUMSQ_BLOCKS x SUMSQ_THREADS, independent of the GPU) each sums a strided
 * share and reduces it in a fixed tree, then one block adds the partials the
 * same way.  The cpu adds other groupings, also in double: the two differ
 * by at most about log2(n) 2^-53 relative (all terms are >= 0), far below
 * f32 resolution. */
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>

#include "cuda/common.cuh"
#include "cuda/ops.h"

#define THREADS 256

__global__ static void axpy_kernel(float *y, float alpha, const float *x, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += alpha * x[i];
}

__global__ static void add_kernel(float *y, const float *a, const float *b, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = a[i] + b[i];
}

__global__ static void mul_kernel(float *y, const float *a, const float *b, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = a[i] * b[i];
}

__global__ static void scale_kernel(float *x, float alpha, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= alpha;
}

void dt__cuda_axpy(float *y, float alpha, const float *x, int64_t n)
{
    if (n <= 0 || !dt__cuda_enter())
        return;
    axpy_kernel<<<dt__grid(n, THREADS), THREADS, 0, dt__stream()>>>(y, alpha, x, n);
    DT_CUDA_LAUNCHED();
}

void dt__cuda_add(float *y, const float *a, const float *b, int64_t n)
{
    if (n <= 0 || !dt__cuda_enter())
        return;
    add_kernel<<<dt__grid(n, THREADS), THREADS, 0, dt__stream()>>>(y, a, b, n);
    DT_CUDA_LAUNCHED();
}

void dt__cuda_mul(float *y, const float *a, const float *b, int64_t n)
{
    if (n <= 0 || !dt__cuda_enter())
        return;
    mul_kernel<<<dt__grid(n, THREADS), THREADS, 0, dt__stream()>>>(y, a, b, n);
    DT_CUDA_LAUNCHED();
}

void dt__cuda_scale(float *x, float alpha, int64_t n)
{
    if (n <= 0 || !dt__cuda_enter())
        return;
    scale_kernel<<<dt__grid(n, THREADS), THREADS, 0, dt__stream()>>>(x, alpha, n);
    DT_CUDA_LAUNCHED();
}

#define SUMSQ_BLOCKS 512
#define SUMSQ_THREADS 256

/* partial[b] = sum of x[i]^2 over i = b * threads + t (mod the grid's size). */
__global__ static void sumsq_partial(double *partial, const float *x, int64_t n)
{
    __shared__ double shared[32];
    double s = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        s += (double)x[i] * (double)x[i];
    s = dt__block_sum(s, shared);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s;
}

/* partial[SUMSQ_BLOCKS] = the sum of partial[0 .. SUMSQ_BLOCKS) (one block). */
__global__ static void sumsq_final(double *partial)
{
    __shared__ double shared[32];
    double s = 0;
    for (int i = threadIdx.x; i < SUMSQ_BLOCKS; i += blockDim.x)
        s += partial[i];
    s = dt__block_sum(s, shared);
    if (threadIdx.x == 0)
        partial[SUMSQ_BLOCKS] = s;
}

/* The partials, allocated once; the lock covers a whole call, from the
 * first kernel to the copy of the result. */
static pthread_mutex_t sumsq_lock = PTHREAD_MUTEX_INITIALIZER;
static double *sumsq_partials;

static double sumsq_locked(const float *x, int64_t n)
{
    if (!sumsq_partials && !DT_CUDA_CHECK(cudaMalloc(&sumsq_partials, (SUMSQ_BLOCKS + 1) * sizeof(double)))) {
        sumsq_partials = NULL;
        return NAN;
    }
    sumsq_partial<<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, dt__stream()>>>(sumsq_partials, x, n);
    if (!DT_CUDA_LAUNCHED())
        return NAN;
    sumsq_final<<<1, SUMSQ_THREADS, 0, dt__stream()>>>(sumsq_partials);
    if (!DT_CUDA_LAUNCHED())
        return NAN;
    double s = NAN;
    if (!DT_CUDA_CHECK(cudaMemcpyAsync(&s, sumsq_partials + SUMSQ_BLOCKS, sizeof s, cudaMemcpyDeviceToHost,
                                       dt__stream())) ||
        !DT_CUDA_CHECK(cudaStreamSynchronize(dt__stream())))
        return NAN;
    return s;
}

/* A failure returns NaN (and is reported by the next status-returning entry). */
double dt__cuda_sumsq(const float *x, int64_t n)
{
    if (!dt__cuda_enter())
        return NAN;
    if (n <= 0)
        return 0;
    pthread_mutex_lock(&sumsq_lock);
    double s = sumsq_locked(x, n);
    pthread_mutex_unlock(&sumsq_lock);
    return s;
}
