/* exp of 16 floats with AVX-512 F, for the bf16 training kernels (GELU's
 * tanh in cpu_gelu_bf16.c, attention's softmax in cpu_attention.c):
 * exp(z) = 2^n p(r), n = round(z / ln 2), r = z - n ln 2 (ln 2 in two parts,
 * |r| <= ln 2 / 2) and p Cephes' expf polynomial, within 2 ulp of expf on
 * z in [-87, 88] (clamped there: no infinity, the smallest results
 * subnormal).  The same instructions for every lane, so a value's bits do
 * not depend on the lane or the tail mask it was computed in. */
#ifndef DT_TENSOR_EXP_AVX512_H
#define DT_TENSOR_EXP_AVX512_H

#if defined(__x86_64__)
#include <immintrin.h>

static inline __attribute__((target("avx512f"), always_inline)) __m512 dt__exp16(__m512 z)
{
    z = _mm512_min_ps(_mm512_max_ps(z, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(z, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), z);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}
#endif

#endif
