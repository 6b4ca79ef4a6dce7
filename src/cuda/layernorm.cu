/* LayerNorm over the last dimension, one block per row.
 *
 * The row sums (mean, variance; the backward's mean(dy w) and
 * mean(dy w xhat)) are summed in double: each thread a strided share, then
 * a fixed tree (common.cuh), so the result repeats bitwise.  The cpu sums in
 * 16 f32 lanes, then double: the means and rstd may differ from its in the
 * last bit of f32 (relative 2^-24); every element-wise step after them is
 * the cpu's expression in the cpu's order (--fmad=false, CMakeLists.txt).
 *
 * dw and db sum over rows in common.cuh's two deterministic passes (chunks
 * of rows in f32, then the chunks in double), not the cpu's one running
 * f32 sum per column; common.cuh gives the bound.  (The cpu's order, one
 * thread per column over all rows, took 800 us for 8192 x 768 on an H200.) */
#include <cuda_runtime.h>
#include <math.h>

#include "cuda/common.cuh"
#include "cuda/ops.h"

__global__ static void fwd_kernel(float *y, float *xhat, float *rstd, const float *x, const float *w, const float *b,
                                  int64_t rows, int64_t cols, float eps)
{
    __shared__ double shared[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * cols;
        double s = 0;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
            s += xr[j];
        s = dt__block_sum(s, shared);
        float mean = (float)(s / (double)cols);
        double q = 0;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            float d = xr[j] - mean;
            q += (double)d * d;
        }
        q = dt__block_sum(q, shared);
        float rs = (float)(1.0 / sqrt(q / (double)cols + (double)eps));
        if (threadIdx.x == 0)
            rstd[r] = rs;
        float *yr = y + r * cols, *hr = xhat + r * cols;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            float h = (xr[j] - mean) * rs;
            hr[j] = h;
            yr[j] = h * w[j] + b[j];
        }
    }
}

/* dx = rstd (dy w - mean(dy w) - xhat mean(dy w xhat)) per row. */
__global__ static void dx_kernel(float *dx, const float *dy, const float *xhat, const float *rstd, const float *w,
                                 int64_t rows, int64_t cols)
{
    __shared__ double shared[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *g = dy + r * cols, *h = xhat + r * cols;
        double sgw = 0, sgwh = 0;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            float gw = g[j] * w[j];
            sgw += gw;
            sgwh += gw * h[j];
        }
        sgw = dt__block_sum(sgw, shared);
        sgwh = dt__block_sum(sgwh, shared);
        float mgw = (float)(sgw / (double)cols), mgwh = (float)(sgwh / (double)cols), rs = rstd[r];
        float *d = dx + r * cols;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
            d[j] = rs * (g[j] * w[j] - mgw - h[j] * mgwh);
    }
}

/* dw and db, pass 1 (common.cuh's column sums): the chunk sums of dy xhat
 * and dy, one thread per column, rows in order; loads go UNROLL rows ahead
 * of the adds.  part_w and part_b are [chunks, cols]. */
#define UNROLL 8
#define COL_THREADS 64

__global__ static void dwdb_chunks(float *part_w, float *part_b, const float *dy, const float *xhat, int64_t rows,
                                   int64_t cols, int64_t chunk)
{
    int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, r = blockIdx.y * chunk;
    if (j >= cols)
        return;
    int64_t end = r + chunk < rows ? r + chunk : rows;
    float sw = 0, sb = 0;
    for (; r + UNROLL <= end; r += UNROLL) {
        float g[UNROLL], h[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            g[u] = dy[(r + u) * cols + j];
            h[u] = xhat[(r + u) * cols + j];
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            sw += g[u] * h[u];
            sb += g[u];
        }
    }
    for (; r < end; r++) {
        float g = dy[r * cols + j];
        sw += g * xhat[r * cols + j];
        sb += g;
    }
    part_w[blockIdx.y * cols + j] = sw;
    part_b[blockIdx.y * cols + j] = sb;
}

/* Pass 2: dw[j] += its chunks, in double (common.cuh); db likewise. */
__global__ static void dwdb_add(float *dw, float *db, const float *part_w, const float *part_b, int64_t chunks,
                                int64_t cols)
{
    __shared__ double shared[DT__SUM_WAYS * DT__SUM_COLS];
    int64_t j = blockIdx.x * (int64_t)DT__SUM_COLS + threadIdx.x;
    double sw = dt__dev_chunks_sum(part_w, chunks, cols, j, shared);
    double sb = dt__dev_chunks_sum(part_b, chunks, cols, j, shared);
    if (threadIdx.y == 0 && j < cols) {
        dw[j] = (float)((double)dw[j] + sw);
        db[j] = (float)((double)db[j] + sb);
    }
}

static dt__scratch partials = DT__SCRATCH_INIT;

static void param_grads(float *dw, float *db, const float *dy, const float *xhat, int64_t rows, int64_t cols)
{
    int64_t chunk = dt__chunk_rows(rows), chunks = (rows + chunk - 1) / chunk;
    unsigned col_blocks = (unsigned)((cols + COL_THREADS - 1) / COL_THREADS);
    pthread_mutex_lock(&partials.lock);
    float *part = (float *)dt__scratch_get(&partials, (size_t)(2 * chunks * cols) * sizeof(float), "dw/db sums");
    if (part) {
        float *part_b = part + chunks * cols;
        dwdb_chunks<<<dim3(col_blocks, (unsigned)chunks), COL_THREADS, 0, dt__stream()>>>(part, part_b, dy, xhat,
                                                                                          rows, cols, chunk);
        if (DT_CUDA_LAUNCHED()) {
            dwdb_add<<<dt__sum_blocks(cols), dim3(DT__SUM_COLS, DT__SUM_WAYS), 0, dt__stream()>>>(dw, db, part, part_b, chunks, cols);
            DT_CUDA_LAUNCHED();
        }
    }
    pthread_mutex_unlock(&partials.lock);
}

void dt__cuda_layernorm_fwd(float *y, float *xhat, float *rstd, const float *x, const float *w, const float *b,
                            int64_t rows, int64_t cols, float eps)
{
    if (rows <= 0 || cols <= 0 || !dt__cuda_enter())
        return;
    fwd_kernel<<<dt__grid_rows(rows), dt__row_threads(cols, 256), 0, dt__stream()>>>(y, xhat, rstd, x, w, b, rows,
                                                                                    cols, eps);
    DT_CUDA_LAUNCHED();
}

void dt__cuda_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *xhat, const float *rstd,
                            const float *w, int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0 || !dt__cuda_enter())
        return;
    /* the parameter gradients first: they read dy, which a caller might let dx overwrite */
    param_grads(dw, db, dy, xhat, rows, cols);
    if (!dx)
        return;
    dx_kernel<<<dt__grid_rows(rows), dt__row_threads(cols, 256), 0, dt__stream()>>>(dx, dy, xhat, rstd, w, rows,
                                                                                   cols);
    DT_CUDA_LAUNCHED();
}
