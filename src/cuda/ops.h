/* The cuda backend's table entries (src/tensor/backend.h gives each one's
 * contract), one kernel family per file; backend_cuda.c puts them in the
 * table.  Where an entry's order of summation differs from the cpu one, its
 * file says so and gives the error bound. */
#ifndef DT_CUDA_OPS_H
#define DT_CUDA_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* memory.cu */
void *dt__cuda_alloc(size_t bytes);
void dt__cuda_free(void *p);
dt_status dt__cuda_upload(void *dst, const void *host_src, size_t bytes);
dt_status dt__cuda_download(void *host_dst, const void *src, size_t bytes);
dt_status dt__cuda_copy(void *dst, const void *src, size_t bytes);
dt_status dt__cuda_zero(void *dst, size_t bytes);
dt_status dt__cuda_sync(void);
dt_status dt__cuda_mem_info(size_t *total, size_t *free_bytes);
size_t dt__cuda_mem_peak(void);

/* streams.cu */
void *dt__cuda_stream_create(void);
void dt__cuda_stream_destroy(void *stream);
void *dt__cuda_event_create(void);
void dt__cuda_event_destroy(void *event);
dt_status dt__cuda_upload_async(void *dst, const void *host_src, size_t bytes, void *stream);
dt_status dt__cuda_event_record(void *event, void *stream);
dt_status dt__cuda_stream_wait_event(void *stream, void *event);
dt_status dt__cuda_event_sync(void *event);
void *dt__cuda_host_alloc(size_t bytes);
void dt__cuda_host_free(void *p);

/* gemm.cu */
void dt__cuda_gemm(dt_dtype compute, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* backend.h's linear_grads: dy converted to bf16 once for both products. */
void dt__cuda_linear_grads(dt_dtype compute, int64_t m, int64_t n, int64_t k, const float *dy, const float *x,
                           const float *w, float *dw, float *db, float *dx);

/* vector.cu */
void dt__cuda_axpy(float *y, float alpha, const float *x, int64_t n);
void dt__cuda_add(float *y, const float *a, const float *b, int64_t n);
void dt__cuda_mul(float *y, const float *a, const float *b, int64_t n);
void dt__cuda_scale(float *x, float alpha, int64_t n);
double dt__cuda_sumsq(const float *x, int64_t n);

/* rows.cu */
void dt__cuda_rows_fill(float *y, const float *row, int64_t rows, int64_t cols);
void dt__cuda_rows_sum_add(float *sum, const float *x, int64_t rows, int64_t cols);
void dt__cuda_rows_add(float *y, const float *row, int64_t rows, int64_t cols);
void dt__cuda_rows_gather(float *out, const float *table, const float *ids, int64_t n, int64_t cols);
void dt__cuda_rows_scatter_add(float *table, const float *ids, const float *x, int64_t n, int64_t cols);

/* layernorm.cu */
void dt__cuda_layernorm_fwd(float *y, float *xhat, float *rstd, const float *x, const float *w, const float *b,
                            int64_t rows, int64_t cols, float eps);
void dt__cuda_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *xhat, const float *rstd,
                            const float *w, int64_t rows, int64_t cols);

/* activations.cu */
void dt__cuda_gelu_fwd(float *y, float *t, const float *x, int64_t n);
void dt__cuda_gelu_bwd(float *dx, const float *dy, const float *x, const float *t, int64_t n);
/* bf16 training: t not kept, recomputed (bitwise the pair above) */
bool dt__cuda_gelu_fwd_bf16(float *y, const float *x, int64_t n);
bool dt__cuda_gelu_bwd_bf16(float *dx, const float *dy, const float *x, int64_t n);
void dt__cuda_relu_fwd(float *y, const float *x, int64_t n);
void dt__cuda_relu_bwd(float *dx, const float *dy, const float *x, int64_t n);

/* dropout.cu */
void dt__cuda_dropout_fwd(float *y, float *mask, const float *x, int64_t n, uint64_t stream, float prob, float keep,
                          int64_t slice, int64_t whole, int64_t first);

/* xent.cu */
dt_status dt__cuda_xent(float *loss, float *dlogits, const float *logits, const int32_t *targets, int64_t rows,
                        int64_t classes, int64_t counted);

/* optimizer.cu */
void dt__cuda_adamw(float *p, const float *g, float *m, float *v, int64_t n, float lr, float weight_decay,
                    float beta1, float beta2, float eps, float bc1, float bc2_sqrt);
void dt__cuda_sgd(float *p, const float *g, float *buf, int64_t n, float lr, float weight_decay, float momentum,
                  bool nesterov, bool first);

/* convert.cu: dst (packed rows x cols bf16, rounded to nearest even like
 * dt_f32_to_bf16) = src (rows x cols f32, row stride ld), queued on the
 * compute stream.  Used by gemm.cu for the bf16 products. */
void dt__cuda_to_bf16(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t ld);

#ifdef __cplusplus
}
#endif
#endif
