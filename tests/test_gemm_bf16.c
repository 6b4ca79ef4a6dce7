/* dt_sgemm_bf16_ld against a double-precision reference computed from the
 * bf16-rounded inputs, on the kernel DT_BF16_GEMM names (run_tests.sh runs
 * this once per kernel; one the machine lacks is a skip naming the reason):
 * edge and random shapes, all transposes, strides, alpha and beta, beta = 0
 * over NaN, the rounding itself (subnormal inputs count as zero), k in
 * several slices and n in several panels, and bitwise repeatability across
 * calls and thread counts.
 *
 * Error bound: each C element's sum of exact bf16 products (8 + 8 significant
 * bits fit f32's 24) is accumulated in f32 in some order, so |error| <=
 * k u sum |a_i b_i| to first order (u = 2^-24, Higham's gamma_k), plus a
 * rounding each for alpha * sum and adding beta * C; with alpha 1 and beta 1
 * the old C is the sum's first term, so it may carry (k + 1) u |C| too.  The
 * check allows twice that; forgetting to round the inputs to bf16 is 2^-9 per product, far
 * beyond it for the small k of the rounding checks below. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtrain/dtrain.h"
#include "tensor/gemm_bf16.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static int64_t uniform_int(int64_t n) { return (int64_t)(next_u64() % (uint64_t)n); }
static float uniform(void) { return (float)((double)(next_u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }
static double bf16(float x) { return dt_bf16_to_f32(dt_f32_to_bf16(x)); }

static int worst_reported;

/* One call on random data, checked element by element. */
static void check_case(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, float beta, int64_t pad)
{
    int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    int64_t lda = ac + pad, ldb = bc + pad, ldc = n + pad;
    float *a = malloc((size_t)(ar * lda) * sizeof *a), *b = malloc((size_t)(br * ldb) * sizeof *b);
    float *c = malloc((size_t)(m * ldc) * sizeof *c), *c0 = malloc((size_t)(m * ldc) * sizeof *c0);
    for (int64_t i = 0; i < ar * lda; i++)
        a[i] = uniform() * 3.0f;
    for (int64_t i = 0; i < br * ldb; i++)
        b[i] = uniform();
    for (int64_t i = 0; i < m * ldc; i++)
        c0[i] = beta == 0.0f ? NAN : uniform();
    memcpy(c, c0, (size_t)(m * ldc) * sizeof *c);
    dt_sgemm_bf16_ld(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    int bad = 0;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double dot = 0, mag = 0;
            for (int64_t p = 0; p < k; p++) {
                double x = bf16(ta ? a[p * lda + i] : a[i * lda + p]), y = bf16(tb ? b[j * ldb + p] : b[p * ldb + j]);
                dot += x * y;
                mag += fabs(x * y);
            }
            double old = beta == 0.0f ? 0.0 : c0[i * ldc + j], want = alpha * dot + beta * old;
            double tol = 2.0 * ((double)(k + 2) * ldexp(1, -24) * (fabs(alpha) * mag + fabs(beta * old)) +
                                ldexp(1, -23) * fabs(want)) + 1e-30;
            double got = c[i * ldc + j];
            if (!(fabs(got - want) <= tol) && bad++ == 0 && worst_reported++ < 10)
                fprintf(stderr, "ta=%d tb=%d m=%lld n=%lld k=%lld alpha=%g beta=%g pad=%lld: C[%lld,%lld] = %.9g, "
                        "expected %.9g (tolerance %.3g)\n", ta, tb, (long long)m, (long long)n, (long long)k, alpha,
                        beta, (long long)pad, (long long)i, (long long)j, got, want, tol);
        }
        for (int64_t j = n; j < ldc; j++) /* the padding between rows of C is not C */
            if (memcmp(&c[i * ldc + j], &c0[i * ldc + j], sizeof *c) != 0 && bad++ == 0)
                fprintf(stderr, "m=%lld n=%lld: C's padding at [%lld,%lld] written\n", (long long)m, (long long)n,
                        (long long)i, (long long)j);
    }
    EXPECT_EQ(bad, 0);
    free(a), free(b), free(c), free(c0);
}

static void test_shapes(void)
{
    static const int64_t sizes[] = {1, 15, 17, 33, 100};
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            for (int x = 0; x < 5; x++) /* every edge size in each dimension */
                for (int y = 0; y < 5; y++) {
                    check_case(ta, tb, sizes[x], sizes[y], sizes[(x + y) % 5], 1.0f, 0.0f, 0);
                    check_case(ta, tb, sizes[y], sizes[(x + 2 * y) % 5], sizes[x], -0.5f, 1.5f, 3);
                }
            for (int r = 0; r < 6; r++) /* random shapes, strides, alpha, beta */
                check_case(ta, tb, 1 + uniform_int(70), 1 + uniform_int(70), 1 + uniform_int(700),
                           r % 3 == 0 ? 1.0f : uniform() * 2, r % 2 ? 0.0f : uniform(), uniform_int(5));
        }
    /* k beyond one 512-deep slice of A, n beyond one packed B panel, and
     * shapes that split between threads (rows, then columns) */
    check_case(0, 1, 40, 300, 2100, 1.0f, 0.0f, 1);
    check_case(1, 0, 70, 64, 1100, 0.5f, 1.0f, 0);
    check_case(0, 0, 300, 90, 600, 1.0f, 1.0f, 2);
    check_case(1, 1, 64, 260, 530, 2.0f, 0.0f, 0);
    /* k in two slices and n in two panels per thread (a slice's panel is
     * 1024 columns; the 2 threads split n), sums carried in a buffer (alpha,
     * beta) or in C (alpha 1, beta 1), edges of 8 rows and 12 columns, with
     * transposed operands */
    check_case(1, 1, 40, 2200, 600, 0.75f, 0.5f, 1);
    check_case(0, 1, 64, 2100, 530, 1.0f, 1.0f, 0);
    check_case(1, 0, 72, 2080, 1030, 1.0f, 0.0f, 3);
}

/* The inputs are rounded to nearest even, NaN and infinity kept. */
static void test_rounding(void)
{
    float a[4] = {1.0f + 0x1p-10f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -(1.0f + 0x1p-7f + 0x1p-9f)};
    float ones[4] = {1, 1, 1, 1}, c[4];
    dt_sgemm_bf16_ld(0, 0, 4, 1, 1, 1.0f, a, 1, ones, 1, 0.0f, c, 1);
    EXPECT(c[0] == 1.0f);                    /* 1 + 2^-10 rounds down */
    EXPECT(c[1] == 1.0f);                    /* halfway: to the even 1 */
    EXPECT(c[2] == 1.0f + 0x1p-6f);          /* halfway: to the even 1 + 2^-6 */
    EXPECT(c[3] == -(1.0f + 0x1p-7f));       /* below halfway: down in magnitude */
    float special[3] = {NAN, INFINITY, 3e38f}, out[3];
    dt_sgemm_bf16_ld(0, 0, 3, 1, 1, 1.0f, special, 1, ones, 1, 0.0f, out, 1);
    EXPECT(isnan(out[0]));
    EXPECT(isinf(out[1]) && out[1] > 0);
    EXPECT(out[2] == (float)bf16(3e38f)); /* rounds to a finite bf16 */
    /* a subnormal input counts as zero in the tile and dot-product kernels
     * (flushed when packed); the emulation keeps it */
    float tiny = 1e-39f, big = 0x1p100f, product;
    dt_sgemm_bf16_ld(0, 0, 1, 1, 1, 1.0f, &tiny, 1, &big, 1, 0.0f, &product, 1);
    if (strcmp(dt_bf16_gemm_kernel(), "emulated") == 0)
        EXPECT(product == (float)(bf16(tiny) * 0x1p100));
    else
        EXPECT(product == 0.0f);
}

/* Same bits from repeated calls, and for 1 and 2 threads (split by rows,
 * then, A transposed, by columns). */
static void test_repeatable(int ta, int64_t m, int64_t n)
{
    int64_t k = 700;
    float *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(k * n) * sizeof *b);
    float *c[3];
    for (int64_t i = 0; i < m * k; i++)
        a[i] = uniform();
    for (int64_t i = 0; i < k * n; i++)
        b[i] = uniform();
    for (int r = 0; r < 3; r++) {
        EXPECT_STATUS(dt_set_threads(r == 0 ? 1 : 2), DT_OK);
        c[r] = malloc((size_t)(m * n) * sizeof *c[r]);
        dt_sgemm_bf16_ld(ta, !ta, m, n, k, 1.0f, a, ta ? m : k, b, ta ? n : k, 0.0f, c[r], n);
    }
    /* oneDNN's own threads may split k differently from one call to the next (seen on a loaded machine):
     * its results are checked against the reference elsewhere, not for repeatable bits */
    bool onednn = strcmp(dt_bf16_gemm_kernel(), "onednn") == 0;
    if (!onednn)
        EXPECT(memcmp(c[1], c[2], (size_t)(m * n) * sizeof(float)) == 0); /* 2 threads, twice */
    if (!onednn && strcmp(dt_bf16_gemm_kernel(), "emulated") != 0)     /* OpenBLAS's varies with the split */
        EXPECT(memcmp(c[0], c[1], (size_t)(m * n) * sizeof(float)) == 0);
    for (int r = 0; r < 3; r++)
        free(c[r]);
    free(a), free(b);
}

/* dt__sgemm_bf16_bias: the bits of the bias in C's rows, then the product
 * with alpha 1 and beta 1 (whole and edge blocks, k in slices, n in panels),
 * at 1 and 2 threads, on the AVX512_BF16 and AMX kernels; the others
 * decline (false, C untouched). */
static void test_bias(void)
{
    static const int64_t shapes[][4] = {{0, 64, 96, 384}, {0, 70, 45, 200},   {0, 33, 1100, 600},
                                        {1, 96, 64, 1030}, {0, 128, 32, 2100}, {1, 5, 7, 9}};
    bool packs = strcmp(dt_bf16_gemm_kernel(), "avx512_bf16") == 0 || strcmp(dt_bf16_gemm_kernel(), "amx") == 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int ta = (int)shapes[s][0];
        int64_t m = shapes[s][1], n = shapes[s][2], k = shapes[s][3];
        float *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(k * n) * sizeof *b);
        float *bias = malloc((size_t)n * sizeof *bias), *want = malloc((size_t)(m * n) * sizeof *want);
        float *got = malloc((size_t)(m * n) * sizeof *got);
        for (int64_t i = 0; i < m * k; i++)
            a[i] = uniform();
        for (int64_t i = 0; i < k * n; i++)
            b[i] = uniform();
        for (int64_t j = 0; j < n; j++)
            bias[j] = 4.0f * uniform();
        for (int threads = 1; threads <= 2; threads++) {
            EXPECT_STATUS(dt_set_threads(threads), DT_OK);
            dt_rows_fill(want, bias, m, n);
            dt_sgemm_bf16_ld(ta, 1, m, n, k, 1.0f, a, ta ? m : k, b, k, 1.0f, want, n);
            for (int64_t i = 0; i < m * n; i++)
                got[i] = NAN;
            bool ran = dt__sgemm_bf16_bias(ta, 1, m, n, k, a, ta ? m : k, b, k, bias, got, n);
            EXPECT(ran == packs);
            int64_t i = 0;
            while (i < m * n && (ran ? memcmp(got + i, want + i, sizeof *got) == 0 : isnan(got[i])))
                i++;
            if (i < m * n)
                fprintf(stderr, "bias %lld x %lld x %lld (ta %d, %d threads, %s): C[%lld] %.9g, fill + gemm %.9g\n",
                        (long long)m, (long long)n, (long long)k, ta, threads, ran ? "ran" : "declined", (long long)i,
                        got[i], want[i]);
            EXPECT(i == m * n);
        }
        free(a), free(b), free(bias), free(want), free(got);
    }
}

/* dt__sgemm_bf16_sums: dW += dY^T X and db += dY's rows summed, the bits of
 * dt_sgemm_bf16_ld then dt_rows_sum_add, with rows or columns of C split
 * between threads, k in several slices, edge blocks; at 1 and 2 threads. */
static void test_grad_sums(void)
{
    static const int64_t shapes[][3] = {{96, 64, 2048}, {64, 200, 1030}, {70, 45, 37}, {5, 300, 700}, {300, 7, 600}};
    bool packs = strcmp(dt_bf16_gemm_kernel(), "avx512_bf16") == 0 || strcmp(dt_bf16_gemm_kernel(), "amx") == 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        float *dy = malloc((size_t)(k * m) * sizeof *dy), *x = malloc((size_t)(k * n) * sizeof *x);
        float *dw[2], *db[2];
        for (int64_t i = 0; i < k * m; i++)
            dy[i] = uniform() * (i % 7 == 0 ? 1e3f : 1.0f); /* rounding in the sums shows a changed order */
        for (int64_t i = 0; i < k * n; i++)
            x[i] = uniform();
        for (int v = 0; v < 2; v++) {
            dw[v] = malloc((size_t)(m * n) * sizeof *dw[v]);
            db[v] = malloc((size_t)m * sizeof *db[v]);
        }
        for (int threads = 1; threads <= 2; threads++) {
            EXPECT_STATUS(dt_set_threads(threads), DT_OK);
            for (int v = 0; v < 2; v++) {
                for (int64_t i = 0; i < m * n; i++)
                    dw[v][i] = (float)(i % 5) * 0.25f;
                for (int64_t i = 0; i < m; i++)
                    db[v][i] = (float)(i % 3) * 0.5f;
            }
            dt_sgemm_bf16_ld(1, 0, m, n, k, 1.0f, dy, m, x, n, 1.0f, dw[0], n);
            dt_rows_sum_add(db[0], dy, k, m);
            bool ran = dt__sgemm_bf16_sums(m, n, k, dy, m, x, n, dw[1], n, db[1]);
            EXPECT(ran == packs);
            if (!ran)
                continue;
            bool same_w = memcmp(dw[0], dw[1], (size_t)(m * n) * sizeof(float)) == 0;
            bool same_b = memcmp(db[0], db[1], (size_t)m * sizeof(float)) == 0;
            if (!same_w || !same_b)
                fprintf(stderr, "sums %lld x %lld x %lld, %d threads: dW %s, db %s\n", (long long)m, (long long)n,
                        (long long)k, threads, same_w ? "same" : "differs", same_b ? "same" : "differs");
            EXPECT(same_w && same_b);
        }
        for (int v = 0; v < 2; v++)
            free(dw[v]), free(db[v]);
        free(dy), free(x);
    }
}

int main(void)
{
    const char *want = getenv("DT_BF16_GEMM"), *kernel = dt_bf16_gemm_kernel();
    bool known = !want || strcmp(want, "auto") == 0 || strcmp(want, "native") == 0;
    for (int k = DT__BF16_EMULATED; k <= DT__BF16_ONEDNN; k++)
        known = known || strcmp(want, dt__bf16_kernel_name((dt__bf16_kernel)k)) == 0;
    if (!known && strcmp(kernel, "emulated") != 0) { /* refused (a warning), the emulation runs */
        fprintf(stderr, "DT_BF16_GEMM=%s is no kernel, but the kernel is %s, not emulated\n", want, kernel);
        return 1;
    }
    if (want && strcmp(want, "native") == 0 && strstr(kernel, "onednn")) {
        fprintf(stderr, "DT_BF16_GEMM=native, but the kernel is %s\n", kernel);
        return 1;
    }
    /* auto and native run the first kernel of a fixed order this machine
     * allows (amx, else avx512_bf16, else emulated): never a timing, and
     * never AVX512_BF16 on a CPU with AMX, where it is slower than AMX and
     * than f32 (issue 48) */
    if (!want || strcmp(want, "auto") == 0 || strcmp(want, "native") == 0) {
        dt__bf16_kernel best = dt__bf16_kernel_available(DT__BF16_AMX, NULL)      ? DT__BF16_AMX
                               : dt__bf16_kernel_available(DT__BF16_AVX512, NULL) ? DT__BF16_AVX512
                                                                                  : DT__BF16_EMULATED;
        if (strcmp(kernel, dt__bf16_kernel_name(best)) != 0) {
            fprintf(stderr, "DT_BF16_GEMM=%s runs %s, but this machine allows %s\n", want ? want : "(unset)",
                    kernel, dt__bf16_kernel_name(best));
            return 1;
        }
    }
    if (known && want && strcmp(want, "auto") != 0 && strcmp(want, "native") != 0 && strcmp(want, kernel) != 0) {
        for (int k = DT__BF16_EMULATED; k <= DT__BF16_ONEDNN; k++) {
            const char *why = NULL;
            if (strcmp(want, dt__bf16_kernel_name((dt__bf16_kernel)k)) == 0 &&
                !dt__bf16_kernel_available((dt__bf16_kernel)k, &why)) {
                printf("DT_BF16_GEMM=%s: %s\n", want, why);
                return 77;
            }
        }
        fprintf(stderr, "DT_BF16_GEMM=%s, but the kernel is %s\n", want, kernel);
        return 1;
    }
    printf("kernel: %s\n", kernel);
    EXPECT_STATUS(dt_set_threads(2), DT_OK);
    test_rounding();
    test_shapes();
    test_repeatable(0, 260, 200);
    test_repeatable(1, 200, 260);
    test_bias();
    test_grad_sums();
    return CHECK_DONE("gemm_bf16");
}
