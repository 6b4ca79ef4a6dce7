/* Packing for the bf16 GEMM (layouts in gemm_bf16.h), converting f32 to bf16
 * on the way: one pass over each operand.  The conversion is VCVTNE2PS2BF16
 * (AVX512_BF16, which every kernel that packs has): two f32 vectors to one
 * of 32 bf16, round to nearest even, a NaN stays a NaN (quiet).  It flushes
 * subnormal inputs to zero, where dt_f32_to_bf16 keeps them; the tile and
 * dot-product instructions count subnormal inputs as zero anyway, so no
 * product changes.
 *
 * Every store is a whole 64-byte tile row.  A run of k values that is
 * contiguous in memory is a tile row of A (a row) or a tile column of B (a
 * column, as 16 k-pairs); k-pairs of rows contiguous along the other
 * dimension are a tile row of B or a tile column of A.  The tile columns are
 * gathered 16 at a time in registers and transposed (16 x 16 dwords, each
 * dword a k-pair) into tile rows. */
#include <string.h>

#include "tensor/gemm_bf16.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

static inline __mmask16 TARGET first(int64_t count)
{
    return count >= 16 ? (__mmask16)0xffff : count <= 0 ? (__mmask16)0 : (__mmask16)((1u << count) - 1);
}

/* 32 contiguous values p[0 .. count) (zeros beyond) as 32 bf16. */
static inline __m512i TARGET load_run(const float *p, int64_t count)
{
    __m512 lo = _mm512_maskz_loadu_ps(first(count), p);
    __m512 hi = count > 16 ? _mm512_maskz_loadu_ps(first(count - 16), p + 16) : _mm512_setzero_ps();
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* Rows p0 and p1 (NULL: zeros), 16 values each (count of them), as 16
 * k-pairs: dword r is (p0[r], p1[r]). */
static inline __m512i TARGET load_pair(const float *p0, const float *p1, int64_t count)
{
    static const uint16_t zip[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                     8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    __mmask16 m = first(count);
    __m512 x = p0 ? _mm512_maskz_loadu_ps(m, p0) : _mm512_setzero_ps();
    __m512 y = p1 ? _mm512_maskz_loadu_ps(m, p1) : _mm512_setzero_ps();
    return _mm512_permutexvar_epi16(_mm512_loadu_si512(zip), (__m512i)_mm512_cvtne2ps_pbh(y, x));
}

/* v[j] dword r becomes v[r] dword j: unpack pairs of dwords, then of
 * qwords (each 128-bit lane a 4 x 4 transpose), then move whole lanes. */
static inline __attribute__((always_inline)) void TARGET transpose16(__m512i v[16])
{
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) { /* u[4i + c], lane l: rows 4i .. 4i + 3 of column 4l + c */
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int c = 0; c < 4; c++) {
        __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44), v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee);
        __m512i w0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
        __m512i w1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
        v[c] = _mm512_shuffle_i32x4(v0, w0, 0x88);
        v[4 + c] = _mm512_shuffle_i32x4(v0, w0, 0xdd);
        v[8 + c] = _mm512_shuffle_i32x4(v1, w1, 0x88);
        v[12 + c] = _mm512_shuffle_i32x4(v1, w1, 0xdd);
    }
}

/* Element (r, c) of op(X): pointer, valid only inside the matrix. */
static inline const float *at(const dt__bf16_operand *o, int64_t r, int64_t c)
{
    return o->trans ? o->x + c * o->ld + r : o->x + r * o->ld + c;
}

void TARGET dt__bf16_pack_a(const dt__bf16_operand *a, int64_t i0, int rows, int64_t kcount, int64_t ktiles,
                            uint16_t *out, float *sums)
{
    int64_t blocks = (rows + 31) / 32;
    if (!a->trans) { /* row i's k values are contiguous: tile rows, read row by row */
        for (int r = 0; r < blocks * 32; r++) {
            uint16_t *row = out + (r / 32) * ktiles * 1024 + (r % 32 / 16) * 512 + (r % 16) * 32;
            for (int64_t kt = 0; kt < ktiles; kt++) {
                __m512i v = r < rows && kcount > kt * 32 ? load_run(at(a, i0 + r, kt * 32), kcount - kt * 32)
                                                         : _mm512_setzero_si512();
                _mm512_storeu_si512(row + kt * 1024, v);
            }
        }
        return;
    }
    /* stored k-major: the k-pairs of 16 rows are 16 tile columns, read
     * k-row by k-row then transposed; the 16-row groups inner, so that each
     * k-row is read in one run of up to `rows` values.  The row sums add the
     * f32 values one k after the other, as the k-rows come. */
    for (int64_t kt = 0; kt < ktiles; kt++)
        for (int g = 0; g < blocks * 2; g++) {
            int64_t n = rows - g * 16;
            __m512i v[16];
            if (sums && n > 0 && kt * 32 < kcount) {
                __mmask16 m = first(n);
                __m512 acc = _mm512_maskz_loadu_ps(m, sums + g * 16);
                for (int64_t k = kt * 32; k < kcount && k < kt * 32 + 32; k++)
                    acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, at(a, i0 + g * 16, k)));
                _mm512_mask_storeu_ps(sums + g * 16, m, acc);
            }
            for (int p = 0; p < 16; p++) {
                int64_t k = kt * 32 + 2 * p;
                if (n > 0 && k + 33 < kcount) { /* the next k-tile's rows: short runs, the prefetchers lag */
                    _mm_prefetch((const char *)at(a, i0 + g * 16, k + 32), _MM_HINT_T0);
                    _mm_prefetch((const char *)at(a, i0 + g * 16, k + 33), _MM_HINT_T0);
                }
                v[p] = n > 0 && k < kcount
                           ? load_pair(at(a, i0 + g * 16, k), k + 1 < kcount ? at(a, i0 + g * 16, k + 1) : NULL, n)
                           : _mm512_setzero_si512();
            }
            transpose16(v);
            uint16_t *tile = out + (g / 2) * ktiles * 1024 + (kt * 2 + g % 2) * 512;
            for (int r = 0; r < 16; r++)
                _mm512_storeu_si512(tile + r * 32, v[r]);
        }
}

void TARGET dt__bf16_pack_b(const dt__bf16_operand *b, int64_t j0, int64_t cols, int64_t ntiles, int64_t kcount,
                            int64_t ktiles, uint16_t *out)
{
    if (b->trans) { /* column j's k values are contiguous: 16 columns' runs, transposed into tile rows */
        for (int64_t nt = 0; nt < ntiles; nt++) {
            int64_t n = cols - nt * 16; /* columns left in this group */
            for (int64_t kt = 0; kt < ktiles; kt++) {
                __m512i v[16];
                for (int j = 0; j < 16; j++)
                    v[j] = j < n && kcount > kt * 32 ? load_run(at(b, kt * 32, j0 + nt * 16 + j), kcount - kt * 32)
                                                     : _mm512_setzero_si512();
                transpose16(v);
                uint16_t *tile = out + (nt * ktiles + kt) * 512;
                for (int p = 0; p < 16; p++)
                    _mm512_storeu_si512(tile + p * 32, v[p]);
            }
        }
        return;
    }
    /* a k-pair of rows is a tile row in each 16-column group: read row by row */
    for (int64_t k = 0; k < ktiles * 32; k += 2)
        for (int64_t nt = 0; nt < ntiles; nt++) {
            int64_t n = cols - nt * 16;
            __m512i v = _mm512_setzero_si512();
            if (k < kcount && n > 0)
                v = load_pair(at(b, k, j0 + nt * 16), k + 1 < kcount ? at(b, k + 1, j0 + nt * 16) : NULL, n);
            _mm512_storeu_si512(out + (nt * ktiles + k / 32) * 512 + (k % 32) / 2 * 32, v);
        }
}
#else
void dt__bf16_pack_a(const dt__bf16_operand *a, int64_t i0, int rows, int64_t kcount, int64_t ktiles, uint16_t *out,
                     float *sums)
{
    (void)a, (void)i0, (void)rows, (void)kcount, (void)ktiles, (void)out, (void)sums; /* never chosen */
}
void dt__bf16_pack_b(const dt__bf16_operand *b, int64_t j0, int64_t cols, int64_t ntiles, int64_t kcount,
                     int64_t ktiles, uint16_t *out)
{
    (void)b, (void)j0, (void)cols, (void)ntiles, (void)kcount, (void)ktiles, (void)out;
}
#endif
