/* GEMM through OpenBLAS and the element-wise vector kernels. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/tensor.h"
#include "tensor/threads.h"

#define GRAIN 32768 /* elements per chunk below which threading costs more than it saves */

char *openblas_get_corename(void); /* from OpenBLAS */

const char *dt_blas_coretype_hint(void)
{
    /* OpenBLAS records its own detection in OPENBLAS_CORETYPE as it loads, so a
     * value equal to the detected core name is OpenBLAS's, anything else the
     * user's choice, which stands. */
    const char *core = openblas_get_corename(), *env = getenv("OPENBLAS_CORETYPE");
    if (!core || (strcmp(core, "Haswell") != 0 && strcmp(core, "Zen") != 0))
        return NULL; /* already AVX-512 kernels, or not an x86 build */
    if (env && strcmp(env, core) != 0)
        return NULL;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return "SKYLAKEX";
#endif
    return NULL;
}

void dt_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
              const float *b, float beta, float *c)
{
    if (m == 0 || n == 0)
        return;
    dt_get_threads(); /* make sure OpenBLAS was pinned before its first use */
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)m,
                (int)n, (int)k, alpha, a, trans_a ? (int)m : (int)k, b, trans_b ? (int)k : (int)n, beta, c, (int)n);
}

typedef struct {
    float *y;
    const float *x;
    float alpha;
} vec_args;

static void zero_range(int64_t b, int64_t e, void *p)
{
    vec_args *v = p;
    memset(v->y + b, 0, (size_t)(e - b) * sizeof(float));
}

static void copy_range(int64_t b, int64_t e, void *p)
{
    vec_args *v = p;
    memcpy(v->y + b, v->x + b, (size_t)(e - b) * sizeof(float));
}

static void axpy_range(int64_t b, int64_t e, void *p)
{
    vec_args *v = p;
    float *restrict y = v->y;
    const float *restrict x = v->x;
    for (int64_t i = b; i < e; i++)
        y[i] += v->alpha * x[i];
}

static void scale_range(int64_t b, int64_t e, void *p)
{
    vec_args *v = p;
    for (int64_t i = b; i < e; i++)
        v->y[i] *= v->alpha;
}

void dt_vec_zero(float *x, int64_t n) { dt__parallel_for(n, GRAIN, zero_range, &(vec_args){.y = x}); }
void dt_vec_copy(float *dst, const float *src, int64_t n)
{
    dt__parallel_for(n, GRAIN, copy_range, &(vec_args){.y = dst, .x = src});
}
void dt_vec_axpy(float *y, float alpha, const float *x, int64_t n)
{
    dt__parallel_for(n, GRAIN, axpy_range, &(vec_args){.y = y, .x = x, .alpha = alpha});
}
void dt_vec_scale(float *x, float alpha, int64_t n)
{
    dt__parallel_for(n, GRAIN, scale_range, &(vec_args){.y = x, .alpha = alpha});
}

/* Sequential on purpose: a fixed summation order keeps norms (and so gradient
 * clipping) bitwise reproducible whatever the thread count. */
double dt_vec_sumsq(const float *x, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}
