/* Data type names and sizes, and IEEE half / bfloat16 conversions. */
#include <string.h>

#include "base/status.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[DT_DTYPE_COUNT] = {
    [DT_F32] = {"f32", 4}, [DT_F64] = {"f64", 8}, [DT_F16] = {"f16", 2}, [DT_BF16] = {"bf16", 2},
    [DT_I32] = {"i32", 4}, [DT_I64] = {"i64", 8}, [DT_U8] = {"u8", 1},
};

static const char *redops[DT_REDOP_COUNT] = {
    [DT_SUM] = "sum", [DT_PROD] = "prod", [DT_MIN] = "min", [DT_MAX] = "max", [DT_AVG] = "avg",
};

size_t dt_dtype_size(dt_dtype t)
{
    return ((unsigned)t < DT_DTYPE_COUNT) ? dtypes[t].size : 0;
}

const char *dt_dtype_name(dt_dtype t)
{
    return ((unsigned)t < DT_DTYPE_COUNT) ? dtypes[t].name : NULL;
}

const char *dt_redop_name(dt_redop op)
{
    return ((unsigned)op < DT_REDOP_COUNT) ? redops[op] : NULL;
}

dt_status dt_dtype_parse(const char *name, dt_dtype *out)
{
    for (int i = 0; i < DT_DTYPE_COUNT; i++)
        if (name && strcmp(name, dtypes[i].name) == 0) {
            *out = (dt_dtype)i;
            return DT_OK;
        }
    return dt__fail(DT_ERR_INVALID, "unknown dtype '%s' (expected f32, f64, f16, bf16, i32, i64 or u8)",
                    name ? name : "(null)");
}

dt_status dt_redop_parse(const char *name, dt_redop *out)
{
    for (int i = 0; i < DT_REDOP_COUNT; i++)
        if (name && strcmp(name, redops[i]) == 0) {
            *out = (dt_redop)i;
            return DT_OK;
        }
    return dt__fail(DT_ERR_INVALID, "unknown reduction op '%s' (expected sum, prod, min, max or avg)",
                    name ? name : "(null)");
}

static uint32_t f32_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
}

static float bits_f32(uint32_t x)
{
    float f;
    memcpy(&f, &x, 4);
    return f;
}

uint16_t dt_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf, or NaN kept quiet with its top payload bits */
        return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u | ((absx >> 13) & 0x3ffu) : 0));
    if (absx >= 0x477ff000u) /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (absx < 0x38800000u) { /* below 2^-14: half subnormal or zero */
        if (absx < 0x33000000u)
            return (uint16_t)sign;
        uint32_t e = absx >> 23, m = (absx & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = (absx - 0x38000000u) >> 13, rem = absx & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1)))
        r++;
    return (uint16_t)(sign | r);
}

float dt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        if (m == 0)
            return bits_f32(sign);
        e = 113;
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        return bits_f32(sign | (e << 23) | ((m & 0x3ffu) << 13));
    }
    if (e == 31)
        return bits_f32(sign | 0x7f800000u | (m << 13));
    return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t dt_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float dt_bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }
