/* GEMM through OpenBLAS and the element-wise vector kernels. */
#include <cblas.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/tensor.h"
#include "tensor/cpu_kernels.h"
#include "tensor/threads.h"

#define GRAIN 32768 /* elements per chunk below which threading costs more than it saves */

char *openblas_get_corename(void); /* from OpenBLAS; no header declares these portably */
char *openblas_get_config(void);
int openblas_get_num_threads(void);

void dt_blas_describe(const char **core, int *threads, const char **config)
{
    if (core)
        *core = openblas_get_corename();
    if (threads)
        *threads = openblas_get_num_threads();
    if (config)
        *config = openblas_get_config();
}

const char *dt_blas_coretype_hint(void)
{
    /* A set OPENBLAS_CORETYPE is the user's choice, or a re-executed
     * dtrain's: it stands, whatever it names (OpenBLAS only reads it, it
     * never writes it back). */
    const char *env = getenv("OPENBLAS_CORETYPE"), *reexec = getenv("DT_BLAS_REEXEC"),
               *force = getenv("DT_BLAS_REEXEC_FORCE");
    if ((env && *env) || (reexec && *reexec && strcmp(reexec, "1") != 0)) /* 0, or a value dt_env_check refuses */
        return NULL;
    const char *core = openblas_get_corename();
    if (!core)
        return NULL;
    bool avx512 = false, avx2 = false;
#if defined(__x86_64__)
    __builtin_cpu_init(); /* (libgcc's checks include the OS saving the registers: XCR0) */
    avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    const char *better = dt__blas_core_for(core, avx512, avx2);
    if (better)
        return better;
    /* Tests take the re-execution path on every machine: with the core
     * OpenBLAS picked itself, so the kernels, and the results, are the same. */
    return force && !strcmp(force, "1") ? core : NULL;
}

const char *dt__blas_core_for(const char *core, bool avx512, bool avx2_fma)
{
    static const char *const with_avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    static const char *const with_avx2[] = {"Haswell", "Zen"};
    for (size_t i = 0; i < sizeof with_avx512 / sizeof *with_avx512; i++)
        if (!strcmp(core, with_avx512[i]))
            return NULL;
    if (avx512)
        return "SKYLAKEX";
    for (size_t i = 0; i < sizeof with_avx2 / sizeof *with_avx2; i++)
        if (!strcmp(core, with_avx2[i]))
            return NULL;
    return avx2_fma ? "HASWELL" : NULL; /* (older cores: what OpenBLAS picked is what the CPU has) */
}

typedef struct {
    int trans_a, trans_b;
    int64_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const float *a, *b;
    float *c;
    bool split_rows; /* parts are row blocks of C (else column blocks) */
} gemm_args;

static void gemm_call(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                      int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)m,
                (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

/* Blocks are counted in units of 16 rows/columns so that every part keeps
 * whole micro-kernel tiles. */
#define GEMM_UNIT 16

static void gemm_range(int64_t begin, int64_t end, void *p)
{
    gemm_args *g = p;
    if (g->split_rows) {
        int64_t i0 = begin * GEMM_UNIT, i1 = end * GEMM_UNIT < g->m ? end * GEMM_UNIT : g->m;
        const float *a = g->trans_a ? g->a + i0 : g->a + i0 * g->lda;
        gemm_call(g->trans_a, g->trans_b, i1 - i0, g->n, g->k, g->alpha, a, g->lda, g->b, g->ldb, g->beta,
                  g->c + i0 * g->ldc, g->ldc);
    } else {
        int64_t j0 = begin * GEMM_UNIT, j1 = end * GEMM_UNIT < g->n ? end * GEMM_UNIT : g->n;
        const float *b = g->trans_b ? g->b + j0 * g->ldb : g->b + j0;
        gemm_call(g->trans_a, g->trans_b, g->m, j1 - j0, g->k, g->alpha, g->a, g->lda, b, g->ldb, g->beta,
                  g->c + j0, g->ldc);
    }
}

void dt_sgemm_ld(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (m == 0 || n == 0)
        return;
    int threads = dt_get_threads(); /* also pins OpenBLAS to one thread before its first use */
    /* Below about 2^20 multiply-adds a part costs less than waking a thread.
     * The split depends only on the shape and the thread count, so results
     * repeat bitwise for a given thread count; across thread counts they
     * agree to rounding (OpenBLAS has separate kernels for small products). */
    if (threads <= 1 || dt__in_parallel() || (double)m * (double)n * (double)k < (double)(1 << 20)) {
        gemm_call(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    gemm_args g = {trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, a, b, c, m >= n};
    int64_t units = ((g.split_rows ? m : n) + GEMM_UNIT - 1) / GEMM_UNIT;
    dt__parallel_for(units, 1, gemm_range, &g);
}

void dt_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
              const float *b, float beta, float *c)
{
    dt_sgemm_ld(trans_a, trans_b, m, n, k, alpha, a, trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
}

typedef struct {
    float *y;
    const float *x, *x2;
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

static void add_range(int64_t b, int64_t e, void *p)
{
    vec_args *v = p;
    float *restrict y = v->y;
    const float *restrict x = v->x, *restrict x2 = v->x2;
    for (int64_t i = b; i < e; i++)
        y[i] = x[i] + x2[i];
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
void dt_vec_add(float *y, const float *a, const float *b, int64_t n)
{
    dt__parallel_for(n, GRAIN, add_range, &(vec_args){.y = y, .x = a, .x2 = b});
}
void dt_vec_scale(float *x, float alpha, int64_t n)
{
    dt__parallel_for(n, GRAIN, scale_range, &(vec_args){.y = x, .alpha = alpha});
}
