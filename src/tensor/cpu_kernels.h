/* The cpu backend's layer kernels (the entries of dt__cpu_ops that are not
 * plain wrappers); their contracts are the table's, in tensor/backend.h. */
#ifndef DT_TENSOR_CPU_KERNELS_H
#define DT_TENSOR_CPU_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/base.h"

void dt__cpu_mul(float *y, const float *a, const float *b, int64_t n);
void dt__cpu_layernorm_fwd(float *y, float *xhat, float *rstd, const float *x, const float *w, const float *b,
                           int64_t rows, int64_t cols, float eps);
void dt__cpu_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *xhat, const float *rstd,
                           const float *w, int64_t rows, int64_t cols);
void dt__cpu_gelu_fwd(float *y, float *t, const float *x, int64_t n);
void dt__cpu_gelu_bwd(float *dx, const float *dy, const float *x, const float *t, int64_t n);
/* GELU for bf16 training (cpu_gelu_bf16.c): tanh recomputed in the backward
 * from an own exp, nothing kept but x; false where the CPU lacks AVX-512. */
bool dt__cpu_gelu_fwd_bf16(float *y, const float *x, int64_t n);
bool dt__cpu_gelu_bwd_bf16(float *dx, const float *dy, const float *x, int64_t n);
void dt__cpu_relu_fwd(float *y, const float *x, int64_t n);
void dt__cpu_relu_bwd(float *dx, const float *dy, const float *x, int64_t n);
void dt__cpu_dropout_fwd(float *y, float *mask, const float *x, int64_t n, uint64_t stream, float prob, float keep,
                         int64_t slice, int64_t whole, int64_t first);
int64_t dt__cpu_attn_saved_floats(int64_t B, int64_t H, int64_t T);
int64_t dt__cpu_attn_scratch_floats(int64_t B, int64_t H, int64_t T, int64_t hd);
void dt__cpu_attn_fwd(dt_dtype compute, float *out, float *saved, const float *qkv, int64_t B, int64_t T, int64_t H,
                      int64_t hd);
void dt__cpu_attn_bwd(dt_dtype compute, float *dqkv, float *scratch, const float *dout, const float *qkv,
                      const float *out, const float *saved, int64_t B, int64_t T, int64_t H, int64_t hd);
dt_status dt__cpu_xent(float *loss, float *dlogits, const float *logits, const int32_t *targets, int64_t rows,
                       int64_t classes, int64_t counted);
void dt__cpu_adamw(float *p, const float *g, float *m, float *v, int64_t n, float lr, float weight_decay, float beta1,
                   float beta2, float eps, float bc1, float bc2_sqrt);
void dt__cpu_sgd(float *p, const float *g, float *buf, int64_t n, float lr, float weight_decay, float momentum,
                 bool nesterov, bool first);

/* dt_blas_coretype_hint's choice from what OpenBLAS picked (its core name)
 * and what the CPU has: the OPENBLAS_CORETYPE to run, or NULL. */
const char *dt__blas_core_for(const char *core, bool avx512, bool avx2_fma);

#endif
