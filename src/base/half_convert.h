/* f32 <-> f16 / bf16 over arrays (vectorised where the CPU allows). */
#ifndef DT_BASE_HALF_CONVERT_H
#define DT_BASE_HALF_CONVERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/base.h"

void dt__to_half_n(uint16_t *dst, const float *src, size_t n, bool bf16);
void dt__from_half_n(float *dst, const uint16_t *src, size_t n, bool bf16);
/* dst += src, in f32; a NaN sum becomes the positive quiet NaN (0x7fc00000). */
void dt__add_half_n(float *dst, const uint16_t *src, size_t n, bool bf16);

#endif
