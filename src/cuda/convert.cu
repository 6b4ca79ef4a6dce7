/* f32 -> bf16 for the bf16 matrix products: the same bits as the cpu's
 * dt_f32_to_bf16 (src/base/dtype.c), so both backends multiply the same
 * operands: round to nearest even; a NaN stays a NaN (made quiet) instead of
 * rounding into infinity. */
#include <cuda_runtime.h>

#include "cuda/common.cuh"
#include "cuda/ops.h"

/* One block per row (grid-stride over rows), threads along the row: reads
 * and writes coalesce whatever the row stride.  The fallback for rows that
 * are not whole 16-byte groups. */
__global__ static void to_bf16_rows(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t ld)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *s = src + r * ld;
        uint16_t *d = dst + r * cols;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
            d[j] = dt__dev_f32_to_bf16(s[j]);
    }
}

/* Four elements a thread, a 16-byte load and an 8-byte store, flat over the
 * matrix (cols4 and ld4 count groups of four).  The matrix products convert
 * every activation this way: one block per row of 768 ran at 1.6 TB/s on an
 * H200 and took a fifth of GPT-2's bf16 step (ncu). */
__global__ static void to_bf16_vec4(uint2 *dst, const float4 *src, int64_t rows, int64_t cols4, int64_t ld4)
{
    int64_t n = rows * cols4;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = ld4 == cols4 ? 0 : i / cols4; /* packed: the element's index is i */
        float4 v = src[r * ld4 + (i - r * cols4)];
        uint2 o; /* little-endian: the lower address holds the lower half */
        o.x = (uint32_t)dt__dev_f32_to_bf16(v.x) | (uint32_t)dt__dev_f32_to_bf16(v.y) << 16;
        o.y = (uint32_t)dt__dev_f32_to_bf16(v.z) | (uint32_t)dt__dev_f32_to_bf16(v.w) << 16;
        dst[i] = o;
    }
}

void dt__cuda_to_bf16(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t ld)
{
    if (rows <= 0 || cols <= 0)
        return;
    if (cols % 4 == 0 && ld % 4 == 0 && (uintptr_t)src % 16 == 0 && (uintptr_t)dst % 8 == 0) {
        int64_t groups = rows * (cols / 4), blocks = (groups + 255) / 256;
        to_bf16_vec4<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, dt__stream()>>>(
            (uint2 *)dst, (const float4 *)src, rows, cols / 4, ld / 4);
    } else {
        to_bf16_rows<<<dt__grid_rows(rows), dt__row_threads(cols, 512), 0, dt__stream()>>>(dst, src, rows, cols, ld);
    }
    DT_CUDA_LAUNCHED();
}
