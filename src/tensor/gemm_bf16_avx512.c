/* The AVX512_BF16 block kernel (CPUs without AMX, e.g. AMD Zen 4): each
 * 16 x 16 quarter of the 32 x 32 block in 16 zmm sums, one per row; per
 * k-pair, one load of B's 16 column pairs and, per row, VDPBF16PS with that
 * row's pair broadcast from the packed A tile.  VDPBF16PS adds the two
 * products of a pair with fused multiply-adds in f32 (round to nearest even,
 * subnormals as zero).  On Sapphire Rapids it issues at half the f32 FMA
 * rate, so this path gains little there; AMX is the one that does. */
#include <string.h>

#include "tensor/gemm_bf16.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

static void TARGET quarter(const uint16_t *a, const uint16_t *b, int64_t ktiles, const float *in, int64_t in_ld,
                           float *out, int64_t out_ld)
{
    __m512 s[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++)
        s[r] = in ? _mm512_loadu_ps(in + r * in_ld) : _mm512_setzero_ps();
    for (int64_t kt = 0; kt < ktiles; kt++) {
        const uint16_t *at = a + kt * 1024, *bt = b + kt * 512;
        for (int p = 0; p < 16; p++) {
            __m512bh bv = (__m512bh)_mm512_loadu_si512(bt + p * 32);
#pragma GCC unroll 16
            for (int r = 0; r < 16; r++) {
                int32_t pair;
                memcpy(&pair, at + r * 32 + p * 2, sizeof pair);
                s[r] = _mm512_dpbf16_ps(s[r], (__m512bh)_mm512_set1_epi32(pair), bv);
            }
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++)
        _mm512_storeu_ps(out + r * out_ld, s[r]);
}

void TARGET dt__bf16_block_avx512(const uint16_t *a, const uint16_t *b0, const uint16_t *b1, int64_t ktiles,
                                  const float *in, int64_t in_ld, float *out, int64_t out_ld)
{
    for (int q = 0; q < 4; q++) { /* quarters: rows q / 2, columns q % 2 */
        int64_t ri = (q / 2) * 16, cj = (q % 2) * 16;
        quarter(a + (q / 2) * 512, q % 2 ? b1 : b0, ktiles, in ? in + ri * in_ld + cj : NULL, in_ld,
                out + ri * out_ld + cj, out_ld);
    }
}
#else
void dt__bf16_block_avx512(const uint16_t *a, const uint16_t *b0, const uint16_t *b1, int64_t ktiles,
                           const float *in, int64_t in_ld, float *out, int64_t out_ld)
{
    (void)a, (void)b0, (void)b1, (void)ktiles, (void)in, (void)in_ld, (void)out, (void)out_ld; /* x86-64 only */
}
#endif
