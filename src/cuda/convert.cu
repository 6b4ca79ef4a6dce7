/* f32 -> bf16 for the bf16 matrix products: the same bits as the cpu's
 * dt_f32_to_bf16 (src/base/dtype.c), so both backends multiply the same
 * operands: round to nearest even; a NaN stays a NaN (made quiet) instead of
 * rounding into infinity. */
#include <cuda_runtime.h>

#include "cuda/common.cuh"
#include "cuda/ops.h"

/* One block per row (grid-stride over rows), threads along the row: reads
 * and writes coalesce whatever the row stride. */
__global__ static void to_bf16_rows(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t ld)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *s = src + r * ld;
        uint16_t *d = dst + r * cols;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
            d[j] = dt__dev_f32_to_bf16(s[j]);
    }
}

void dt__cuda_to_bf16(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t ld)
{
    if (rows <= 0 || cols <= 0)
        return;
    int threads = dt__row_threads(cols, 512);
    to_bf16_rows<<<dt__grid_rows(rows), threads, 0, dt__stream()>>>(dst, src, rows, cols, ld);
    DT_CUDA_LAUNCHED();
}
