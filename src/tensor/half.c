/* f16 / bf16 storage: the base layer's array conversions, threaded. */
#include <string.h>

#include "base/half_convert.h"
#include "base/status.h"
#include "dtrain/tensor.h"
#include "tensor/threads.h"

#define GRAIN 65536

typedef struct {
    float *f;
    const float *fin;
    uint16_t *h;
    const uint16_t *hin;
    bool bf16;
} half_args;

static void to_half_range(int64_t b, int64_t e, void *p)
{
    half_args *a = p;
    dt__to_half_n(a->h + b, a->fin + b, (size_t)(e - b), a->bf16);
}

static void from_half_range(int64_t b, int64_t e, void *p)
{
    half_args *a = p;
    dt__from_half_n(a->f + b, a->hin + b, (size_t)(e - b), a->bf16);
}

static void add_half_range(int64_t b, int64_t e, void *p)
{
    half_args *a = p;
    dt__add_half_n(a->f + b, a->hin + b, (size_t)(e - b), a->bf16);
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
