/* Mean softmax cross-entropy over the rows whose target is not -1, one block
 * per row (src/nn/loss.c's formulas).
 *
 * Per row: the max in f32, sum exp(z - max) in double (a strided share per
 * thread, then a fixed tree: the cpu adds the classes in order, so the sums
 * differ by about log2(classes) 2^-53 relative), lse = log(sum) + max, the
 * row's loss lse - z[target] in double, and dlogits = (float)(exp(z - lse)
 * / counted) - onehot / counted exactly as the cpu writes it.  The row
 * losses come back to the host and are summed there in row order, as on the
 * cpu.
 *
 * Cost: 2.8 ms for 8192 x 50304 with dlogits on an H200 (1.2 TB/s): three
 * passes over each row (max, sum, gradient), which no longer fit in L2; an
 * online softmax (max and sum in one pass) would save one. */
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "cuda/common.cuh"
#include "cuda/ops.h"

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
        float mx = -INFINITY;
        for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
            mx = z[c] > mx ? z[c] : mx;
        mx = dt__block_max(mx, fshared);
        double sum = 0;
        for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
            sum += exp((double)(z[c] - mx));
        sum = dt__block_sum(sum, dshared); /* ends with a barrier: every thread has read z */
        double lse = log(sum) + mx;
        if (threadIdx.x == 0)
            row_loss[r] = lse - zt;
        for (int64_t c = threadIdx.x; g && c < classes; c += blockDim.x)
            g[c] = (float)(exp((double)z[c] - lse) * scale) - (c == target ? scale : 0.0f);
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
    xent_rows<<<dt__grid_rows(rows), dt__row_threads(classes, 512), 0, dt__stream()>>>(dev_loss, dlogits, logits,
                                                                                      targets, rows, classes, scale);
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
