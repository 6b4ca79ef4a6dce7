/* Packing for the bf16 GEMM (layouts in gemm_bf16.h), converting f32 to bf16
 * on the way: one pass over each operand.  The rounding is dt_f32_to_bf16's
 * (to nearest even, NaNs kept quiet), done on the integer bits so the packed
 * values equal the scalar conversion's bit for bit, subnormals included
 * (VCVTNE2PS2BF16 would flush those to zero).
 *
 * A row of k values that is contiguous in memory fills a tile row (a plain
 * store); a k-pair of rows contiguous along the other dimension fills a tile
 * column (16 dwords scattered 64 bytes apart). */
#include <string.h>

#include "tensor/gemm_bf16.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define TARGET __attribute__((target("avx512f,avx512bw")))

static inline __mmask16 TARGET first(int64_t count)
{
    return count >= 16 ? (__mmask16)0xffff : count <= 0 ? (__mmask16)0 : (__mmask16)((1u << count) - 1);
}

/* The bf16 of each lane in the high half of its dword: round to nearest even,
 * and a NaN stays a NaN (quiet bit set) instead of rounding to infinity. */
static inline __m512i TARGET round_bf16(__m512 v)
{
    __m512i x = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_or_epi32(r, nan, x, _mm512_set1_epi32(0x00400000));
}

/* 32 bf16 from the high halves of lo's then hi's dwords: in order (`pairs`
 * false) or interleaved lo0 hi0 lo1 hi1 ... (true: the VNNI k-pairs). */
static inline __m512i TARGET join(__m512i lo, __m512i hi, bool pairs)
{
    static const uint16_t seq[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
                                     33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
    static const uint16_t zip[32] = {1,  33, 3,  35, 5,  37, 7,  39, 9,  41, 11, 43, 13, 45, 15, 47,
                                     17, 49, 19, 51, 21, 53, 23, 55, 25, 57, 27, 59, 29, 61, 31, 63};
    return _mm512_permutex2var_epi16(lo, _mm512_loadu_si512(pairs ? zip : seq), hi);
}

/* 32 contiguous values p[0 .. count) (zeros beyond) as 32 bf16. */
static inline __m512i TARGET load_run(const float *p, int64_t count)
{
    __m512 lo = _mm512_maskz_loadu_ps(first(count), p);
    __m512 hi = count > 16 ? _mm512_maskz_loadu_ps(first(count - 16), p + 16) : _mm512_setzero_ps();
    return join(round_bf16(lo), round_bf16(hi), false);
}

/* Rows p0 and p1 (NULL: zeros), 16 values each (count of them), as 16 pairs. */
static inline __m512i TARGET load_pair(const float *p0, const float *p1, int64_t count)
{
    __mmask16 m = first(count);
    __m512 x = p0 ? _mm512_maskz_loadu_ps(m, p0) : _mm512_setzero_ps();
    __m512 y = p1 ? _mm512_maskz_loadu_ps(m, p1) : _mm512_setzero_ps();
    return join(round_bf16(x), round_bf16(y), true);
}

/* 16 dwords into a tile's column: dword r goes 64 * r bytes on. */
static inline void TARGET store_column(uint16_t *tile_col, __m512i v)
{
    const __m512i rows = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(64));
    _mm512_i32scatter_epi32(tile_col, rows, v, 1);
}

/* Element (r, c) of op(X): pointer, valid only inside the matrix. */
static inline const float *at(const dt__bf16_operand *o, int64_t r, int64_t c)
{
    return o->trans ? o->x + c * o->ld + r : o->x + r * o->ld + c;
}

void TARGET dt__bf16_pack_a(const dt__bf16_operand *a, int64_t i0, int rows, int64_t kcount, int64_t ktiles,
                            uint16_t *out)
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
    /* stored k-major: a k-pair over 16 rows is a tile column; read k-row by
     * k-row, fetching 16 rows ahead (short runs: the prefetchers lag) */
    for (int64_t k = 0; k < ktiles * 32; k += 2)
        for (int g = 0; g < blocks * 2; g++) {
            int64_t n = rows - g * 16;
            if (n > 0 && k + 17 < kcount) {
                _mm_prefetch((const char *)at(a, i0 + g * 16, k + 16), _MM_HINT_T0);
                _mm_prefetch((const char *)at(a, i0 + g * 16, k + 17), _MM_HINT_T0);
            }
            __m512i v = _mm512_setzero_si512();
            if (n > 0 && k < kcount)
                v = load_pair(at(a, i0 + g * 16, k), k + 1 < kcount ? at(a, i0 + g * 16, k + 1) : NULL, n);
            store_column(out + (g / 2) * ktiles * 1024 + ((k / 32) * 2 + g % 2) * 512 + (k % 32), v);
        }
}

void TARGET dt__bf16_pack_b(const dt__bf16_operand *b, int64_t j0, int64_t cols, int64_t ntiles, int64_t kcount,
                            int64_t ktiles, uint16_t *out)
{
    if (b->trans) { /* column j's k values are contiguous: tile columns, read column by column */
        for (int64_t nt = 0; nt < ntiles; nt++) {
            int64_t n = cols - nt * 16; /* columns left in this group */
            for (int j = 0; j < 16; j++)
                for (int64_t kt = 0; kt < ktiles; kt++) {
                    __m512i v = j < n && kcount > kt * 32 ? load_run(at(b, kt * 32, j0 + nt * 16 + j), kcount - kt * 32)
                                                          : _mm512_setzero_si512();
                    store_column(out + (nt * ktiles + kt) * 512 + 2 * j, v);
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
void dt__bf16_pack_a(const dt__bf16_operand *a, int64_t i0, int rows, int64_t kcount, int64_t ktiles, uint16_t *out)
{
    (void)a, (void)i0, (void)rows, (void)kcount, (void)ktiles, (void)out; /* never chosen */
}
void dt__bf16_pack_b(const dt__bf16_operand *b, int64_t j0, int64_t cols, int64_t ntiles, int64_t kcount,
                     int64_t ktiles, uint16_t *out)
{
    (void)b, (void)j0, (void)cols, (void)ntiles, (void)kcount, (void)ktiles, (void)out;
}
#endif
