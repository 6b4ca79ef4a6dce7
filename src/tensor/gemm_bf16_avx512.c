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

static void TARGET quarter(const uint16_t *a, const uint16_t *b, int64_t ktiles, float *acc, bool accumulate)
{
    __m512 s[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++)
        s[r] = accumulate ? _mm512_loadu_ps(acc + r * 32) : _mm512_setzero_ps();
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
        _mm512_storeu_ps(acc + r * 32, s[r]);
}

void TARGET dt__bf16_block_avx512(const uint16_t *a, const uint16_t *b0, const uint16_t *b1, int64_t ktiles,
                                  float *acc, bool accumulate)
{
    quarter(a, b0, ktiles, acc, accumulate);
    quarter(a, b1, ktiles, acc + 16, accumulate);
    quarter(a + 512, b0, ktiles, acc + 16 * 32, accumulate);
    quarter(a + 512, b1, ktiles, acc + 16 * 32 + 16, accumulate);
}
#else
void dt__bf16_block_avx512(const uint16_t *a, const uint16_t *b0, const uint16_t *b1, int64_t ktiles, float *acc,
                           bool accumulate)
{
    (void)a, (void)b0, (void)b1, (void)ktiles, (void)acc, (void)accumulate; /* never chosen off x86-64 */
}
#endif
