/* Kernels over the rows of [rows, cols] matrices.
 *
 * Work that writes whole rows runs one block per row.  No atomics:
 * - rows_sum_add sums in two deterministic passes (chunks of rows, then the
 *   chunks in order; common.cuh gives the error bound against the cpu's one
 *   running sum).  One thread per column over all rows, the cpu's order,
 *   was 190 us for 8192 x 768 on an H200: latency-bound on 768 threads.
 * - rows_scatter_add keeps the cpu's order and bits: each table element is
 *   added to by one thread, in row order; threads split the work by column
 *   and by id modulo a bucket count, so that there are enough of them
 *   (8192 rows of 768 into a 50304-row table: 0.53 ms on an H200, 3.2 ms
 *   with one thread per column; still latency-bound, a candidate for a
 *   sort-based version). */
#include <cuda_runtime.h>

#include "cuda/common.cuh"
#include "cuda/ops.h"

#define COL_THREADS 64 /* threads per block in the column kernels */

__global__ static void fill_kernel(float *y, const float *row, int64_t rows, int64_t cols)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
            y[r * cols + j] = row[j];
}

/* Blocks along the columns too (grid x): the position table's add is 8
 * rows of 786432 (GPT-2, batch 8), which one block per row took 1.1 ms for. */
__global__ static void add_row_kernel(float *y, const float *row, int64_t rows, int64_t cols)
{
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
        for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < cols; j += (int64_t)gridDim.x * blockDim.x)
            y[r * cols + j] += row[j];
}

__global__ static void gather_kernel(float *out, const float *table, const float *ids, int64_t n, int64_t cols)
{
    for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
        const float *src = table + (int64_t)ids[r] * cols;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
            out[r * cols + j] = src[j];
    }
}

/* Pass 1 of the column sums (common.cuh): partial[c, j] = x[r, j] summed
 * over chunk c's rows in order.  Loads go UNROLL rows ahead of the adds. */
#define UNROLL 8

__global__ static void chunk_sums_kernel(float *partial, const float *x, int64_t rows, int64_t cols, int64_t chunk)
{
    int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, r = blockIdx.y * chunk;
    if (j >= cols)
        return;
    int64_t end = r + chunk < rows ? r + chunk : rows;
    float s = 0;
    for (; r + UNROLL <= end; r += UNROLL) {
        float v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            v[u] = x[(r + u) * cols + j];
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            s += v[u];
    }
    for (; r < end; r++)
        s += x[r * cols + j];
    partial[blockIdx.y * cols + j] = s;
}

/* Pass 2: sum[j] += the chunks of column j, in double (common.cuh). */
__global__ static void add_chunks_kernel(float *sum, const float *partial, int64_t chunks, int64_t cols)
{
    __shared__ double shared[DT__SUM_WAYS * DT__SUM_COLS];
    int64_t j = blockIdx.x * (int64_t)DT__SUM_COLS + threadIdx.x;
    double s = dt__dev_chunks_sum(partial, chunks, cols, j, shared);
    if (threadIdx.y == 0 && j < cols)
        sum[j] = (float)((double)sum[j] + s);
}

/* Thread (j, b) owns column j of the table rows whose id is b modulo the
 * grid's height (a power of two): every element of the table is added to by
 * one thread, in r order (the cpu's order and bits), with cols x buckets
 * threads at work.  The block reads the ids a tile at a time into shared
 * memory, once for all its threads.  ids, x and table never overlap (ids
 * are an input, table a gradient). */
#define ID_TILE 1024

__global__ static void scatter_kernel(float *__restrict__ table, const float *__restrict__ ids,
                                      const float *__restrict__ x, int64_t n, int64_t cols)
{
    __shared__ int64_t tile[ID_TILE];
    int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, mask = gridDim.y - 1, b = blockIdx.y;
    for (int64_t r0 = 0; r0 < n; r0 += ID_TILE) {
        int count = n - r0 < ID_TILE ? (int)(n - r0) : ID_TILE;
        __syncthreads(); /* every thread is done with the previous tile */
        for (int t = threadIdx.x; t < count; t += blockDim.x)
            tile[t] = (int64_t)ids[r0 + t];
        __syncthreads();
        if (j >= cols)
            continue; /* still at the barriers above */
        for (int t = 0; t < count; t++) {
            int64_t id = tile[t];
            if ((id & mask) == b)
                table[id * cols + j] += x[(r0 + t) * cols + j];
        }
    }
}

void dt__cuda_rows_fill(float *y, const float *row, int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0 || !dt__cuda_enter())
        return;
    fill_kernel<<<dt__grid_rows(rows), dt__row_threads(cols, 256), 0, dt__stream()>>>(y, row, rows, cols);
    DT_CUDA_LAUNCHED();
}

void dt__cuda_rows_add(float *y, const float *row, int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0 || !dt__cuda_enter())
        return;
    int threads = dt__row_threads(cols, 256);
    unsigned grid_rows = (unsigned)(rows < 65535 ? rows : 65535); /* grid y's limit */
    int64_t col_blocks = (cols + threads - 1) / threads, most = 1 + 4096 / grid_rows; /* about 4k blocks in all */
    add_row_kernel<<<dim3((unsigned)(col_blocks < most ? col_blocks : most), grid_rows), threads, 0, dt__stream()>>>(
        y, row, rows, cols);
    DT_CUDA_LAUNCHED();
}

void dt__cuda_rows_gather(float *out, const float *table, const float *ids, int64_t n, int64_t cols)
{
    if (n <= 0 || cols <= 0 || !dt__cuda_enter())
        return;
    gather_kernel<<<dt__grid_rows(n), dt__row_threads(cols, 256), 0, dt__stream()>>>(out, table, ids, n, cols);
    DT_CUDA_LAUNCHED();
}

static dt__scratch partials = DT__SCRATCH_INIT;

void dt__cuda_rows_sum_add(float *sum, const float *x, int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0 || !dt__cuda_enter())
        return;
    int64_t chunk = dt__chunk_rows(rows), chunks = (rows + chunk - 1) / chunk;
    unsigned col_blocks = (unsigned)((cols + COL_THREADS - 1) / COL_THREADS);
    pthread_mutex_lock(&partials.lock);
    float *part = (float *)dt__scratch_get(&partials, (size_t)(chunks * cols) * sizeof(float), "column sums");
    if (part) {
        chunk_sums_kernel<<<dim3(col_blocks, (unsigned)chunks), COL_THREADS, 0, dt__stream()>>>(part, x, rows, cols,
                                                                                                chunk);
        if (DT_CUDA_LAUNCHED()) {
            add_chunks_kernel<<<dt__sum_blocks(cols), dim3(DT__SUM_COLS, DT__SUM_WAYS), 0, dt__stream()>>>(sum, part, chunks, cols);
            DT_CUDA_LAUNCHED();
        }
    }
    pthread_mutex_unlock(&partials.lock);
}

void dt__cuda_rows_scatter_add(float *table, const float *ids, const float *x, int64_t n, int64_t cols)
{
    if (n <= 0 || cols <= 0 || !dt__cuda_enter())
        return;
    /* up to about 32k threads in all; the bucket count changes no result */
    unsigned buckets = 1;
    while (buckets < 64 && 2 * buckets * cols <= 32768)
        buckets *= 2;
    unsigned col_blocks = (unsigned)((cols + COL_THREADS - 1) / COL_THREADS);
    scatter_kernel<<<dim3(col_blocks, buckets), COL_THREADS, 0, dt__stream()>>>(table, ids, x, n, cols);
    DT_CUDA_LAUNCHED();
}
