/* Mean softmax cross-entropy over the rows whose target is not -1, one block
 * per row (src/nn/loss.c's formulas).
 *
 * Per row, two passes over the logits (the cpu takes three):
 *   1. online softmax: each thread keeps the max m of its share of the row
 *      and s = sum exp(z - m) in f32, rescaling s when m grows (four
 *      values at a time when the rows are 16-byte aligned); then the row's
 *      max M over the threads, and sum = the threads' s exp(m - M) added in
 *      double by a fixed tree; lse = log(sum) + M and the row's loss
 *      lse - z[target] in double;
 *   2. dlogits = expf(z - lse) / counted - onehot / counted, the difference
 *      z - lse taken in double (then rounded), so its rounding does not
 *      scale with |z|.
 * The cpu sums exp in double, in class order, with glibc's exp: the loss
 * agrees to about 1e-7 relative and each gradient element to a few f32
 * roundings (f32 exp: 2 ulp).  The row losses come back to the host and are
 * summed there in row order, as on the cpu.
 *
 * Cost before (three passes, exp in double): 2.8 ms for 8192 x 50304 with
 * dlogits on an H200 (ncu, bench/gpu/logs/2026-11-28-c1a4e18), 1.2 TB/s.
 * The two-pass kernel's time comes from the next GPU log (ncu-step.txt). */
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda/common.cuh"
#include "cuda/ops.h"

/* One logit into a thread's running (m, s).  A NaN makes s NaN (as on the
 * cpu); -inf logits add nothing, also while m is still -inf. */
__device__ static inline void take(float &m, float &s, float z)
{
    if (z > m) {
        s *= expf(m - z); /* m = -inf: s is 0 and stays 0 */
        m = z;
    }
    if (m != -INFINITY)
        s += expf(z - m);
}

__device__ static inline void take4(float &m, float &s, float4 v)
{
    float most = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)); /* (fmaxf passes over a NaN: the sum below catches it) */
    if (most > m) {
        s *= expf(m - most);
        m = most;
    }
    if (m != -INFINITY)
        s += (expf(v.x - m) + expf(v.y - m)) + (expf(v.z - m) + expf(v.w - m));
}

__device__ static inline float grad(float z, double lse, float scale, bool is_target)
{
    return expf((float)((double)z - lse)) * scale - (is_target ? scale : 0.0f);
}

/* VEC: classes % 4 == 0 and logits (and dlogits) 16-byte aligned, so every
 * row is read and written as float4. */
template <bool VEC>
__global__ static void xent_rows(double *row_loss, float *dlogits, const float *logits, const int32_t *targets,
                                 int64_t rows, int64_t classes, float scale)
{
    __shared__ float fshared[32];
    __shared__ double dshared[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *z = logits + r * classes;
        float *g = dlogits ? dlogits + r * classes : NULL;
        int32_t target = targets[r]; /* the same for the whole block: the branches below do not diverge */
        if (target == -1) {
            for (int64_t c = threadIdx.x; g && c < classes; c += blockDim.x)
                g[c] = 0;
            if (threadIdx.x == 0)
                row_loss[r] = 0;
            continue;
        }
        float zt = z[target]; /* read before any thread writes g, which may be the logits themselves */
        float m = -INFINITY, s = 0.0f;
        if (VEC) {
            const float4 *z4 = (const float4 *)z;
            for (int64_t c = threadIdx.x; c < classes / 4; c += blockDim.x)
                take4(m, s, z4[c]);
        } else {
            for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
                take(m, s, z[c]);
        }
        float row_max = dt__block_max(m, fshared);
        /* a thread that saw only -inf (or nothing) adds 0; m = +inf makes
         * the sum NaN, as exp(inf - inf) does on the cpu */
        double part = m == -INFINITY ? 0.0 : (double)s * (double)expf(m - row_max);
        double sum = dt__block_sum(part, dshared); /* ends with a barrier: every thread has read z */
        double lse = log(sum) + (double)row_max;
        if (threadIdx.x == 0)
            row_loss[r] = lse - zt;
        if (!g)
            continue;
        if (VEC) { /* each thread writes the elements it read: g may be z */
            const float4 *z4 = (const float4 *)z;
            float4 *g4 = (float4 *)g;
            for (int64_t c = threadIdx.x; c < classes / 4; c += blockDim.x) {
                float4 v = z4[c];
                int64_t at = target - 4 * c;
                g4[c] = make_float4(grad(v.x, lse, scale, at == 0), grad(v.y, lse, scale, at == 1),
                                    grad(v.z, lse, scale, at == 2), grad(v.w, lse, scale, at == 3));
            }
        } else {
            for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
                g[c] = grad(z[c], lse, scale, c == target);
        }
    }
}

/* Device row losses and their host copy, grown only; the lock covers a
 * whole call. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static double *dev_loss, *host_loss;
static int64_t loss_cap;

static bool reserve(int64_t rows)
{
    if (rows <= loss_cap)
        return true;
    if (dev_loss) {
        if (!DT_CUDA_CHECK(cudaStreamSynchronize(dt__stream())) || !DT_CUDA_CHECK(cudaFree(dev_loss)))
            return false;
    }
    free(host_loss);
    dev_loss = NULL;
    host_loss = NULL;
    loss_cap = 0;
    if (!DT_CUDA_CHECK(cudaMalloc(&dev_loss, (size_t)rows * sizeof(double)))) {
        dev_loss = NULL;
        return false;
    }
    if (!(host_loss = (double *)malloc((size_t)rows * sizeof(double)))) {
        DT_CUDA_RECORD(DT_ERR_NOMEM, "cross-entropy: no host memory for %lld row losses", (long long)rows);
        return false;
    }
    loss_cap = rows;
    return true;
}

static dt_status xent_locked(float *loss, float *dlogits, const float *logits, const int32_t *targets, int64_t rows,
                             int64_t classes, int64_t counted)
{
    if (!reserve(rows))
        return dt__cuda_take_error();
    float scale = counted ? 1.0f / (float)counted : 0.0f;
    bool vec = classes % 4 == 0 && (uintptr_t)logits % 16 == 0 && (uintptr_t)dlogits % 16 == 0;
    if (vec)
        xent_rows<true><<<dt__grid_rows(rows), dt__row_threads(classes / 4, 1024), 0, dt__stream()>>>(
            dev_loss, dlogits, logits, targets, rows, classes, scale);
    else
        xent_rows<false><<<dt__grid_rows(rows), dt__row_threads(classes, 1024), 0, dt__stream()>>>(
            dev_loss, dlogits, logits, targets, rows, classes, scale);
    if (DT_CUDA_LAUNCHED() &&
        DT_CUDA_CHECK(cudaMemcpyAsync(host_loss, dev_loss, (size_t)rows * sizeof(double), cudaMemcpyDeviceToHost,
                                      dt__stream())))
        DT_CUDA_CHECK(cudaStreamSynchronize(dt__stream()));
    DT_CHECK(dt__cuda_take_error());
    double total = 0;
    for (int64_t r = 0; r < rows; r++)
        total += host_loss[r];
    *loss = counted ? (float)(total / (double)counted) : 0.0f;
    return DT_OK;
}

dt_status dt__cuda_xent(float *loss, float *dlogits, const float *logits, const int32_t *targets, int64_t rows,
                        int64_t classes, int64_t counted)
{
    (void)dt__cuda_enter();
    DT_CHECK(dt__cuda_take_error()); /* an earlier kernel's failure, or not initialised */
    *loss = 0;
    if (rows <= 0 || classes <= 0)
        return DT_OK;
    pthread_mutex_lock(&lock);
    dt_status s = xent_locked(loss, dlogits, logits, targets, rows, classes, counted);
    pthread_mutex_unlock(&lock);
    return s;
}
