/* PowerSGD's per-matrix compute, the fast form (powersgd_fast.h says what
 * it computes against the reference in powersgd.c).
 *
 * Where the reference's time went (gpt-mini, r 32, one thread, 3.26 M
 * gradients: bench/ddp/powersgd_compute.c under perf): the Gram-Schmidt
 * about a third, walking P a column at a time (a stride of r floats, one
 * cache line per element) with a serial chain of double adds; the error
 * passes (M = G + E, then E = M - M', G = M') a quarter, scalar and over
 * memory the products had already left cache for; the products the rest,
 * a quarter of it OpenBLAS packing its operands.  Here the Gram-Schmidt
 * walks P's rows (contiguous, r-wide vectors of independent sums), the
 * error passes are vectorised and run on a block of rows while the
 * block's product is still in cache, and the blocks are small enough for
 * OpenBLAS's small-matrix kernels (no packing).  Together 0.60 of the
 * reference's time (bench/RESULTS.md). */
#include "parallel/ddp/powersgd_fast.h"

#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "tensor/threads.h"

/* Floats of M per block: 64 KiB for the products with r columns (M Q and
 * M^T P: the block stays in L1/L2, and OpenBLAS takes its small-matrix
 * kernels, which do not pack), 256 KiB for P Q^T (each block repacks Q^T:
 * fewer, larger ones).  Measured
 * on Zen 5 for gpt-mini's shapes (256 x 1024, 1024 x 256, 768 x 256, r 32):
 * 16 Ki floats beat 32 Ki-256 Ki by 10-30% for the first two, 64 Ki beat
 * 16 Ki by 10-25% for the third, and the whole matrix was the slowest for
 * all three.  The rows of a block, a multiple of 16 (whole micro-kernel
 * tiles), depend only on the shape. */
#define BLOCK_FLOATS 16384
#define DECODE_BLOCK_FLOATS 65536

static int64_t block_rows(int64_t rows, int64_t cols, int64_t floats)
{
    int64_t b = (floats / cols) & ~(int64_t)15;
    if (b < 16)
        b = 16;
    return b < rows ? b : rows;
}

typedef struct {
    float *g, *e;
    const float *ce, *p, *q;
    float *pw;
    int64_t rows, cols, block;
    int r;
} job;

static void encode_range(int64_t b0, int64_t b1, void *arg)
{
    const job *j = arg;
    for (int64_t b = b0; b < b1; b++) {
        int64_t i0 = b * j->block, n = (i0 + j->block < j->rows ? j->block : j->rows - i0);
        float *restrict g = j->g + i0 * j->cols;
        const float *restrict e = j->ce + i0 * j->cols;
        for (int64_t i = 0; i < n * j->cols; i++)
            g[i] += e[i];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, j->r, (int)j->cols, 1.0f, g,
                    (int)j->cols, j->q, j->r, 0.0f, j->pw + i0 * j->r, j->r);
    }
}

void dt__psgd_encode(float *g, const float *e, int64_t rows, int64_t cols, int r, const float *q, float *p)
{
    job j = {.g = g,
             .ce = e,
             .q = q,
             .pw = p,
             .rows = rows,
             .cols = cols,
             .block = block_rows(rows, cols, BLOCK_FLOATS),
             .r = r};
    dt__parallel_for((rows + j.block - 1) / j.block, 1, encode_range, &j);
}

/* The Gram-Schmidt's two passes for column i over the later columns
 * [lo, hi): their dots with column i, in double, row by row; then their
 * updates, and column i + 1's squared norm when it is in the range (the
 * next step's normalisation).  Column i is read times s (its 1 / norm in
 * the first pair of passes, then 1: x * 1 is x), and the first update pass
 * stores it so (`store`): no pass of its own for the scaling.  The dots use
 * fma: a float times a float is exact in double, so fma(a, x, acc) rounds
 * as acc + a * x does. */
static void dots_range(const float *p, int64_t rows, int r, int i, float s, int lo, int hi, double *dot)
{
    for (int l = lo; l < hi; l++)
        dot[l] = 0;
    for (int64_t j = 0; j < rows; j++) {
        const float *restrict row = p + j * r;
        double a = row[i] * s;
        for (int l = lo; l < hi; l++)
            dot[l] = fma(a, row[l], dot[l]);
    }
}

static double update_range(float *p, int64_t rows, int r, int i, float s, bool store, int lo, int hi,
                           const double *dot)
{
    double ss = 0;
    bool next = i + 1 >= lo && i + 1 < hi;
    for (int64_t j = 0; j < rows; j++) {
        float *restrict row = p + j * r;
        float a = row[i] * s;
        for (int l = lo; l < hi; l++)
            row[l] -= (float)dot[l] * a;
        if (next)
            ss += (double)row[i + 1] * row[i + 1];
        if (store)
            row[i] = a;
    }
    return ss;
}

/* The same over a window [l0, l0 + W) of fixed width, whose sums stay in
 * registers.  It may reach back to columns <= i: their dots are computed
 * and not used, and the update leaves them as they are (a select, not a
 * subtraction of 0, so that even an inf or NaN in column i changes nothing
 * there; column i itself is then stored after the window). */
#define W 32

static void dots_window(const float *p, int64_t rows, int r, int i, float s, int l0, double *dot)
{
    double acc[W] = {0};
    for (int64_t j = 0; j < rows; j++) {
        const float *restrict row = p + j * r + l0;
        double a = p[j * r + i] * s;
        for (int t = 0; t < W; t++)
            acc[t] = fma(a, row[t], acc[t]);
    }
    for (int t = 0; t < W; t++)
        if (l0 + t > i)
            dot[l0 + t] = acc[t];
}

static double update_window(float *p, int64_t rows, int r, int i, float s, bool store, int l0,
                            const double *dot)
{
    float c[W];
    int from = i + 1 - l0; /* the window's first column to update */
    for (int t = 0; t < W; t++)
        c[t] = t < from ? 0.0f : (float)dot[l0 + t];
    double ss = 0;
    int t1 = i + 1 - l0; /* column i + 1, when in the window */
    bool next = t1 >= 0 && t1 < W;
    for (int64_t j = 0; j < rows; j++) {
        float *restrict row = p + j * r + l0;
        float a = p[j * r + i] * s;
        /* column i + 1's new value, as the loop computes it, read before
         * the loop's wide store (not through it: a stalled forward) */
        float nv = next ? row[t1] - c[t1] * a : 0.0f;
        for (int t = 0; t < W; t++) {
            float v = row[t] - c[t] * a;
            row[t] = t < from ? row[t] : v;
        }
        ss += (double)nv * nv;
        if (store)
            p[j * r + i] = a;
    }
    return next ? ss : 0;
}

void dt__psgd_orthogonalise(float *p, int64_t rows, int r, double *dot)
{
    double ss = 0; /* column 0's squared norm; then each next column's, from an update pass */
    for (int64_t j = 0; j < rows; j++)
        ss += (double)p[j * r] * p[j * r];
    for (int i = 0; i < r; i++) {
        float inv = ss > 0 ? (float)(1.0 / sqrt(ss)) : 0.0f, s = inv;
        ss = 0;
        int hi = r; /* windows [hi - W, hi) from the right, then what is left of (i, hi) */
        for (; hi - W >= 0 && hi > i + 1; hi -= W, s = 1.0f) {
            dots_window(p, rows, r, i, s, hi - W, dot);
            ss += update_window(p, rows, r, i, s, hi == r, hi - W, dot);
        }
        if (hi > i + 1) {
            dots_range(p, rows, r, i, s, i + 1, hi, dot);
            ss += update_range(p, rows, r, i, s, hi == r, i + 1, hi, dot);
        } else if (hi == r) /* the last column: no later ones to pass over */
            for (int64_t j = 0; j < rows; j++)
                p[j * r + i] *= inv;
    }
}

static void project_range(int64_t b0, int64_t b1, void *arg)
{
    const job *j = arg;
    for (int64_t b = b0; b < b1; b++) {
        int64_t c0 = b * j->block, n = (c0 + j->block < j->cols ? j->block : j->cols - c0);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, j->r, (int)j->rows, 1.0f, j->g + c0,
                    (int)j->cols, j->p, j->r, 0.0f, j->pw + c0 * j->r, j->r);
    }
}

void dt__psgd_project(const float *g, int64_t rows, int64_t cols, int r, const float *p, float *q)
{
    job j = {.g = (float *)g,
             .p = p,
             .pw = q,
             .rows = rows,
             .cols = cols,
             .block = block_rows(cols, rows, BLOCK_FLOATS),
             .r = r};
    dt__parallel_for((cols + j.block - 1) / j.block, 1, project_range, &j);
}

static void decode_range(int64_t b0, int64_t b1, void *arg)
{
    const job *j = arg;
    for (int64_t b = b0; b < b1; b++) {
        int64_t i0 = b * j->block, n = (i0 + j->block < j->rows ? j->block : j->rows - i0);
        float *restrict g = j->g + i0 * j->cols, *restrict e = j->e + i0 * j->cols;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)j->cols, j->r, 1.0f,
                    j->p + i0 * j->r, j->r, j->q, j->r, 0.0f, e, (int)j->cols);
        for (int64_t i = 0; i < n * j->cols; i++) {
            float approx = e[i];
            e[i] = g[i] - approx;
            g[i] = approx;
        }
    }
}

void dt__psgd_decode(float *g, float *e, int64_t rows, int64_t cols, int r, const float *p, const float *q)
{
    job j = {.g = g,
             .e = e,
             .p = p,
             .q = q,
             .rows = rows,
             .cols = cols,
             .block = block_rows(rows, cols, DECODE_BLOCK_FLOATS),
             .r = r};
    dt__parallel_for((rows + j.block - 1) / j.block, 1, decode_range, &j);
}
