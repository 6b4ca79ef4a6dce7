/* The AMX block kernel: a 32 x 32 f32 block of C in four accumulator tiles
 * (tmm0-3), fed per 32 k by two A tiles (tmm4-5) and two B tiles (tmm6-7),
 * four TDPBF16PS (16 x 16 x 32 each) per four tile loads.  The packed A block
 * (32 rows x up to 512 k: 32 KiB) stays in L1 while the B panel streams from
 * L2.  TDPBF16PS adds each bf16 product pair to its f32 sum with fused
 * multiply-adds, rounding to nearest even; subnormal inputs and results
 * count as zero. */
#include <stdint.h>
#include <string.h>

#include "tensor/gemm_bf16.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define TARGET __attribute__((target("amx-tile,amx-bf16")))

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Every tile 16 rows x 64 bytes.  Read-only data, not a stack copy: gcc 12
 * drops stores to a local config as dead (the asm's memory operand does not
 * cover all 64 bytes), and LDTILECFG then faults on the half-written one. */
static const tile_config config __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

void TARGET dt__bf16_amx_begin(void) { _tile_loadconfig(&config); }

void TARGET dt__bf16_amx_end(void) { _tile_release(); }

void TARGET dt__bf16_block_amx(const uint16_t *a, const uint16_t *b0, const uint16_t *b1, int64_t ktiles,
                               const float *in, int64_t in_ld, float *out, int64_t out_ld)
{
    if (in) {
        size_t stride = (size_t)in_ld * sizeof(float);
        _tile_loadd(0, in, stride);
        _tile_loadd(1, in + 16, stride);
        _tile_loadd(2, in + 16 * in_ld, stride);
        _tile_loadd(3, in + 16 * in_ld + 16, stride);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int64_t kt = 0; kt < ktiles; kt++) {
        _tile_loadd(4, a + kt * 1024, 64);
        _tile_loadd(6, b0 + kt * 512, 64);
        _tile_loadd(7, b1 + kt * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, a + kt * 1024 + 512, 64);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    size_t stride = (size_t)out_ld * sizeof(float);
    _tile_stored(0, out, stride);
    _tile_stored(1, out + 16, stride);
    _tile_stored(2, out + 16 * out_ld, stride);
    _tile_stored(3, out + 16 * out_ld + 16, stride);
}
#else
void dt__bf16_amx_begin(void) {}
void dt__bf16_amx_end(void) {}
void dt__bf16_block_amx(const uint16_t *a, const uint16_t *b0, const uint16_t *b1, int64_t ktiles, const float *in,
                        int64_t in_ld, float *out, int64_t out_ld)
{
    (void)a, (void)b0, (void)b1, (void)ktiles, (void)in, (void)in_ld, (void)out, (void)out_ld; /* x86-64 only */
}
#endif
