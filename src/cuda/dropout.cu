/* Dropout's keyed mask, bit for bit the cpu's (src/nn/dropout.c): element i
 * draws dt_rng_key_uniform(stream, at(i)), i.e. SplitMix64's finaliser of
 * stream + at(i) * golden (src/base/rng.c, src/base/hash.h), its top 24 bits
 * times 2^-24.  Integer arithmetic and an exact float conversion (a value
 * below 2^24, times a power of two), so the GPU's mask is the cpu's; and y =
 * x * mask is one rounded product on both. */
#include <cuda_runtime.h>

#include "cuda/common.cuh"
#include "cuda/ops.h"

#define THREADS 256

/* dt__mix64 of src/base/hash.h. */
__device__ static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* dt_rng_key_uniform of src/base/rng.c. */
__device__ static inline float key_uniform(uint64_t stream, uint64_t index)
{
    uint64_t bits = mix64(stream + index * 0x9e3779b97f4a7c15ull);
    return (float)(bits >> 40) * (1.0f / 16777216.0f);
}

__global__ static void dropout_kernel(float *y, float *mask, const float *x, int64_t n, uint64_t stream, float prob,
                                      float keep, int64_t slice, int64_t whole, int64_t first)
{
    bool all = slice == whole; /* no sequence split: element i is first + i (as the cpu) */
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t at = all ? (uint64_t)(first + i) : (uint64_t)((i / slice) * whole + first + i % slice);
        float m = key_uniform(stream, at) < prob ? 0.0f : keep;
        mask[i] = m;
        y[i] = x[i] * m;
    }
}

void dt__cuda_dropout_fwd(float *y, float *mask, const float *x, int64_t n, uint64_t stream, float prob, float keep,
                          int64_t slice, int64_t whole, int64_t first)
{
    if (n <= 0 || !dt__cuda_enter())
        return;
    if (slice <= 0) {
        DT_CUDA_RECORD(DT_ERR_INVALID, "dropout: slice %lld (expected > 0)", (long long)slice);
        return;
    }
    dropout_kernel<<<dt__grid(n, THREADS), THREADS, 0, dt__stream()>>>(y, mask, x, n, stream, prob, keep, slice,
                                                                      whole, first);
    DT_CUDA_LAUNCHED();
}
