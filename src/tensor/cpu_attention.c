/* The cpu backend's causal attention (moved from src/nn/attention.c): per
 * (batch, head) the score matrix P = softmax(Q K^T / sqrt(hd) + mask) is
 * formed in `saved` [B, H, T, T] and kept for the backward, which uses
 * `scratch` [B, H, T, T] for dP. */
#include <math.h>
#include <stdbool.h>

#include "dtrain/tensor.h"
#include "tensor/cpu_kernels.h"
#include "tensor/exp_avx512.h"
#include "tensor/threads.h"

/* Causal attention skips the products above the diagonal: rows are taken in
 * blocks of CAUSAL_ROWS, and a block ending at row r needs keys 0..r only
 * (at T = 128 that is 3/4 of the full products). */
#define CAUSAL_ROWS 64

/* The (batch, head) pairs are independent: the compute threads take ranges
 * of them, each head's small products running single-threaded. */
typedef struct {
    dt_dtype compute;
    bool fast_softmax; /* bf16 on AVX-512: softmax_causal_bf16, ds_rows_bf16 */
    int64_t T, H, hd;
    const float *qkv;
    float *p;            /* [B, H, T, T] */
    float *merged;       /* forward: [B, T, D] */
    const float *dmerged, *pin;
    float *dqkv, *dP; /* backward: [B, T, 3D], [B, H, T, T] */
} heads_args;

static void gemm(dt_dtype compute, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                 int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (compute == DT_BF16)
        dt_sgemm_bf16_ld(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else
        dt_sgemm_ld(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* Row i of P holds scores for keys 0..cols-1 (cols > i); only 0..i count. */
static void softmax_causal(float *P, int64_t T, int64_t i0, int64_t i1)
{
    for (int64_t i = i0; i < i1; i++) {
        float *row = P + i * T, mx = row[0];
        for (int64_t j = 1; j <= i; j++)
            mx = row[j] > mx ? row[j] : mx;
        double sum = 0;
        for (int64_t j = 0; j <= i; j++) {
            row[j] = expf(row[j] - mx);
            sum += row[j];
        }
        float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j <= i; j++)
            row[j] *= inv;
        for (int64_t j = i + 1; j < T; j++)
            row[j] = 0.0f; /* causal mask */
    }
}

#if defined(__x86_64__)
/* The same for bf16 training on AVX-512: exp from exp_avx512.h (within 2
 * ulp of expf), the sum in f32 lanes added in a fixed order; a row is one
 * thread's, so its bits do not depend on the thread count.  The products
 * around it round P and the scores to bf16 anyway. */
static __attribute__((target("avx512f"))) void softmax_causal_bf16(float *P, int64_t T, int64_t i0, int64_t i1)
{
    for (int64_t i = i0; i < i1; i++) {
        float *row = P + i * T;
        int64_t len = i + 1;
        __m512 mx = _mm512_set1_ps(row[0]);
        for (int64_t j = 0; j < len; j += 16) {
            __mmask16 m = len - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (len - j)) - 1);
            mx = _mm512_mask_max_ps(mx, m, mx, _mm512_maskz_loadu_ps(m, row + j));
        }
        __m512 top = _mm512_set1_ps(_mm512_reduce_max_ps(mx)), sum = _mm512_setzero_ps();
        for (int64_t j = 0; j < len; j += 16) {
            __mmask16 m = len - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (len - j)) - 1);
            __m512 e = _mm512_maskz_mov_ps(m, dt__exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, row + j), top)));
            _mm512_mask_storeu_ps(row + j, m, e);
            sum = _mm512_add_ps(sum, e);
        }
        __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
        for (int64_t j = 0; j < T; j += 16) { /* the causal mask's zeros past i */
            __mmask16 m = T - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (T - j)) - 1);
            __mmask16 live = j >= len ? 0 : len - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (len - j)) - 1);
            _mm512_mask_storeu_ps(row + j, m, _mm512_maskz_mul_ps(live, _mm512_maskz_loadu_ps(live, row + j), inv));
        }
    }
}

static bool avx512(void) { return __builtin_cpu_supports("avx512f"); }
#else
static void softmax_causal_bf16(float *P, int64_t T, int64_t i0, int64_t i1) { softmax_causal(P, T, i0, i1); }
static bool avx512(void) { return false; }
#endif

static void forward_heads(int64_t begin, int64_t end, void *arg)
{
    heads_args *a = arg;
    int64_t T = a->T, H = a->H, hd = a->hd, D = H * hd, ld = 3 * D;
    float scale = 1.0f / sqrtf((float)hd);
    for (int64_t bh = begin; bh < end; bh++) {
        int64_t b = bh / H, h = bh % H;
        const float *q = a->qkv + b * T * ld + h * hd, *k = q + D, *v = q + 2 * D; /* row stride 3 DL */
        float *P = a->p + (size_t)(bh * T * T), *o = a->merged + b * T * D + h * hd;
        for (int64_t i0 = 0; i0 < T; i0 += CAUSAL_ROWS) {
            int64_t rows = T - i0 < CAUSAL_ROWS ? T - i0 : CAUSAL_ROWS, keys = i0 + rows;
            gemm(a->compute, 0, 1, rows, keys, hd, scale, q + i0 * ld, ld, k, ld, 0.0f, P + i0 * T, T);
            if (a->fast_softmax)
                softmax_causal_bf16(P, T, i0, i0 + rows);
            else
                softmax_causal(P, T, i0, i0 + rows);
            /* O = P V, written straight into its columns of merged */
            gemm(a->compute, 0, 0, rows, hd, keys, 1.0f, P + i0 * T, T, v, ld, 0.0f, o + i0 * D, D);
        }
    }
}

/* dS = P * (dP - sum_j dP P), scaled, over rows i0.. of a block (g holds
 * dP and gets dS; keys past row i are zero): the dot in double. */
static void ds_rows(float *g, const float *pr, int64_t T, int64_t i0, int64_t rows, int64_t keys, float scale)
{
    for (int64_t r = 0; r < rows; r++) {
        int64_t i = i0 + r;
        float *gr = g + r * T;
        const float *prr = pr + r * T;
        double dot = 0;
        for (int64_t j = 0; j <= i; j++)
            dot += (double)gr[j] * prr[j];
        for (int64_t j = 0; j < keys; j++)
            gr[j] = j <= i ? prr[j] * (gr[j] - (float)dot) * scale : 0.0f;
    }
}

#if defined(__x86_64__)
/* The same for bf16 training on AVX-512: the dot in f32 lanes added in a
 * fixed order (a row is one thread's: the bits do not depend on the thread
 * count), where the scalar double loop cost a third of the backward; the
 * products around it round dS to bf16 anyway. */
static __attribute__((target("avx512f"))) void ds_rows_bf16(float *g, const float *pr, int64_t T, int64_t i0,
                                                            int64_t rows, int64_t keys, float scale)
{
    __m512 sc = _mm512_set1_ps(scale);
    for (int64_t r = 0; r < rows; r++) {
        int64_t len = i0 + r + 1;
        float *gr = g + r * T;
        const float *prr = pr + r * T;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t j = 0; j < len; j += 16) {
            __mmask16 m = len - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (len - j)) - 1);
            acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, gr + j), _mm512_maskz_loadu_ps(m, prr + j), acc);
        }
        __m512 dot = _mm512_set1_ps(_mm512_reduce_add_ps(acc));
        for (int64_t j = 0; j < keys; j += 16) {
            __mmask16 m = keys - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (keys - j)) - 1);
            __mmask16 live = j >= len ? 0 : len - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (len - j)) - 1);
            __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(live, gr + j), dot);
            _mm512_mask_storeu_ps(gr + j, m,
                                  _mm512_maskz_mul_ps(live, _mm512_mul_ps(_mm512_maskz_loadu_ps(live, prr + j), d), sc));
        }
    }
}
#else
static void ds_rows_bf16(float *g, const float *pr, int64_t T, int64_t i0, int64_t rows, int64_t keys, float scale)
{
    ds_rows(g, pr, T, i0, rows, keys, scale);
}
#endif

static void backward_heads(int64_t begin, int64_t end, void *arg)
{
    heads_args *a = arg;
    int64_t T = a->T, H = a->H, hd = a->hd, D = H * hd, ld = 3 * D;
    float scale = 1.0f / sqrtf((float)hd);
    for (int64_t bh = begin; bh < end; bh++) {
        int64_t b = bh / H, h = bh % H;
        const float *q = a->qkv + b * T * ld + h * hd, *k = q + D, *v = q + 2 * D;
        const float *P = a->pin + (size_t)(bh * T * T);
        float *dP = a->dP + (size_t)(bh * T * T);
        const float *dO = a->dmerged + b * T * D + h * hd; /* this head's columns, row stride D */
        float *dq = a->dqkv + b * T * ld + h * hd, *dk = dq + D, *dv = dq + 2 * D; /* row stride 3D */
        /* Row blocks from the last (which spans every key) to the first, so
         * that the first product into dK and dV sets them and the rest add. */
        int64_t last = (T - 1) / CAUSAL_ROWS * CAUSAL_ROWS;
        for (int64_t i0 = last; i0 >= 0; i0 -= CAUSAL_ROWS) {
            int64_t rows = T - i0 < CAUSAL_ROWS ? T - i0 : CAUSAL_ROWS, keys = i0 + rows;
            float beta = i0 == last ? 0.0f : 1.0f;
            float *g = dP + i0 * T;
            const float *pr = P + i0 * T;
            gemm(a->compute, 0, 1, rows, keys, hd, 1.0f, dO + i0 * D, D, v, ld, 0.0f, g, T);    /* dP = dO V^T */
            gemm(a->compute, 1, 0, keys, hd, rows, 1.0f, pr, T, dO + i0 * D, D, beta, dv, ld); /* dV += P^T dO */
            if (a->fast_softmax)
                ds_rows_bf16(g, pr, T, i0, rows, keys, scale);
            else
                ds_rows(g, pr, T, i0, rows, keys, scale);
            gemm(a->compute, 0, 0, rows, hd, keys, 1.0f, g, T, k, ld, 0.0f, dq + i0 * ld, ld);    /* dQ = dS K */
            gemm(a->compute, 1, 0, keys, hd, rows, 1.0f, g, T, q + i0 * ld, ld, beta, dk, ld); /* dK += dS^T Q */
        }
    }
}

int64_t dt__cpu_attn_saved_floats(int64_t B, int64_t H, int64_t T) { return B * H * T * T; }

int64_t dt__cpu_attn_scratch_floats(int64_t B, int64_t H, int64_t T, int64_t hd)
{
    (void)hd;
    return B * H * T * T;
}

void dt__cpu_attn_fwd(dt_dtype compute, float *out, float *saved, const float *qkv, int64_t B, int64_t T, int64_t H,
                      int64_t hd)
{
    heads_args a = {.compute = compute, .fast_softmax = compute == DT_BF16 && avx512(), .T = T, .H = H, .hd = hd,
                    .qkv = qkv, .p = saved, .merged = out};
    dt__parallel_for(B * H, 1, forward_heads, &a);
}

void dt__cpu_attn_bwd(dt_dtype compute, float *dqkv, float *scratch, const float *dout, const float *qkv,
                      const float *out, const float *saved, int64_t B, int64_t T, int64_t H, int64_t hd)
{
    (void)out;
    heads_args a = {.compute = compute, .fast_softmax = compute == DT_BF16 && avx512(), .T = T, .H = H, .hd = hd,
                    .qkv = qkv, .pin = saved, .dmerged = dout, .dqkv = dqkv, .dP = scratch};
    dt__parallel_for(B * H, 1, backward_heads, &a);
}
