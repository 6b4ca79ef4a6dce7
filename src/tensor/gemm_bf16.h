/* The bf16 GEMM's parts (dt_sgemm_bf16_ld, gemm_bf16.c): the kernel choice,
 * packing with the f32 -> bf16 conversion fused in, and the 32 x 32 block
 * kernels (AMX tiles, AVX512_BF16 dot products).
 *
 * Packed layouts, bf16 (uint16_t), k padded with zeros to whole 32s:
 *  - A, 32-row blocks one after the other: tiles of 16 rows x 32 k, 1 KiB
 *    each, row stride 64 bytes (what _tile_loadd reads); in a block, tile
 *    (kt, rt), rows rt*16.., k kt*32.., at (kt * 2 + rt) * 512.
 *  - B, a panel of columns: VNNI tiles of 16 k-pairs x 16 columns, element
 *    (k, j) at (k/2) * 32 + j * 2 + k % 2 within its tile; the tiles of one
 *    16-column group are consecutive in k: tile (kt, nt) at (nt * ktiles + kt)
 *    * 512.  Columns are padded with zeros to whole 32s.
 * Padding is zero, so edge blocks compute with the full kernels. */
#ifndef DT_TENSOR_GEMM_BF16_H
#define DT_TENSOR_GEMM_BF16_H

#include <stdbool.h>
#include <stdint.h>

typedef enum { DT__BF16_EMULATED = 0, DT__BF16_AVX512 = 1, DT__BF16_AMX = 2, DT__BF16_ONEDNN = 3 } dt__bf16_kernel;

/* The own kernel dt_sgemm_bf16_ld runs (DT_BF16_GEMM when it names one, else
 * the best the CPU and OS allow), chosen once: what every shape runs on
 * unless dt__bf16_kernel_for sends it to oneDNN. */
dt__bf16_kernel dt__bf16_kernel_choice(void);
/* The path of one product: oneDNN (DT_BF16_GEMM=onednn), else
 * dt__bf16_kernel_choice(). */
dt__bf16_kernel dt__bf16_kernel_for(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k);
const char *dt__bf16_kernel_name(dt__bf16_kernel k);
/* Whether this CPU (and, for AMX, the OS; for oneDNN, the build) can run k;
 * *why (may be NULL) gets the reason when not.  Asking about AMX requests
 * the permission once. */
bool dt__bf16_kernel_available(dt__bf16_kernel k, const char **why);

/* The oneDNN path (gemm_bf16_dnnl.c): whether this build has oneDNN, and
 * the product itself, dt_sgemm_bf16_ld's contract; false (a warning once, C
 * untouched) when oneDNN refuses it, and the caller runs its own kernel. */
bool dt__bf16_dnnl_built(void);
bool dt__bf16_dnnl_gemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                        int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* C = bias + op(A) op(B), bias a row of n values standing for every row of
 * C: the bits of filling C's rows with the bias, then dt_sgemm_bf16_ld with
 * alpha 1 and beta 1, without that pass over C (the forward of a linear
 * layer).  Only on the AVX512_BF16 kernel; false (C untouched) elsewhere,
 * and the caller fills and runs dt_sgemm_bf16_ld. */
bool dt__sgemm_bf16_bias(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                         const float *b, int64_t ldb, const float *bias, float *c, int64_t ldc);

/* C += A^T B (A stored k-major: a[k * lda + i]) and sums[i] += A^T's row
 * i summed over k, in f32, k after k (dt_rows_sum_add's order and bits), as
 * A is packed: a linear layer's weight and bias gradients, without the pass
 * over A that the bias gradient took.  On the AVX512_BF16 and AMX kernels;
 * false (C and sums untouched) elsewhere. */
bool dt__sgemm_bf16_sums(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                         float *c, int64_t ldc, float *sums);

/* One operand as stored: element (r, c) of op(X) is x[r * ld + c], or
 * x[c * ld + r] when trans. */
typedef struct {
    const float *x;
    int64_t ld;
    int trans;
} dt__bf16_operand;

/* Pack rows [i0, i0 + rows) (rows <= 128) and k [0, kcount) (ktiles
 * tiles) of op(A) into ceil(rows / 32) consecutive 32-row blocks of ktiles
 * k-tiles each (the rest zero).  sums (NULL: none; a transposed A only):
 * sums[r] += op(A)[i0 + r][k] in f32 for k = 0, 1, .. in turn (the f32
 * values, not the rounded ones). */
void dt__bf16_pack_a(const dt__bf16_operand *a, int64_t i0, int rows, int64_t kcount, int64_t ktiles, uint16_t *out,
                     float *sums);
/* Pack columns [j0, j0 + cols) and k [0, kcount) (ktiles tiles) of
 * op(B) into ntiles 16-column groups (ntiles even, ntiles * 16 >= cols). */
void dt__bf16_pack_b(const dt__bf16_operand *b, int64_t j0, int64_t cols, int64_t ntiles, int64_t kcount,
                     int64_t ktiles, uint16_t *out);

/* out (32 x 32 f32, row stride out_ld floats) = in + A B over ktiles
 * k-tiles, in being 32 x 32 f32 with row stride in_ld (NULL: zeros; it may be
 * out itself): a is a packed A block, b0 and b1 the first k-tile of two
 * neighbouring 16-column groups of a packed B panel. */
typedef void (*dt__bf16_block_fn)(const uint16_t *a, const uint16_t *b0, const uint16_t *b1, int64_t ktiles,
                                  const float *in, int64_t in_ld, float *out, int64_t out_ld);
void dt__bf16_block_amx(const uint16_t *a, const uint16_t *b0, const uint16_t *b1, int64_t ktiles, const float *in,
                        int64_t in_ld, float *out, int64_t out_ld);
void dt__bf16_block_avx512(const uint16_t *a, const uint16_t *b0, const uint16_t *b1, int64_t ktiles,
                           const float *in, int64_t in_ld, float *out, int64_t out_ld);
/* AMX tile state is per thread: a thread loads the configuration before its
 * first block and releases the tiles after its last. */
void dt__bf16_amx_begin(void);
void dt__bf16_amx_end(void);

#endif
