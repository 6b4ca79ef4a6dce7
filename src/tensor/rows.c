/* Kernels over the rows of a [rows, cols] matrix, threaded so that every
 * result is bitwise the same whatever the thread count: work that writes
 * whole rows splits by rows; sums over rows split by columns, and each column
 * adds its rows in row order. */
#include <string.h>

#include "dtrain/tensor.h"
#include "tensor/threads.h"

#define GRAIN 32768 /* elements per chunk below which threading costs more than it saves */

typedef struct {
    float *out;
    const float *in, *ids;
    int64_t rows, cols;
} rows_args;

/* Chunks of rows (or columns) of at least GRAIN elements. */
static int64_t grain_of(int64_t other) { return other >= GRAIN ? 1 : (GRAIN + other - 1) / other; }

static void fill_range(int64_t b, int64_t e, void *p)
{
    rows_args *a = p;
    for (int64_t r = b; r < e; r++)
        memcpy(a->out + r * a->cols, a->in, (size_t)a->cols * sizeof(float));
}

void dt_rows_fill(float *y, const float *row, int64_t rows, int64_t cols)
{
    rows_args a = {.out = y, .in = row, .rows = rows, .cols = cols};
    dt__parallel_for(rows, grain_of(cols), fill_range, &a);
}

static void sum_range(int64_t b, int64_t e, void *p)
{
    rows_args *a = p;
    float *restrict out = a->out;
    for (int64_t r = 0; r < a->rows; r++) {
        const float *restrict x = a->in + r * a->cols;
        for (int64_t j = b; j < e; j++)
            out[j] += x[j];
    }
}

void dt_rows_sum_add(float *sum, const float *x, int64_t rows, int64_t cols)
{
    rows_args a = {.out = sum, .in = x, .rows = rows, .cols = cols};
    dt__parallel_for(cols, grain_of(rows), sum_range, &a);
}

static void gather_range(int64_t b, int64_t e, void *p)
{
    rows_args *a = p;
    for (int64_t r = b; r < e; r++)
        memcpy(a->out + r * a->cols, a->in + (int64_t)a->ids[r] * a->cols, (size_t)a->cols * sizeof(float));
}

void dt_rows_gather(float *out, const float *table, const float *ids, int64_t n, int64_t cols)
{
    rows_args a = {.out = out, .in = table, .ids = ids, .rows = n, .cols = cols};
    dt__parallel_for(n, grain_of(cols), gather_range, &a);
}

static void scatter_range(int64_t b, int64_t e, void *p)
{
    rows_args *a = p;
    for (int64_t r = 0; r < a->rows; r++) {
        float *restrict t = a->out + (int64_t)a->ids[r] * a->cols;
        const float *restrict x = a->in + r * a->cols;
        for (int64_t j = b; j < e; j++)
            t[j] += x[j];
    }
}

void dt_rows_scatter_add(float *table, const float *ids, const float *x, int64_t n, int64_t cols)
{
    rows_args a = {.out = table, .in = x, .ids = ids, .rows = n, .cols = cols};
    dt__parallel_for(cols, grain_of(n), scatter_range, &a);
}

/* Sums of squares over fixed blocks whose size depends only on n, added in
 * block order: the same bits for any thread count. */
#define SUMSQ_MAX_BLOCKS 1024
#define SUMSQ_MIN_BLOCK 65536

typedef struct {
    const float *x;
    int64_t n, block;
    double *partial;
} sumsq_args;

static void sumsq_range(int64_t b, int64_t e, void *p)
{
    sumsq_args *a = p;
    for (int64_t k = b; k < e; k++) {
        int64_t lo = k * a->block, hi = lo + a->block < a->n ? lo + a->block : a->n;
        /* 8 double lanes (a fixed order, vectorised), then their sum */
        double lane[8] = {0}, s = 0;
        const float *restrict x = a->x;
        int64_t i = lo;
        for (; i + 8 <= hi; i += 8)
            for (int l = 0; l < 8; l++)
                lane[l] += (double)x[i + l] * x[i + l];
        for (; i < hi; i++)
            s += (double)x[i] * x[i];
        for (int l = 0; l < 8; l++)
            s += lane[l];
        a->partial[k] = s;
    }
}

double dt_vec_sumsq(const float *x, int64_t n)
{
    if (n <= 0)
        return 0;
    int64_t block = (n + SUMSQ_MAX_BLOCKS - 1) / SUMSQ_MAX_BLOCKS;
    if (block < SUMSQ_MIN_BLOCK)
        block = SUMSQ_MIN_BLOCK;
    double partial[SUMSQ_MAX_BLOCKS];
    sumsq_args a = {x, n, block, partial};
    int64_t blocks = (n + block - 1) / block;
    dt__parallel_for(blocks, 1, sumsq_range, &a);
    double s = 0;
    for (int64_t k = 0; k < blocks; k++)
        s += partial[k];
    return s;
}
