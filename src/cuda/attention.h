/* The cuda backend's causal attention (src/cuda/attention.cu): the
 * attn_saved_floats, attn_scratch_floats, attn_fwd and attn_bwd entries of
 * the compute table (src/tensor/backend.h gives their contract).  Kernels
 * run on dt__cuda_stream() and report failures through the recorder of
 * src/cuda/cuda.h (DT_CUDA_LAUNCHED after each launch). */
#ifndef DT_CUDA_ATTENTION_H
#define DT_CUDA_ATTENTION_H

#include <stdint.h>

#include "dtrain/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Floats of `saved` (the row log-sum-exp, [B, H, T]) and of `scratch`. */
int64_t dt__cuda_attn_saved_floats(int64_t B, int64_t H, int64_t T);
int64_t dt__cuda_attn_scratch_floats(int64_t B, int64_t H, int64_t T, int64_t hd);
void dt__cuda_attn_fwd(dt_dtype compute, float *out, float *saved, const float *qkv, int64_t B, int64_t T, int64_t H,
                       int64_t hd);
void dt__cuda_attn_bwd(dt_dtype compute, float *dqkv, float *scratch, const float *dout, const float *qkv,
                       const float *out, const float *saved, int64_t B, int64_t T, int64_t H, int64_t hd);

#ifdef __cplusplus
}
#endif
#endif
