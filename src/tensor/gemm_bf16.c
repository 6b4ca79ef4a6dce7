/* dt_sgemm_bf16_ld: the GEMM of bf16 mixed-precision training, inputs f32.
 *
 * A thread's part of C runs as GEMM blocking that packs each operand once.
 * op(B) is packed a depth of k at a time: all of k when the part's columns
 * then fit one panel (at most 1 MiB of bf16, kept in L2), else 512-deep
 * slices of k, outermost, each packed in panels of equal width.  For each
 * panel, for each 32-row block of the part and each 512-deep slice of the
 * packed depth (32 KiB of A, kept in L1), run the block kernel on every
 * 32 x 32 block of the panel.  A's rows are packed for the same depth of k,
 * 128 at a time (a transposed A is then read in runs of 128 values), during
 * the first panel, and kept for the later ones: the dW GEMM (k = 2048
 * tokens, A = dY^T) used to pack A again for every panel.  Sums carry from
 * slice to slice in C itself where they can (below), else in a buffer (a row
 * of blocks of the panel, or the whole part when slices are outermost);
 * after the last slice, C = alpha * sums + beta * C.
 * Whole blocks with alpha 1 and beta 0 or 1 (the forward pass, gradient
 * accumulation) skip the buffer: the kernel reads and writes C itself, the
 * old C (beta 1) being the sum's first term.
 * Every element's sum runs over k in the same order whatever the blocking of
 * m and n (the slices start at multiples of 512 whichever depth is packed),
 * so the result does not depend on the thread count either.
 *
 * The split between threads is dt_sgemm_ld's: row blocks of C when m >= n,
 * else column blocks, in whole 32s, from the shape and thread count alone. */
#include <stdlib.h>

#include "base/half_convert.h"
#include "dtrain/tensor.h"
#include "tensor/gemm_bf16.h"
#include "tensor/threads.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum {
    BLOCK = 32,                /* C block edge: the 2 x 2 tiles of the kernels */
    SLICE_TILES = 16,          /* k per slice: 16 tiles of 32, 32 KiB of a packed A block */
    PANEL_BYTES = 1 << 20,     /* packed B panel (one slice), at most (about half of L2) */
    ROWS_MAX = 128,            /* rows of A packed at once (a transposed A: runs of 128 values) */
};

typedef struct {
    dt__bf16_operand a, b;
    int64_t m, n, k, ldc;
    float alpha, beta;
    float *c;
    const float *bias; /* dt__sgemm_bf16_bias: C's old value is this row, repeated (alpha 1, beta 1) */
    float *a_sums;     /* dt__sgemm_bf16_sums: op(A)'s rows summed over k into it, while A is packed */
    dt__bf16_block_fn block;
    bool amx, split_rows;
} job;

static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

/* A whole 32 x 32 block of C with alpha 1 and beta 0 or 1 is its own sum:
 * read (beta 1) and written in place by the block kernel. */
static bool in_place(const job *g, int rows, int64_t cols)
{
    return g->alpha == 1.0f && (g->beta == 0.0f || g->beta == 1.0f) && rows == BLOCK && cols >= BLOCK;
}

#if defined(__x86_64__)
/* C rows [i, i + rows), columns [j, j + cols) (cols <= 32) = alpha * sums +
 * beta * C (C not read when beta is 0, so NaN garbage there does not leak
 * in; with a bias, the bias row stands for every row of C); sums is a
 * 32 x 32 block, row stride sums_ld. */
__attribute__((target("avx512f"))) static void write_c(const job *g, int64_t i, int rows, int64_t j, int64_t cols,
                                                       const float *sums, int64_t sums_ld)
{
    __m512 alpha = _mm512_set1_ps(g->alpha), beta = _mm512_set1_ps(g->beta);
    for (int r = 0; r < rows; r++) {
        float *c = g->c + (i + r) * g->ldc + j;
        const float *old = g->bias ? g->bias + j : c;
        for (int64_t x = 0; x < cols; x += 16) {
            int64_t left = cols - x;
            __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
            __m512 v = _mm512_mul_ps(alpha, _mm512_loadu_ps(sums + r * sums_ld + x));
            if (g->beta != 0.0f)
                v = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(m, old + x), v);
            _mm512_mask_storeu_ps(c + x, m, v);
        }
    }
}
#else
static void write_c(const job *g, int64_t i, int rows, int64_t j, int64_t cols, const float *sums, int64_t sums_ld)
{
    (void)g, (void)i, (void)rows, (void)j, (void)cols, (void)sums, (void)sums_ld; /* never chosen off x86-64 */
}
#endif

/* op(X) with its k index starting at k0. */
static dt__bf16_operand k_from(const dt__bf16_operand *o, int64_t k0, bool k_is_column)
{
    dt__bf16_operand s = *o;
    s.x += (k_is_column != (o->trans != 0)) ? k0 : k0 * o->ld;
    return s;
}

/* Rows [i0, i1) x columns [j0, j1) of C. */
static void run_part(const job *g, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    int64_t m = i1 - i0, n = j1 - j0, ktiles = (g->k + 31) / 32, mblocks = (m + BLOCK - 1) / BLOCK;
    /* k packed at a time: all of it when B's part fits one panel, else
     * slices of 512, outermost */
    int64_t depth = round_up(n, BLOCK) * ktiles * 64 <= PANEL_BYTES ? ktiles
                    : ktiles < SLICE_TILES                         ? ktiles
                                                                   : SLICE_TILES;
    /* panels of equal width (a narrow last one would read each A block
     * from L3 for a few block products only) */
    int64_t panel = PANEL_BYTES / (depth * 64) / BLOCK * BLOCK, panels = (n + panel - 1) / panel;
    panel = round_up((n + panels - 1) / panels, BLOCK);
    /* A's rows, packed 128 at a time: used at once with one panel (a ring),
     * else kept for the later panels */
    int64_t ablocks = panels > 1 ? mblocks : mblocks < ROWS_MAX / BLOCK ? mblocks : ROWS_MAX / BLOCK;
    /* the sums of blocks not summed in C itself: a row of blocks of the
     * panel, or between packings of k (slices outermost) all of them */
    bool all_in_place = in_place(g, BLOCK, BLOCK) && m % BLOCK == 0 && n % BLOCK == 0;
    bool keep = depth < ktiles && !all_in_place;
    int64_t sums_ld = keep ? round_up(n, BLOCK) : panel, sums_rows = keep ? mblocks * BLOCK : BLOCK;
    uint16_t *apack = aligned_alloc(64, (size_t)(ablocks * depth * 1024) * sizeof(uint16_t));
    uint16_t *bpack = aligned_alloc(64, (size_t)(panel * depth * 32) * sizeof(uint16_t));
    float *sums = aligned_alloc(64, (size_t)(sums_rows * sums_ld) * sizeof(float));
    if (!bpack || !apack || !sums)
        abort(); /* as the f32 GEMM's callers assume: no status to return */
    if (g->amx)
        dt__bf16_amx_begin();
    for (int64_t kt = 0; kt < ktiles; kt += depth) {
        int64_t tiles = ktiles - kt < depth ? ktiles - kt : depth, kcount = g->k - kt * 32;
        kcount = kcount < tiles * 32 ? kcount : tiles * 32;
        dt__bf16_operand a = k_from(&g->a, kt * 32, true), b = k_from(&g->b, kt * 32, false);
        for (int64_t jc = j0; jc < j1; jc += panel) {
            int64_t cols = j1 - jc < panel ? j1 - jc : panel, groups = round_up(cols, BLOCK) / 16;
            dt__bf16_pack_b(&b, jc, cols, groups, kcount, tiles, bpack);
            for (int64_t ib = 0; ib < mblocks; ib++) {
                int64_t ic = i0 + ib * BLOCK;
                int rows = (int)(i1 - ic < BLOCK ? i1 - ic : BLOCK);
                const uint16_t *ablock = apack + (ib % ablocks) * tiles * 1024;
                if (jc == j0 && ib % (ROWS_MAX / BLOCK) == 0) /* A's rows packed once per depth of k */
                    dt__bf16_pack_a(&a, ic, (int)(i1 - ic < ROWS_MAX ? i1 - ic : ROWS_MAX), kcount, tiles,
                                    apack + (ib % ablocks) * tiles * 1024,
                                    g->a_sums && j0 == 0 ? g->a_sums + ic : NULL); /* one part per row sums */
                for (int64_t st = 0; st < tiles; st += SLICE_TILES) { /* the A block's slice stays in L1 */
                    int64_t ts = tiles - st < SLICE_TILES ? tiles - st : SLICE_TILES;
                    bool first = kt + st == 0, last = kt + st + ts == ktiles;
                    for (int64_t nb = 0; nb < groups / 2; nb++) {
                        const uint16_t *b0 = bpack + (2 * nb * tiles + st) * 512, *b1 = b0 + tiles * 512;
                        int64_t left = cols - nb * BLOCK;
                        float *cb = g->c + ic * g->ldc + jc + nb * BLOCK;
                        if (in_place(g, rows, left)) {
                            const float *in = !first ? cb : g->beta == 1.0f ? cb : NULL;
                            int64_t in_ld = g->ldc;
                            if (first && g->bias) { /* the sums start from the bias: every row the same */
                                in = g->bias + jc + nb * BLOCK;
                                in_ld = 0;
                            }
                            g->block(ablock + st * 1024, b0, b1, ts, in, in_ld, cb, g->ldc);
                            continue;
                        }
                        float *s = sums + (keep ? (ic - i0) * sums_ld + (jc - j0) : 0) + nb * BLOCK;
                        g->block(ablock + st * 1024, b0, b1, ts, first ? NULL : s, sums_ld, s, sums_ld);
                        if (last)
                            write_c(g, ic, rows, jc + nb * BLOCK, left < BLOCK ? left : BLOCK, s, sums_ld);
                    }
                }
            }
        }
    }
    if (g->amx)
        dt__bf16_amx_end();
    free(sums);
    free(apack);
    free(bpack);
}

static void part_range(int64_t begin, int64_t end, void *p)
{
    const job *g = p;
    int64_t lo = begin * BLOCK, hi = end * BLOCK;
    if (g->split_rows)
        run_part(g, lo, hi < g->m ? hi : g->m, 0, g->n);
    else
        run_part(g, 0, g->m, lo, hi < g->n ? hi : g->n);
}

/* ---- emulated: round the operands to bf16 (as f32), then the f32 GEMM ---- */

typedef struct {
    const float *src;
    float *dst;
    int64_t ld, cols;
} round_args;

static void round_rows(int64_t begin, int64_t end, void *p)
{
    const round_args *r = p;
    uint16_t buf[256];
    for (int64_t i = begin; i < end; i++)
        for (int64_t x = 0; x < r->cols; x += 256) {
            size_t len = (size_t)(r->cols - x < 256 ? r->cols - x : 256);
            dt__to_half_n(buf, r->src + i * r->ld + x, len, true);
            dt__from_half_n(r->dst + i * r->cols + x, buf, len, true);
        }
}

/* A stored rows x cols matrix (row stride ld), rounded, packed densely. */
static float *rounded_copy(const float *src, int64_t rows, int64_t cols, int64_t ld)
{
    float *dst = malloc((size_t)(rows * cols) * sizeof(float));
    if (!dst)
        abort();
    round_args r = {src, dst, ld, cols};
    dt__parallel_for(rows, 1 + 65536 / (cols > 0 ? cols : 1), round_rows, &r);
    return dst;
}

static void emulated(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                     int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    int64_t ar = trans_a ? k : m, ac = trans_a ? m : k, br = trans_b ? n : k, bc = trans_b ? k : n;
    float *ra = rounded_copy(a, ar, ac, lda), *rb = rounded_copy(b, br, bc, ldb);
    dt_sgemm_ld(trans_a, trans_b, m, n, k, alpha, ra, ac, rb, bc, beta, c, ldc);
    free(rb);
    free(ra);
}

/* The threads take parts of C (row or column blocks). */
static void run(job *g)
{
    int threads = dt_get_threads();
    /* A part must be worth waking a thread: about 10 us of the kernel's work
     * (AMX does 2^24 multiply-adds in that time, AVX512_BF16 2^20). */
    double work = (double)g->m * (double)g->n * (double)g->k, enough = g->amx ? (double)(1 << 24) : (double)(1 << 20);
    int64_t units = ((g->split_rows ? g->m : g->n) + BLOCK - 1) / BLOCK;
    if (threads <= 1 || dt__in_parallel() || work < enough || units < 2) {
        part_range(0, units, g);
        return;
    }
    dt__parallel_for(units, 1, part_range, g);
}

void dt_sgemm_bf16_ld(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                      int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0)
        return;
    if (k > 0 && alpha != 0.0f && dt__bf16_kernel_for(trans_a, trans_b, m, n, k) == DT__BF16_ONEDNN &&
        dt__bf16_dnnl_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
        return;
    dt__bf16_kernel kernel = dt__bf16_kernel_choice();
    if (kernel == DT__BF16_EMULATED || k <= 0 || alpha == 0.0f) {
        /* k = 0 or alpha = 0 is C = beta * C: the f32 GEMM's rules */
        if (kernel == DT__BF16_EMULATED && k > 0 && alpha != 0.0f)
            emulated(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        else
            dt_sgemm_ld(trans_a, trans_b, m, n, k > 0 ? k : 0, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    job g = {.a = {a, lda, trans_a},
             .b = {b, ldb, trans_b},
             .m = m,
             .n = n,
             .k = k,
             .ldc = ldc,
             .alpha = alpha,
             .beta = beta,
             .c = c,
             .block = kernel == DT__BF16_AMX ? dt__bf16_block_amx : dt__bf16_block_avx512,
             .amx = kernel == DT__BF16_AMX,
             .split_rows = m >= n};
    run(&g);
}

bool dt__sgemm_bf16_bias(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                         const float *b, int64_t ldb, const float *bias, float *c, int64_t ldc)
{
    /* the packing kernels: their block kernels read the start block with a
     * row stride of 0 (the AMX tile load as well), so every row starts from
     * the bias */
    dt__bf16_kernel kernel = dt__bf16_kernel_for(trans_a, trans_b, m, n, k);
    if (m <= 0 || n <= 0 || k <= 0 || (kernel != DT__BF16_AVX512 && kernel != DT__BF16_AMX))
        return false;
    job g = {.a = {a, lda, trans_a},
             .b = {b, ldb, trans_b},
             .m = m,
             .n = n,
             .k = k,
             .ldc = ldc,
             .alpha = 1.0f,
             .beta = 1.0f,
             .c = c,
             .bias = bias,
             .block = kernel == DT__BF16_AMX ? dt__bf16_block_amx : dt__bf16_block_avx512,
             .amx = kernel == DT__BF16_AMX,
             .split_rows = m >= n};
    run(&g);
    return true;
}

bool dt__sgemm_bf16_sums(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                         float *c, int64_t ldc, float *sums)
{
    dt__bf16_kernel kernel = dt__bf16_kernel_for(1, 0, m, n, k);
    if (m <= 0 || n <= 0 || k <= 0 || (kernel != DT__BF16_AVX512 && kernel != DT__BF16_AMX))
        return false;
    job g = {.a = {a, lda, 1},
             .b = {b, ldb, 0},
             .m = m,
             .n = n,
             .k = k,
             .ldc = ldc,
             .alpha = 1.0f,
             .beta = 1.0f,
             .c = c,
             .a_sums = sums,
             .block = kernel == DT__BF16_AMX ? dt__bf16_block_amx : dt__bf16_block_avx512,
             .amx = kernel == DT__BF16_AMX,
             .split_rows = m >= n};
    run(&g);
    return true;
}
