/* GELU (tanh approximation) for bf16 training on the cpu: one pass each
 * way, nothing kept for the backward but the input.  The forward of the f32
 * kernels (cpu_activations.c) writes tanh(u) to memory for the backward and
 * reads it back there (8 bytes of traffic per element, and a [rows, 4 dim]
 * tensor kept per layer); this one recomputes tanh in the backward, from an
 * own AVX-512 exp:
 *
 *   tanh(u) = (e - 1) / (e + 1), e = exp(2u), u clamped to [-9, 9] (tanh
 *   is within 3e-8 of +-1 beyond), exp from tensor/exp_avx512.h.
 *
 * Its absolute error against glibc's tanhf is at most 1.2e-7 (2 ulp of 1,
 * measured on u = -12 .. 12 in steps of 6.25e-6 and tiny u; the GELU tests
 * in tests/test_engine.c bound it through y and dx): GELU needs tanh's absolute
 * error (y = x (1 + t) / 2), and in bf16 training the next product rounds y
 * to 8 bits anyway.  Every element takes the same instructions (the tail
 * through a mask), so the result does not depend on where the thread
 * count's chunks begin, and the backward's tanh is the forward's, bit for
 * bit.  Only on CPUs with AVX-512 F; elsewhere the entries decline and the
 * layer keeps the f32 kernels. */
#include <stdbool.h>
#include <stdint.h>

#include "tensor/cpu_kernels.h"
#include "tensor/exp_avx512.h"
#include "tensor/threads.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define GRAIN 16384
#define TARGET __attribute__((target("avx512f")))
#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

/* tanh(u) = (e - 1) / (e + 1), e = exp(2u), u in [-9, 9] */
static inline __m512 TARGET tanh16(__m512 u)
{
    __m512 z = _mm512_mul_ps(_mm512_set1_ps(2.0f),
                             _mm512_min_ps(_mm512_max_ps(u, _mm512_set1_ps(-9.0f)), _mm512_set1_ps(9.0f)));
    __m512 e = dt__exp16(z);
    return _mm512_div_ps(_mm512_sub_ps(e, _mm512_set1_ps(1.0f)), _mm512_add_ps(e, _mm512_set1_ps(1.0f)));
}

/* u = sqrt(2/pi) (x + 0.044715 x^3) */
static inline __m512 TARGET inner(__m512 x)
{
    __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    return _mm512_mul_ps(_mm512_set1_ps(GELU_K), _mm512_fmadd_ps(_mm512_set1_ps(GELU_C), x3, x));
}

static inline __mmask16 TARGET lanes(int64_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }

typedef struct {
    float *out;
    const float *x, *dy;
} gelu_args;

static void TARGET fwd_range(int64_t b, int64_t e, void *p)
{
    const gelu_args *a = p;
    for (int64_t i = b; i < e; i += 16) {
        __mmask16 m = lanes(e - i);
        __m512 x = _mm512_maskz_loadu_ps(m, a->x + i), t = tanh16(inner(x));
        __m512 y = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(_mm512_set1_ps(1.0f), t));
        _mm512_mask_storeu_ps(a->out + i, m, y);
    }
}

/* dx = dy (0.5 (1 + t) + 0.5 x (1 - t^2) du/dx), du/dx = sqrt(2/pi) (1 + 3 0.044715 x^2) */
static void TARGET bwd_range(int64_t b, int64_t e, void *p)
{
    const gelu_args *a = p;
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    for (int64_t i = b; i < e; i += 16) {
        __mmask16 m = lanes(e - i);
        __m512 x = _mm512_maskz_loadu_ps(m, a->x + i), dy = _mm512_maskz_loadu_ps(m, a->dy + i);
        __m512 t = tanh16(inner(x));
        __m512 du = _mm512_mul_ps(_mm512_set1_ps(GELU_K),
                                  _mm512_fmadd_ps(_mm512_set1_ps(3.0f * GELU_C), _mm512_mul_ps(x, x), one));
        __m512 slope = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_fnmadd_ps(t, t, one)), du);
        slope = _mm512_fmadd_ps(half, _mm512_add_ps(one, t), slope);
        _mm512_mask_storeu_ps(a->out + i, m, _mm512_mul_ps(dy, slope));
    }
}

static bool have_avx512(void)
{
    static int known; /* 0 unknown, 1 yes, 2 no: a benign race, every thread finds the same */
    if (!known)
        known = __builtin_cpu_supports("avx512f") ? 1 : 2;
    return known == 1;
}

bool dt__cpu_gelu_fwd_bf16(float *y, const float *x, int64_t n)
{
    if (!have_avx512())
        return false;
    dt__parallel_for(n, GRAIN, fwd_range, &(gelu_args){.out = y, .x = x});
    return true;
}

bool dt__cpu_gelu_bwd_bf16(float *dx, const float *dy, const float *x, int64_t n)
{
    if (!have_avx512())
        return false;
    dt__parallel_for(n, GRAIN, bwd_range, &(gelu_args){.out = dx, .x = x, .dy = dy});
    return true;
}
#else
bool dt__cpu_gelu_fwd_bf16(float *y, const float *x, int64_t n)
{
    (void)y, (void)x, (void)n;
    return false;
}

bool dt__cpu_gelu_bwd_bf16(float *dx, const float *dy, const float *x, int64_t n)
{
    (void)dx, (void)dy, (void)x, (void)n;
    return false;
}
#endif
