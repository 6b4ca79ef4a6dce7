/* The cpu compute backend: host memory, OpenBLAS (or the bf16 GEMM) for
 * matrix products, and the engine's threaded loops.  The layer kernels live
 * in cpu_layers.c, cpu_attention.c and cpu_optim.c; this file holds the
 * table and the entries that only wrap existing kernels. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "tensor/backend.h"
#include "tensor/cpu_kernels.h"
#include "tensor/gemm_bf16.h"

#define ALIGN 256

static void *cpu_alloc(size_t bytes)
{
    size_t rounded = bytes > SIZE_MAX - ALIGN ? 0 : (bytes + ALIGN - 1) / ALIGN * ALIGN;
    void *p = bytes > SIZE_MAX - ALIGN ? NULL : aligned_alloc(ALIGN, rounded ? rounded : ALIGN);
    if (!p)
        dt__fail(DT_ERR_NOMEM, "cpu: out of memory for %zu bytes", bytes);
    return p;
}

static void cpu_free(void *p) { free(p); }

static dt_status cpu_memcpy(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memmove(dst, src, bytes);
    return DT_OK;
}

static dt_status cpu_zero(void *dst, size_t bytes)
{
    if (bytes)
        memset(dst, 0, bytes);
    return DT_OK;
}

static dt_status cpu_sync(void) { return DT_OK; }

dt_status dt__host_mem_info(size_t *total, size_t *free_bytes)
{
    long page = sysconf(_SC_PAGESIZE), all = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
    if (page <= 0 || all <= 0 || avail < 0)
        return dt__fail(DT_ERR_SYSTEM, "cpu: the host's memory size is unknown (sysconf)");
    *total = (size_t)all * (size_t)page;
    *free_bytes = (size_t)avail * (size_t)page;
    return DT_OK;
}

static size_t cpu_mem_peak(void) { return 0; } /* host memory is not counted */

/* Copies on the host are done when they return: streams and events are
 * tokens (not NULL, since NULL reports a failure), waits return at once. */
static char token;
void *dt__sync_token_create(void) { return &token; }
void dt__sync_token_destroy(void *t) { (void)t; }
dt_status dt__sync_token_op(void *a, void *b)
{
    (void)a;
    (void)b;
    return DT_OK;
}
dt_status dt__sync_token_wait(void *t)
{
    (void)t;
    return DT_OK;
}

static dt_status cpu_upload_async(void *dst, const void *src, size_t bytes, void *stream)
{
    (void)stream;
    return cpu_memcpy(dst, src, bytes);
}

static void *cpu_host_alloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        dt__fail(DT_ERR_NOMEM, "cpu: out of memory for %zu bytes", bytes);
    return p;
}

static void cpu_gemm(dt_dtype compute, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                     int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (compute == DT_BF16)
        dt_sgemm_bf16_ld(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else
        dt_sgemm_ld(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* The bf16 kernel starts its sums from the bias (no pass that fills C);
 * elsewhere the fill and the product, as the layers did. */
static void cpu_gemm_bias(dt_dtype compute, int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a,
                          int64_t lda, const float *b, int64_t ldb, const float *bias, float *c)
{
    if (compute == DT_BF16 && dt__sgemm_bf16_bias(ta, tb, m, n, k, a, lda, b, ldb, bias, c, n))
        return;
    dt_rows_fill(c, bias, m, n);
    cpu_gemm(compute, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 1.0f, c, n);
}

/* The bf16 kernels sum db while they pack dy; elsewhere the product, then
 * the sums, as the layers did. */
static void cpu_gemm_grad_bias(dt_dtype compute, int64_t m, int64_t n, int64_t k, const float *dy, const float *x,
                               float *dw, float *db)
{
    if (compute == DT_BF16 && dt__sgemm_bf16_sums(m, n, k, dy, m, x, n, dw, n, db))
        return;
    cpu_gemm(compute, 1, 0, m, n, k, 1.0f, dy, m, x, n, 1.0f, dw, n);
    dt_rows_sum_add(db, dy, k, m);
}

static void cpu_rows_add(float *y, const float *row, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++)
        dt_vec_axpy(y + r * cols, 1.0f, row, cols);
}

const dt_compute_ops dt__cpu_ops = {
    .name = "cpu",
    .host = true,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_memcpy,
    .download = cpu_memcpy,
    .copy = cpu_memcpy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .mem_info = dt__host_mem_info,
    .mem_peak = cpu_mem_peak,
    .stream_create = dt__sync_token_create,
    .stream_destroy = dt__sync_token_destroy,
    .event_create = dt__sync_token_create,
    .event_destroy = dt__sync_token_destroy,
    .upload_async = cpu_upload_async,
    .event_record = dt__sync_token_op,
    .stream_wait_event = dt__sync_token_op,
    .event_sync = dt__sync_token_wait,
    .host_alloc = cpu_host_alloc,
    .host_free = free,
    .gemm = cpu_gemm,
    .gemm_bias = cpu_gemm_bias,
    .gemm_grad_bias = cpu_gemm_grad_bias,
    .axpy = dt_vec_axpy,
    .add = dt_vec_add,
    .mul = dt__cpu_mul,
    .scale = dt_vec_scale,
    .sumsq = dt_vec_sumsq,
    .rows_fill = dt_rows_fill,
    .rows_sum_add = dt_rows_sum_add,
    .rows_add = cpu_rows_add,
    .rows_gather = dt_rows_gather,
    .rows_scatter_add = dt_rows_scatter_add,
    .layernorm_fwd = dt__cpu_layernorm_fwd,
    .layernorm_bwd = dt__cpu_layernorm_bwd,
    .gelu_fwd = dt__cpu_gelu_fwd,
    .gelu_bwd = dt__cpu_gelu_bwd,
    .gelu_fwd_bf16 = dt__cpu_gelu_fwd_bf16,
    .gelu_bwd_bf16 = dt__cpu_gelu_bwd_bf16,
    .relu_fwd = dt__cpu_relu_fwd,
    .relu_bwd = dt__cpu_relu_bwd,
    .dropout_fwd = dt__cpu_dropout_fwd,
    .attn_saved_floats = dt__cpu_attn_saved_floats,
    .attn_scratch_floats = dt__cpu_attn_scratch_floats,
    .attn_fwd = dt__cpu_attn_fwd,
    .attn_bwd = dt__cpu_attn_bwd,
    .xent = dt__cpu_xent,
    .adamw = dt__cpu_adamw,
    .sgd = dt__cpu_sgd,
};
