/* Array conversions between f32 and f16 / bf16, rounding to nearest even:
 * the F16C instructions where the build has them, the scalar conversions of
 * dtype.c for the rest and for tails.  Used by the tensor layer's threaded
 * kernels and by the communicator's half-precision allreduce. */
#include "base/half_convert.h"

#if defined(__F16C__) && defined(__AVX2__)
#include <immintrin.h>
#define HAVE_F16C 1
#endif

void dt__to_half_n(uint16_t *h, const float *f, size_t n, bool bf16)
{
    size_t i = 0;
    if (bf16) {
        for (; i < n; i++)
            h[i] = dt_f32_to_bf16(f[i]);
        return;
    }
#ifdef HAVE_F16C
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(f + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
    for (; i < n; i++)
        h[i] = dt_f32_to_f16(f[i]);
}

void dt__from_half_n(float *f, const uint16_t *h, size_t n, bool bf16)
{
    size_t i = 0;
    if (bf16) {
        for (; i < n; i++)
            f[i] = dt_bf16_to_f32(h[i]);
        return;
    }
#ifdef HAVE_F16C
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(f + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
#endif
    for (; i < n; i++)
        f[i] = dt_f16_to_f32(h[i]);
}

/* A NaN sum becomes the one quiet NaN (see base/redop.c). */
static inline float canon_nan(float x) { return x != x ? __builtin_nanf("") : x; }

void dt__add_half_n(float *f, const uint16_t *h, size_t n, bool bf16)
{
    size_t i = 0;
    if (bf16) {
        for (; i < n; i++)
            f[i] = canon_nan(f[i] + dt_bf16_to_f32(h[i]));
        return;
    }
#ifdef HAVE_F16C
    const __m256 qnan = _mm256_set1_ps(__builtin_nanf(""));
    for (; i + 8 <= n; i += 8) {
        __m256 sum = _mm256_add_ps(_mm256_loadu_ps(f + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
        _mm256_storeu_ps(f + i, _mm256_blendv_ps(sum, qnan, _mm256_cmp_ps(sum, sum, _CMP_UNORD_Q)));
    }
#endif
    for (; i < n; i++)
        f[i] = canon_nan(f[i] + dt_f16_to_f32(h[i]));
}
