/* PowerSGD's per-matrix compute, the fast form (powersgd_fast.h says what
 * it computes against the reference in powersgd.c).
 *
 * Where the reference's time went (gpt-mini, r 32, one thread, 3.26 M
 * gradients: bench/ddp/powersgd_compute.c under perf): the Gram-Schmidt
 * about a third, walking P a column at a time (a stride of r floats, one
 * cache line per element) with a serial chain of double adds; the error
 * passes (M = G + E, then E = M - M', G = M') a fifth, scalar and over
 * memory the products had already left cache for; the products themselves
 * a third.  Here the Gram-Schmidt walks P's rows (contiguous, r-wide
 * vectors of independent sums), the error passes are vectorised and run on
 * a block of rows while the block's product is still in cache. */
#include "parallel/ddp/powersgd_fast.h"

#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "tensor/threads.h"

/* Floats of M per block (128 KiB: several blocks fit Zen's and Intel's L2):
 * the rows of a block, a multiple of 16 (whole micro-kernel tiles), depend
 * only on the shape. */
#define BLOCK_FLOATS 32768

static int64_t block_rows(int64_t rows, int64_t cols)
{
    int64_t b = (BLOCK_FLOATS / cols) & ~(int64_t)15;
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
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, j->r, (int)j->cols, 1.0f, g, (int)j->cols,
                    j->q, j->r, 0.0f, j->pw + i0 * j->r, j->r);
    }
}

void dt__psgd_encode(float *g, const float *e, int64_t rows, int64_t cols, int r, const float *q, float *p)
{
    job j = {.g = g, .ce = e, .q = q, .pw = p, .rows = rows, .cols = cols, .block = block_rows(rows, cols), .r = r};
    dt__parallel_for((rows + j.block - 1) / j.block, 1, encode_range, &j);
}

/* The Gram-Schmidt's two passes for column i over the later columns
 * [lo, hi): their dots with column i (scaled already), in double, row by
 * row; then their updates, and column i + 1's squared norm when it is in
 * the range (the next step's normalisation). */
static void dots_range(const float *p, int64_t rows, int r, int i, int lo, int hi, double *dot)
{
    for (int l = lo; l < hi; l++)
        dot[l] = 0;
    for (int64_t j = 0; j < rows; j++) {
        const float *restrict row = p + j * r;
        double a = row[i];
        for (int l = lo; l < hi; l++)
            dot[l] += a * row[l];
    }
}

static double update_range(float *p, int64_t rows, int r, int i, int lo, int hi, const double *dot)
{
    double ss = 0;
    bool next = i + 1 >= lo && i + 1 < hi;
    for (int64_t j = 0; j < rows; j++) {
        float *restrict row = p + j * r;
        float a = row[i];
        for (int l = lo; l < hi; l++)
            row[l] -= (float)dot[l] * a;
        if (next)
            ss += (double)row[i + 1] * row[i + 1];
    }
    return ss;
}

/* The same over a window [l0, l0 + W) of fixed width, whose sums stay in
 * registers.  It may reach back to columns <= i: their dots are computed
 * and not used, and the update leaves them as they are (a select, not a
 * subtraction of 0, so that even an inf or NaN in column i changes nothing
 * there). */
#define W 32

static void dots_window(const float *p, int64_t rows, int r, int i, int l0, double *dot)
{
    double acc[W] = {0};
    for (int64_t j = 0; j < rows; j++) {
        const float *restrict row = p + j * r + l0;
        double a = p[j * r + i];
        for (int t = 0; t < W; t++)
            acc[t] += a * row[t];
    }
    for (int t = 0; t < W; t++)
        if (l0 + t > i)
            dot[l0 + t] = acc[t];
}

static double update_window(float *p, int64_t rows, int r, int i, int l0, const double *dot)
{
    float c[W];
    int from = i + 1 - l0; /* the window's first column to update */
    for (int t = 0; t < W; t++)
        c[t] = t < from ? 0.0f : (float)dot[l0 + t];
    double ss = 0;
    bool next = i + 1 >= l0 && i + 1 < l0 + W;
    for (int64_t j = 0; j < rows; j++) {
        float *restrict row = p + j * r + l0;
        float a = p[j * r + i];
        for (int t = 0; t < W; t++) {
            float v = row[t] - c[t] * a;
            row[t] = t < from ? row[t] : v;
        }
        if (next)
            ss += (double)p[j * r + i + 1] * p[j * r + i + 1];
    }
    return ss;
}

void dt__psgd_orthogonalise(float *p, int64_t rows, int r, double *dot)
{
    double ss = 0; /* column 0's squared norm; then each next column's, from an update pass */
    for (int64_t j = 0; j < rows; j++)
        ss += (double)p[j * r] * p[j * r];
    for (int i = 0; i < r; i++) {
        float inv = ss > 0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
        for (int64_t j = 0; j < rows; j++) /* a pass of its own: no narrow store under the wide loads */
            p[j * r + i] *= inv;
        ss = 0;
        int hi = r; /* windows [hi - W, hi) from the right, then what is left of (i, hi) */
        for (; hi - W >= 0 && hi > i + 1; hi -= W) {
            dots_window(p, rows, r, i, hi - W, dot);
            ss += update_window(p, rows, r, i, hi - W, dot);
        }
        if (hi > i + 1) {
            dots_range(p, rows, r, i, i + 1, hi, dot);
            ss += update_range(p, rows, r, i, i + 1, hi, dot);
        }
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
    job j = {.g = (float *)g, .p = p, .pw = q, .rows = rows, .cols = cols, .block = block_rows(cols, rows), .r = r};
    dt__parallel_for((cols + j.block - 1) / j.block, 1, project_range, &j);
}

static void decode_range(int64_t b0, int64_t b1, void *arg)
{
    const job *j = arg;
    for (int64_t b = b0; b < b1; b++) {
        int64_t i0 = b * j->block, n = (i0 + j->block < j->rows ? j->block : j->rows - i0);
        float *restrict g = j->g + i0 * j->cols, *restrict e = j->e + i0 * j->cols;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)j->cols, j->r, 1.0f, j->p + i0 * j->r,
                    j->r, j->q, j->r, 0.0f, e, (int)j->cols);
        for (int64_t i = 0; i < n * j->cols; i++) {
            float approx = e[i];
            e[i] = g[i] - approx;
            g[i] = approx;
        }
    }
}

void dt__psgd_decode(float *g, float *e, int64_t rows, int64_t cols, int r, const float *p, const float *q)
{
    job j = {.g = g, .e = e, .p = p, .q = q, .rows = rows, .cols = cols, .block = block_rows(rows, cols), .r = r};
    dt__parallel_for((rows + j.block - 1) / j.block, 1, decode_range, &j);
}
