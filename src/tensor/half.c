/* f16 / bf16 storage: conversions between f32 arrays and half-precision ones,
 * rounding to nearest even, with the F16C instructions where the build has
 * them and the base layer's scalar conversions otherwise (and for tails). */
#include <string.h>

#if defined(__F16C__) && defined(__AVX2__)
#include <immintrin.h>
#define HAVE_F16C 1
#endif

#include "base/status.h"
#include "dtrain/tensor.h"
#include "tensor/threads.h"

#define GRAIN 65536

typedef struct {
    float *f;
    const float *fin;
    uint16_t *h;
    const uint16_t *hin;
    int bf16;
} half_args;

static void to_half_range(int64_t b, int64_t e, void *p)
{
    half_args *a = p;
    int64_t i = b;
    if (a->bf16) {
        for (; i < e; i++)
            a->h[i] = dt_f32_to_bf16(a->fin[i]);
        return;
    }
#ifdef HAVE_F16C
    for (; i + 8 <= e; i += 8)
        _mm_storeu_si128((__m128i *)(a->h + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(a->fin + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
    for (; i < e; i++)
        a->h[i] = dt_f32_to_f16(a->fin[i]);
}

static void from_half_range(int64_t b, int64_t e, void *p)
{
    half_args *a = p;
    int64_t i = b;
    if (a->bf16) {
        for (; i < e; i++)
            a->f[i] = dt_bf16_to_f32(a->hin[i]);
        return;
    }
#ifdef HAVE_F16C
    for (; i + 8 <= e; i += 8)
        _mm256_storeu_ps(a->f + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a->hin + i))));
#endif
    for (; i < e; i++)
        a->f[i] = dt_f16_to_f32(a->hin[i]);
}

static void add_half_range(int64_t b, int64_t e, void *p)
{
    half_args *a = p;
    int64_t i = b;
    if (a->bf16) {
        for (; i < e; i++)
            a->f[i] += dt_bf16_to_f32(a->hin[i]);
        return;
    }
#ifdef HAVE_F16C
    for (; i + 8 <= e; i += 8)
        _mm256_storeu_ps(a->f + i, _mm256_add_ps(_mm256_loadu_ps(a->f + i),
                                                 _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a->hin + i)))));
#endif
    for (; i < e; i++)
        a->f[i] += dt_f16_to_f32(a->hin[i]);
}

static dt_status check_half(dt_dtype half)
{
    if (half != DT_F16 && half != DT_BF16)
        return dt__fail(DT_ERR_INVALID, "half-precision storage must be f16 or bf16, not %s",
                        dt_dtype_name(half) ? dt_dtype_name(half) : "an unknown dtype");
    return DT_OK;
}

dt_status dt_vec_to_half(uint16_t *dst, const float *src, int64_t n, dt_dtype half)
{
    DT_CHECK(check_half(half));
    dt__parallel_for(n, GRAIN, to_half_range, &(half_args){.h = dst, .fin = src, .bf16 = half == DT_BF16});
    return DT_OK;
}

dt_status dt_vec_from_half(float *dst, const uint16_t *src, int64_t n, dt_dtype half)
{
    DT_CHECK(check_half(half));
    dt__parallel_for(n, GRAIN, from_half_range, &(half_args){.f = dst, .hin = src, .bf16 = half == DT_BF16});
    return DT_OK;
}

dt_status dt_vec_add_half(float *dst, const uint16_t *src, int64_t n, dt_dtype half)
{
    DT_CHECK(check_half(half));
    dt__parallel_for(n, GRAIN, add_half_range, &(half_args){.f = dst, .hin = src, .bf16 = half == DT_BF16});
    return DT_OK;
}

dt_status dt_tensor_to_half(const dt_tensor *src, dt_dtype half, dt_tensor_half *dst)
{
    DT_CHECK(check_half(half));
    dst->dtype = half;
    dst->ndim = src->ndim;
    memcpy(dst->shape, src->shape, sizeof dst->shape);
    return dt_vec_to_half(dst->data, src->data, dt_tensor_numel(src), half);
}

dt_status dt_tensor_from_half(const dt_tensor_half *src, dt_tensor *dst)
{
    dst->ndim = src->ndim;
    memcpy(dst->shape, src->shape, sizeof dst->shape);
    return dt_vec_from_half(dst->data, src->data, dt_tensor_numel(dst), src->dtype);
}
