/* PowerSGD's per-matrix compute, the fast form (powersgd_fast.c); powersgd.c
 * keeps the reference form (one cblas_sgemm per product over the whole
 * matrix, separate error passes, Gram-Schmidt column by column) and picks
 * one per run (DT_POWERSGD_KERNELS).
 *
 * M is rows x cols row-major in the gradients g, its error e beside it (the
 * same layout), P rows x r, Q cols x r, all row-major and contiguous.  What
 * the fast form computes is the reference's to f32 rounding:
 *  - the Gram-Schmidt is the same operations in the same order, bitwise;
 *  - the error passes are the same element-wise operations, bitwise;
 *  - the products are cut into blocks of rows (of columns for Q = M^T P)
 *    whose size depends only on the shape, one cblas_sgemm each: OpenBLAS
 *    may pick other kernels for a block than for the whole, so they agree
 *    to rounding, and the blocks run on dtrain's compute threads (results
 *    independent of their number).
 * tests/test_compress.c forces both and compares them. */
#ifndef DT_PARALLEL_DDP_POWERSGD_FAST_H
#define DT_PARALLEL_DDP_POWERSGD_FAST_H

#include <stdint.h>

/* M = G + E (into g), then P = M Q, in row blocks: each block's add is
 * still in cache for its product. */
void dt__psgd_encode(float *g, const float *e, int64_t rows, int64_t cols, int r, const float *q, float *p);

/* P's columns made orthonormal: modified Gram-Schmidt, sums in double in
 * row order, a zero column stays zero (the reference's arithmetic, bitwise),
 * done a row of P at a time instead of a column at a time: per column, one
 * pass for its dot products with every later column and one for their
 * updates (which also sums the next column's norm).  dot: r doubles of
 * scratch. */
void dt__psgd_orthogonalise(float *p, int64_t rows, int r, double *dot);
/* The reference's, a column at a time (powersgd.c). */
void dt__psgd_orthogonalise_ref(float *p, int64_t rows, int r);

/* Q = M^T P. */
void dt__psgd_project(const float *g, int64_t rows, int64_t cols, int r, const float *p, float *q);

/* M' = P Q^T; E = M - M' and G = M', in row blocks: each block of M' is
 * written to E's place and read back from cache. */
void dt__psgd_decode(float *g, float *e, int64_t rows, int64_t cols, int r, const float *p, const float *q);

#endif
