/* What the kernel files share: the stream, launch sizes and block-wide
 * reductions with a fixed order (the same bits on every run). */
#ifndef DT_CUDA_COMMON_CUH
#define DT_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>

#include "cuda/cuda.h"

extern "C" {
#include "base/status.h" /* a C header without its own extern "C" */
}

static inline cudaStream_t dt__stream(void) { return (cudaStream_t)dt__cuda_stream(); }

/* Blocks for a grid-stride loop over n elements: enough to fill the GPU a
 * few times over, never more than the elements need. */
static inline unsigned dt__grid(int64_t n, int threads)
{
    int64_t want = (n + threads - 1) / threads, most = (int64_t)dt__cuda_sm_count() * 32;
    if (most < 1)
        most = 1;
    return (unsigned)(want < most ? want : most);
}

/* Blocks for one block per row: a grid-stride loop over rows covers the
 * rest (gridDim.x is at most 2^31 - 1, but fewer blocks that loop are as
 * fast). */
static inline unsigned dt__grid_rows(int64_t rows)
{
    return (unsigned)(rows < 65536 ? rows : 65536);
}

/* Threads for one block per row of `cols` elements: a whole number of
 * warps, 32..max, about one element per thread for short rows. */
static inline int dt__row_threads(int64_t cols, int max)
{
    int64_t t = (cols + 31) / 32 * 32;
    return (int)(t < 32 ? 32 : t > max ? max : t);
}

/* A device buffer owned by one kernel file, grown only (shapes repeat every
 * step).  Hold `lock` from dt__scratch_get until the work using the buffer
 * is queued: the stream then orders that work before the next caller's,
 * and growing waits for the stream before it frees the old buffer.  NULL
 * (error recorded) when out of memory. */
typedef struct {
    pthread_mutex_t lock;
    void *p;
    size_t bytes;
} dt__scratch;
#define DT__SCRATCH_INIT {PTHREAD_MUTEX_INITIALIZER, NULL, 0}

static inline void *dt__scratch_get(dt__scratch *s, size_t bytes, const char *what)
{
    if (bytes <= s->bytes)
        return s->p;
    if (s->p) {
        if (!DT_CUDA_CHECK(cudaStreamSynchronize(dt__stream())) || !DT_CUDA_CHECK(cudaFree(s->p)))
            return NULL;
        s->p = NULL;
        s->bytes = 0;
    }
    cudaError_t e = cudaMalloc(&s->p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        s->p = NULL;
        DT_CUDA_RECORD(DT_ERR_NOMEM, "no device memory for %zu bytes of %s: %s", bytes, what, cudaGetErrorString(e));
        return NULL;
    }
    s->bytes = bytes;
    return s->p;
}

/* Column sums in two deterministic passes (rows.cu, layernorm.cu): chunks
 * of DT__CHUNK_ROWS rows or more (at most DT__CHUNKS of them), each summed
 * in row order in f32 by one thread per column; then each column's chunks
 * are summed in double by DT__SUM_WAYS threads, each every DT__SUM_WAYS-th
 * chunk in order, and the parts combined in a fixed order and added to the
 * destination (dt__dev_chunks_sum).  The chunking depends on
 * `rows` only, so the bits repeat.  Against the cpu's one running f32 sum:
 * |error| <= (chunk - 1) 2^-24 sum|x| + tiny, where the cpu's bound is
 * (rows - 1) 2^-24 sum|x|. */
#define DT__CHUNK_ROWS 32
#define DT__CHUNKS 256

static inline int64_t dt__chunk_rows(int64_t rows)
{
    int64_t c = (rows + DT__CHUNKS - 1) / DT__CHUNKS;
    return c < DT__CHUNK_ROWS ? DT__CHUNK_ROWS : c;
}

/* Pass 2's blocks: DT__SUM_COLS columns x DT__SUM_WAYS threads a column
 * (one thread per column, all chunks in a chain, was 20-60 us for 768
 * columns on an H200: latency-bound on 768 threads). */
#define DT__SUM_COLS 32
#define DT__SUM_WAYS 8

/* Column j's chunks part[c * cols + j] summed in double, in thread row
 * threadIdx.y == 0 (others get 0); every thread of the block must call it.
 * shared: DT__SUM_WAYS * DT__SUM_COLS doubles. */
__device__ inline double dt__dev_chunks_sum(const float *part, int64_t chunks, int64_t cols, int64_t j, double *shared)
{
    double s = 0;
    if (j < cols)
        for (int64_t c = threadIdx.y; c < chunks; c += DT__SUM_WAYS)
            s += part[c * cols + j];
    shared[threadIdx.y * DT__SUM_COLS + threadIdx.x] = s;
    __syncthreads();
    double t = 0;
    if (threadIdx.y == 0)
        for (int w = 0; w < DT__SUM_WAYS; w++)
            t += shared[w * DT__SUM_COLS + threadIdx.x];
    __syncthreads(); /* shared is reused by the next call */
    return t;
}

static inline unsigned dt__sum_blocks(int64_t cols)
{
    return (unsigned)((cols + DT__SUM_COLS - 1) / DT__SUM_COLS);
}

#define DT__FULL_MASK 0xffffffffu

/* The sum of v over the warp, in lane 0 (a fixed tree: deterministic). */
template <typename T> __device__ inline T dt__warp_sum(T v)
{
    for (int off = 16; off > 0; off /= 2)
        v += __shfl_down_sync(DT__FULL_MASK, v, off);
    return v;
}

template <typename T> __device__ inline T dt__warp_max(T v)
{
    for (int off = 16; off > 0; off /= 2) {
        T o = __shfl_down_sync(DT__FULL_MASK, v, off);
        v = o > v ? o : v;
    }
    return v;
}

/* Block-wide sum and max, returned to every thread.  blockDim.x must be a
 * multiple of 32 (at most 1024) and every thread of the block must call
 * them; `shared` holds 32 values.  The order depends only on blockDim, so a
 * result repeats bitwise.  They end with a barrier, so `shared` may be used
 * again at once. */
template <typename T> __device__ inline T dt__block_sum(T v, T *shared)
{
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = dt__warp_sum(v);
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? shared[lane] : (T)0;
        v = dt__warp_sum(v);
        __syncwarp(); /* every lane's read of shared[] above happens before lane 0 overwrites shared[0] */
        if (lane == 0)
            shared[0] = v;
    }
    __syncthreads();
    T total = shared[0];
    __syncthreads();
    return total;
}

template <typename T> __device__ inline T dt__block_max(T v, T *shared)
{
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = dt__warp_max(v);
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? shared[lane] : shared[0];
        v = dt__warp_max(v);
        __syncwarp(); /* as in dt__block_sum (compute-sanitizer's racecheck flagged the reads of shared[0]) */
        if (lane == 0)
            shared[0] = v;
    }
    __syncthreads();
    T most = shared[0];
    __syncthreads();
    return most;
}

/* f32 -> bf16 with the cpu's bits (dt_f32_to_bf16, src/base/dtype.c): round
 * to nearest even; a NaN stays a NaN (made quiet) instead of rounding into
 * infinity.  The matrix products' operands (convert.cu) and the IPC
 * reductions (ipc.cu) round with it. */
__device__ static inline uint16_t dt__dev_f32_to_bf16(float f)
{
    uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

#endif
