#include "base/redop.h"

#include <stdint.h>

/* Plain loops the compiler vectorises (this file is built with -O3, which
 * versions them for the aliasing of a/b/out; see CMakeLists.txt).  A build
 * for a baseline x86-64 also gets an AVX2 clone of each, picked at load time;
 * a -march=native build already has the machine's widest vectors.  Element-
 * wise, so the vector and scalar paths give the same bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__AVX2__) && !defined(__SANITIZE_THREAD__)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

/* Integers: plain element-wise loops. */
#define DEFINE_INT(NAME, T)                                                           \
    VECTOR_CLONES static void NAME(T *out, const T *a, const T *b, size_t n, dt_redop op) \
    {                                                                                 \
        switch (op) {                                                                 \
        case DT_MIN:                                                                  \
            for (size_t i = 0; i < n; i++)                                            \
                out[i] = b[i] < a[i] ? b[i] : a[i];                                   \
            break;                                                                    \
        case DT_MAX:                                                                  \
            for (size_t i = 0; i < n; i++)                                            \
                out[i] = b[i] > a[i] ? b[i] : a[i];                                   \
            break;                                                                    \
        default:                                                                      \
            break;                                                                    \
        }                                                                             \
    }

/* Floats: every NaN result becomes one quiet NaN, QNAN (positive, payload
 * zero).  Which NaN the hardware returns depends on the operand order (x86
 * keeps the first operand's, and makes -NaN of inf - inf), and the order
 * differs between algorithms and between ranks of the direct exchange; one
 * fixed NaN makes the bits independent of all of that.  MIN and MAX return
 * QNAN when either operand is NaN (NaN propagates, as IEEE 754-2019's
 * minimum/maximum and torch.minimum): a quiet "ignore the NaN" would make
 * the result depend on which operand comes first.  The select compiles to a
 * compare and a blend, in the vector loops too (bench/RESULTS.md: no
 * measurable cost on large buffers, which are memory bound). */
#define CANON(T, QNAN, x) ((x) != (x) ? (T)(QNAN) : (x))
#define DEFINE_FLOAT(NAME, T, QNAN)                                                    \
    VECTOR_CLONES static void NAME(T *out, const T *a, const T *b, size_t n, dt_redop op) \
    {                                                                                 \
        switch (op) {                                                                 \
        case DT_SUM:                                                                  \
        case DT_AVG:                                                                  \
            for (size_t i = 0; i < n; i++) {                                          \
                T r = a[i] + b[i];                                                    \
                out[i] = CANON(T, QNAN, r);                                           \
            }                                                                         \
            break;                                                                    \
        case DT_PROD:                                                                 \
            for (size_t i = 0; i < n; i++) {                                          \
                T r = a[i] * b[i];                                                    \
                out[i] = CANON(T, QNAN, r);                                           \
            }                                                                         \
            break;                                                                    \
        case DT_MIN:                                                                  \
            for (size_t i = 0; i < n; i++) {                                          \
                T x = a[i], y = b[i], r = y < x ? y : x;                              \
                out[i] = x != x || y != y ? (T)(QNAN) : r;                            \
            }                                                                         \
            break;                                                                    \
        case DT_MAX:                                                                  \
            for (size_t i = 0; i < n; i++) {                                          \
                T x = a[i], y = b[i], r = y > x ? y : x;                              \
                out[i] = x != x || y != y ? (T)(QNAN) : r;                            \
            }                                                                         \
            break;                                                                    \
        default:                                                                      \
            break;                                                                    \
        }                                                                             \
    }

DEFINE_FLOAT(reduce_f32, float, __builtin_nanf(""))
DEFINE_FLOAT(reduce_f64, double, __builtin_nan(""))
DEFINE_INT(reduce_i32, int32_t)
DEFINE_INT(reduce_i64, int64_t)

/* u8 arithmetic wraps modulo 256; done in unsigned int to avoid promotion UB. */
static void reduce_u8(uint8_t *out, const uint8_t *a, const uint8_t *b, size_t n, dt_redop op)
{
    for (size_t i = 0; i < n; i++) {
        unsigned x = a[i], y = b[i];
        switch (op) {
        case DT_SUM:
        case DT_AVG: out[i] = (uint8_t)(x + y); break;
        case DT_PROD: out[i] = (uint8_t)(x * y); break;
        case DT_MIN: out[i] = (uint8_t)(y < x ? y : x); break;
        case DT_MAX: out[i] = (uint8_t)(y > x ? y : x); break;
        default: break;
        }
    }
}

/* Signed integer overflow is wrapped explicitly (two's complement) rather than UB. */
static void reduce_int_wrapping(void *out, const void *a, const void *b, size_t n, dt_dtype t,
                                dt_redop op)
{
    if (op == DT_MIN || op == DT_MAX) {
        if (t == DT_I32)
            reduce_i32(out, a, b, n, op);
        else
            reduce_i64(out, a, b, n, op);
        return;
    }
    if (t == DT_I32) {
        uint32_t *o = out;
        const uint32_t *x = a, *y = b;
        for (size_t i = 0; i < n; i++)
            o[i] = op == DT_PROD ? x[i] * y[i] : x[i] + y[i];
    } else {
        uint64_t *o = out;
        const uint64_t *x = a, *y = b;
        for (size_t i = 0; i < n; i++)
            o[i] = op == DT_PROD ? x[i] * y[i] : x[i] + y[i];
    }
}

typedef float (*to_f32_fn)(uint16_t);
typedef uint16_t (*from_f32_fn)(float);

/* Half types: widen a block to f32, combine, round back once. */
static void reduce_half(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n, dt_redop op,
                        to_f32_fn widen, from_f32_fn narrow)
{
    enum { BLOCK = 256 };
    float fa[BLOCK], fb[BLOCK];
    for (size_t base = 0; base < n; base += BLOCK) {
        size_t m = n - base < BLOCK ? n - base : BLOCK;
        for (size_t i = 0; i < m; i++) {
            fa[i] = widen(a[base + i]);
            fb[i] = widen(b[base + i]);
        }
        reduce_f32(fa, fa, fb, m, op);
        for (size_t i = 0; i < m; i++)
            out[base + i] = narrow(fa[i]);
    }
}

void dt__reduce(void *out, const void *a, const void *b, size_t count, dt_dtype t, dt_redop op)
{
    switch (t) {
    case DT_F32: reduce_f32(out, a, b, count, op); break;
    case DT_F64: reduce_f64(out, a, b, count, op); break;
    case DT_I32:
    case DT_I64: reduce_int_wrapping(out, a, b, count, t, op); break;
    case DT_U8: reduce_u8(out, a, b, count, op); break;
    case DT_F16: reduce_half(out, a, b, count, op, dt_f16_to_f32, dt_f32_to_f16); break;
    case DT_BF16: reduce_half(out, a, b, count, op, dt_bf16_to_f32, dt_f32_to_bf16); break;
    default: break;
    }
}

/* One contribution: nothing was combined, so a NaN is still the caller's
 * own (its sign and payload); it becomes the kernels' QNAN, as it would in
 * any combination.  Half types through f32 as reduce_half does (exact for
 * every other value). */
static void canonical_nans(void *buf, size_t count, dt_dtype t)
{
    switch (t) {
    case DT_F32: {
        float *p = buf;
        for (size_t i = 0; i < count; i++)
            p[i] = CANON(float, __builtin_nanf(""), p[i]);
        break;
    }
    case DT_F64: {
        double *p = buf;
        for (size_t i = 0; i < count; i++)
            p[i] = CANON(double, __builtin_nan(""), p[i]);
        break;
    }
    case DT_F16:
    case DT_BF16: {
        uint16_t *p = buf;
        for (size_t i = 0; i < count; i++) {
            float x = t == DT_F16 ? dt_f16_to_f32(p[i]) : dt_bf16_to_f32(p[i]);
            if (x != x)
                p[i] = t == DT_F16 ? dt_f32_to_f16(__builtin_nanf("")) : dt_f32_to_bf16(__builtin_nanf(""));
        }
        break;
    }
    default: break;
    }
}

void dt__reduce_finish(void *buf, size_t count, dt_dtype t, dt_redop op, int n)
{
    if (n <= 1) {
        canonical_nans(buf, count, t);
        return;
    }
    if (op != DT_AVG)
        return;
    switch (t) {
    case DT_F32: {
        float *p = buf;
        for (size_t i = 0; i < count; i++)
            p[i] /= (float)n;
        break;
    }
    case DT_F64: {
        double *p = buf;
        for (size_t i = 0; i < count; i++)
            p[i] /= (double)n;
        break;
    }
    case DT_I32: {
        int32_t *p = buf;
        for (size_t i = 0; i < count; i++)
            p[i] /= n;
        break;
    }
    case DT_I64: {
        int64_t *p = buf;
        for (size_t i = 0; i < count; i++)
            p[i] /= n;
        break;
    }
    case DT_U8: {
        uint8_t *p = buf;
        for (size_t i = 0; i < count; i++)
            p[i] = (uint8_t)(p[i] / n);
        break;
    }
    case DT_F16:
    case DT_BF16: {
        uint16_t *p = buf;
        for (size_t i = 0; i < count; i++)
            p[i] = t == DT_F16 ? dt_f32_to_f16(dt_f16_to_f32(p[i]) / (float)n)
                               : dt_f32_to_bf16(dt_bf16_to_f32(p[i]) / (float)n);
        break;
    }
    default: break;
    }
}
