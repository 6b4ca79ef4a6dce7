/* The bf16 GEMM through oneDNN's matmul primitive (Debian's libdnnl, 2.x C
 * API): the path dt_sgemm_bf16_ld takes for the shapes where it beats the
 * own kernels (gemm_bf16_cpu.c chooses; DT_BF16_GEMM=onednn forces it).
 *
 * Steps of one call:
 *  1. op(A) and op(B) are rounded to bf16 into dense copies in their stored
 *     orientation (a transposed operand stays transposed: oneDNN reads it
 *     through strides), round to nearest even with subnormal inputs flushed
 *     to zero, as the own kernels' packing does, so every path computes on
 *     the same bf16 values.  Threaded over rows.
 *  2. C is split between the compute pool's threads as the own kernels
 *     split it (row blocks when m >= n, else column blocks, whole 32s, from
 *     the shape and thread count alone), and each part is one matmul
 *     primitive run on the calling thread with an OpenMP team of 1, so
 *     oneDNN's threads never compete with the pool's.  alpha is the
 *     primitive's output scale, beta a sum post-op.
 *
 * Primitives are made once per (part shape, transposes, strides, alpha,
 * beta) and kept for the process (a training run has a few dozen shapes);
 * streams are per thread.  oneDNN executes one primitive from several
 * threads at once (its scratchpad is per thread).
 *
 * Numerics: f32 sums of exact bf16 products, in an order of oneDNN's
 * choosing: its brgemm kernels sum each element over k in blocks whose size
 * depends on k alone, so splitting m or n between threads gives the same
 * bits (test_gemm_bf16 checks it for the shapes it runs); other oneDNN
 * versions or ISAs may differ. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/half_convert.h"
#include "base/log.h"
#include "dtrain/tensor.h"
#include "tensor/gemm_bf16.h"
#include "tensor/threads.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#ifndef DT_HAVE_DNNL

bool dt__bf16_dnnl_built(void) { return false; }

bool dt__bf16_dnnl_gemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                        int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb;
    (void)beta, (void)c, (void)ldc;
    return false;
}

#else

#include <dnnl.h>
#include <dnnl_debug.h>

void omp_set_num_threads(int n); /* libgomp, under oneDNN (the sources are not built with -fopenmp) */

bool dt__bf16_dnnl_built(void) { return true; }

enum {
    UNIT = 32,       /* the split between threads: whole 32s, as the own kernels' */
    ENTRIES = 256,   /* primitives kept; a shape beyond them runs on the own kernel */
    PARTS = 8,       /* the split of a large product (below) */
};

/* ---- the engine, the primitive cache and the per-thread streams ---- */

typedef struct {
    int64_t m, n, k, sa, sb, ldc; /* the part's shape and the strides of its operands */
    int ta, tb;
    uint32_t alpha, beta; /* bit patterns */
} prim_key;

typedef struct {
    prim_key key;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t a, b, c;
} prim_entry;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static dnnl_status_t engine_status;
static pthread_key_t stream_key;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static prim_entry cache[ENTRIES]; /* entries [0, cached) are made, read-only after */
static int cached;

static void stream_destroy(void *s) { dnnl_stream_destroy(s); }

static void init(void)
{
    engine_status = dnnl_engine_create(&engine, dnnl_cpu, 0);
    if (pthread_key_create(&stream_key, stream_destroy) != 0 && engine_status == dnnl_success)
        engine_status = dnnl_out_of_memory;
}

/* A failure is reported once; the own kernel then runs that call. */
static bool failed(const char *what, dnnl_status_t st)
{
    static atomic_flag warned = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&warned))
        DT_WARN("bf16 GEMM: oneDNN %s failed (%s); the own kernel runs instead", what, dnnl_status2str(st));
    return false;
}

static dnnl_stream_t thread_stream(void)
{
    dnnl_stream_t s = pthread_getspecific(stream_key);
    if (!s && dnnl_stream_create(&s, engine, dnnl_stream_default_flags) == dnnl_success)
        pthread_setspecific(stream_key, s);
    return s;
}

static dnnl_status_t entry_make(const prim_key *key, prim_entry *e)
{
    dnnl_dims_t ad = {key->m, key->k}, bd = {key->k, key->n}, cd = {key->m, key->n};
    dnnl_dims_t as = {key->ta ? 1 : key->sa, key->ta ? key->sa : 1};
    dnnl_dims_t bs = {key->tb ? 1 : key->sb, key->tb ? key->sb : 1}, cs = {key->ldc, 1};
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_desc_t pd = NULL;
    float alpha, beta;
    memcpy(&alpha, &key->alpha, sizeof alpha);
    memcpy(&beta, &key->beta, sizeof beta);
    e->key = *key;
    e->prim = NULL;
    dnnl_status_t st = dnnl_memory_desc_init_by_strides(&e->a, 2, ad, dnnl_bf16, as);
    if (st == dnnl_success)
        st = dnnl_memory_desc_init_by_strides(&e->b, 2, bd, dnnl_bf16, bs);
    if (st == dnnl_success)
        st = dnnl_memory_desc_init_by_strides(&e->c, 2, cd, dnnl_f32, cs);
    if (st == dnnl_success)
        st = dnnl_matmul_desc_init(&md, &e->a, &e->b, NULL, &e->c);
    if (st == dnnl_success)
        st = dnnl_primitive_attr_create(&attr);
    if (st == dnnl_success && alpha != 1.0f)
        st = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha);
    if (st == dnnl_success && beta != 0.0f) {
        st = dnnl_post_ops_create(&ops);
        if (st == dnnl_success)
            st = dnnl_post_ops_append_sum(ops, beta);
        if (st == dnnl_success)
            st = dnnl_primitive_attr_set_post_ops(attr, ops);
    }
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL);
    if (st == dnnl_success)
        st = dnnl_primitive_create(&e->prim, pd);
    dnnl_primitive_desc_destroy(pd); /* each destroy accepts NULL */
    dnnl_post_ops_destroy(ops);
    dnnl_primitive_attr_destroy(attr);
    return st;
}

static bool key_eq(const prim_key *x, const prim_key *y)
{
    return x->m == y->m && x->n == y->n && x->k == y->k && x->sa == y->sa && x->sb == y->sb && x->ldc == y->ldc &&
           x->ta == y->ta && x->tb == y->tb && x->alpha == y->alpha && x->beta == y->beta;
}

/* The cached entry for key, made on first use; NULL when oneDNN refuses it
 * (*st says why) or the cache is full (*st dnnl_success). */
static const prim_entry *lookup(const prim_key *key, dnnl_status_t *st)
{
    *st = dnnl_success;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < cached; i++)
        if (key_eq(&cache[i].key, key)) {
            pthread_mutex_unlock(&cache_lock);
            return &cache[i];
        }
    *st = cached < ENTRIES ? entry_make(key, &cache[cached]) : dnnl_success;
    const prim_entry *e = *st == dnnl_success && cached < ENTRIES ? &cache[cached++] : NULL;
    pthread_mutex_unlock(&cache_lock);
    return e;
}

/* ---- step 1: the bf16 copies ---- */

typedef struct {
    const float *src;
    int64_t ld, cols;
    uint16_t *dst; /* rows x cols, dense */
} convert_job;

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void convert_rows_bf16(int64_t begin, int64_t end,
                                                                                      void *p)
{
    const convert_job *j = p;
    for (int64_t r = begin; r < end; r++) {
        const float *s = j->src + r * j->ld;
        uint16_t *d = j->dst + r * j->cols;
        for (int64_t x = 0; x < j->cols; x += 32) { /* VCVTNE2PS2BF16: nearest even, subnormals flushed */
            int64_t left = j->cols - x;
            __mmask16 lo = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
            __mmask16 hi = left >= 32 ? (__mmask16)0xffff : left > 16 ? (__mmask16)((1u << (left - 16)) - 1) : 0;
            __m512i v = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, s + x + 16),
                                                     _mm512_maskz_loadu_ps(lo, s + x));
            _mm512_mask_storeu_epi16(d + x, left >= 32 ? ~(__mmask32)0 : (((__mmask32)1 << left) - 1), v);
        }
    }
}
#endif

/* Without AVX512_BF16: dt__to_half_n's rounding, then subnormals to zero. */
static void convert_rows_plain(int64_t begin, int64_t end, void *p)
{
    const convert_job *j = p;
    for (int64_t r = begin; r < end; r++) {
        uint16_t *d = j->dst + r * j->cols;
        dt__to_half_n(d, j->src + r * j->ld, (size_t)j->cols, true);
        for (int64_t x = 0; x < j->cols; x++)
            if ((d[x] & 0x7f80) == 0)
                d[x] &= 0x8000;
    }
}

static void convert(const float *src, int64_t rows, int64_t cols, int64_t ld, uint16_t *dst)
{
    convert_job j = {src, ld, cols, dst};
    int64_t grain = 1 + 32768 / (cols > 0 ? cols : 1);
#if defined(__x86_64__)
    if (dt__bf16_kernel_available(DT__BF16_AVX512, NULL)) {
        dt__parallel_for(rows, grain, convert_rows_bf16, &j);
        return;
    }
#endif
    dt__parallel_for(rows, grain, convert_rows_plain, &j);
}

/* ---- step 2: the parts ---- */

typedef struct {
    int ta, tb;
    int64_t m, n, k, ldc;
    uint32_t alpha, beta;
    const uint16_t *a, *b; /* dense bf16, stored orientation */
    float *c;
    bool split_rows;
    int64_t units, parts;         /* part p: units [p * units / parts, (p + 1) * units / parts) */
    const prim_entry *entry[3];   /* the primitives of the parts' sizes, made beforehand: q or q + 1
                                     units, the last one maybe cut by the edge of C */
    int entries;
    volatile dnnl_status_t error; /* a run that failed (not expected once made) */
} job;

static void part_bounds(const job *g, int64_t p, int64_t *i0, int64_t *i1, int64_t *j0, int64_t *j1)
{
    int64_t lo = p * g->units / g->parts * UNIT, hi = (p + 1) * g->units / g->parts * UNIT;
    int64_t total = g->split_rows ? g->m : g->n;
    hi = hi < total ? hi : total;
    *i0 = g->split_rows ? lo : 0, *i1 = g->split_rows ? hi : g->m;
    *j0 = g->split_rows ? 0 : lo, *j1 = g->split_rows ? g->n : hi;
}

static prim_key part_key(const job *g, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    /* A dense: stored m x k (k x m when transposed); B: k x n (n x k) */
    return (prim_key){.m = i1 - i0, .n = j1 - j0, .k = g->k, .sa = g->ta ? g->m : g->k, .sb = g->tb ? g->k : g->n,
                      .ldc = g->ldc, .ta = g->ta, .tb = g->tb, .alpha = g->alpha, .beta = g->beta};
}

static void run_parts(int64_t begin, int64_t end, void *p)
{
    job *g = p;
    omp_set_num_threads(1); /* a team of 1: the pool's threads are the parallelism */
    dnnl_stream_t stream = thread_stream();
    for (int64_t part = begin; part < end; part++) {
        int64_t i0, i1, j0, j1;
        part_bounds(g, part, &i0, &i1, &j0, &j1);
        prim_key key = part_key(g, i0, i1, j0, j1);
        const prim_entry *e = g->entry[0];
        for (int i = 1; i < g->entries && !key_eq(&e->key, &key); i++)
            e = g->entry[i];
        const uint16_t *a = g->a + (g->ta ? i0 : i0 * g->k), *b = g->b + (g->tb ? j0 * g->k : j0);
        dnnl_memory_t mem[3] = {NULL, NULL, NULL};
        dnnl_status_t st = stream ? dnnl_success : dnnl_out_of_memory;
        if (st == dnnl_success && (st = dnnl_memory_create(&mem[0], &e->a, engine, (void *)a)) == dnnl_success &&
            (st = dnnl_memory_create(&mem[1], &e->b, engine, (void *)b)) == dnnl_success &&
            (st = dnnl_memory_create(&mem[2], &e->c, engine, g->c + i0 * g->ldc + j0)) == dnnl_success) {
            dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]}, {DNNL_ARG_DST, mem[2]}};
            st = dnnl_primitive_execute(e->prim, stream, 3, args);
            if (st == dnnl_success)
                st = dnnl_stream_wait(stream);
        }
        for (int i = 0; i < 3; i++)
            dnnl_memory_destroy(mem[i]);
        if (st != dnnl_success)
            g->error = st;
    }
}

bool dt__bf16_dnnl_gemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                        int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    pthread_once(&once, init);
    if (engine_status != dnnl_success)
        return failed("dnnl_engine_create(dnnl_cpu)", engine_status);
    job g = {.ta = trans_a, .tb = trans_b, .m = m, .n = n, .k = k, .ldc = ldc, .split_rows = m >= n,
             .error = dnnl_success};
    memcpy(&g.alpha, &alpha, sizeof alpha);
    memcpy(&g.beta, &beta, sizeof beta);
    g.units = ((g.split_rows ? m : n) + UNIT - 1) / UNIT;
    /* The parts depend on the shape alone, not on the thread count: oneDNN
     * blocks k differently for different part shapes (and sums the blocks
     * in C), so parts sized by the thread count gave other bits at 1 and 2
     * threads.  PARTS of them: every thread count up to PARTS splits them
     * evenly when it divides PARTS, and a part keeps 256 of 2048 rows. */
    bool big = (double)m * (double)n * (double)k >= (double)(1 << 20); /* worth a thread: about 10 us */
    g.parts = big ? (PARTS < g.units ? PARTS : g.units) : 1;
    /* the parts come in at most three sizes: their primitives are made
     * here, so that a shape oneDNN refuses leaves C untouched */
    omp_set_num_threads(1); /* before the primitives are made: they are sized for the team */
    for (int64_t p = 0; p < g.parts; p++) {
        int64_t i0, i1, j0, j1;
        part_bounds(&g, p, &i0, &i1, &j0, &j1);
        prim_key key = part_key(&g, i0, i1, j0, j1);
        bool seen = false;
        for (int i = 0; i < g.entries; i++)
            seen = seen || key_eq(&g.entry[i]->key, &key);
        dnnl_status_t st;
        if (!seen && !(g.entry[g.entries++] = lookup(&key, &st)))
            return st == dnnl_success ? false /* the cache is full: no warning */
                                      : failed("matmul primitive creation", st);
    }
    int64_t ar = trans_a ? k : m, ac = trans_a ? m : k, br = trans_b ? n : k, bc = trans_b ? k : n;
    uint16_t *abuf = malloc((size_t)(ar * ac) * sizeof(uint16_t)), *bbuf = malloc((size_t)(br * bc) * sizeof(uint16_t));
    if (!abuf || !bbuf)
        abort(); /* as the f32 GEMM's callers assume: no status to return */
    convert(a, ar, ac, lda, abuf);
    convert(b, br, bc, ldb, bbuf);
    g.a = abuf, g.b = bbuf, g.c = c;
    if (g.parts > 1 && dt_get_threads() > 1 && !dt__in_parallel())
        dt__parallel_for(g.parts, 1, run_parts, &g);
    else if (g.parts > 1)
        run_parts(0, g.parts, &g);
    else
        run_parts(0, 1, &g);
    free(abuf);
    free(bbuf);
    if (g.error != dnnl_success) { /* C may be part written: nothing sensible is left to do */
        DT_WARN("bf16 GEMM: a made oneDNN matmul primitive failed to run (%s)", dnnl_status2str(g.error));
        abort();
    }
    return true;
}

#endif
