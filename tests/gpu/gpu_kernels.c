/* Every entry of the cuda compute table against the cpu one (dt__cpu_ops,
 * the engine's reference kernels) on the same random inputs: upload, run
 * both, download, compare.  One line per check, a summary, exit 1 on any
 * failure; exit 77 ("SKIP: <why>") when no GPU can be initialised.
 *
 *   gpu_kernels [--quick]   (--quick or DT_TEST_QUICK=1: no large shapes,
 *                            for compute-sanitizer, which runs ~50x slower)
 *
 * Tolerances (TF32 off: f32 products are full f32 on both sides):
 * - f32: norm-wise ||got - want|| / ||want|| <= 1e-5, and each element
 *   |got - want| <= 1e-5 (|want| + rms(want)), the rms standing in for the
 *   size of the terms a cancelling sum was made of.  Sums over thousands of
 *   terms in another order get TOL_LONG = 5e-5 (element-wise, and norm-wise
 *   for the column sums): LayerNorm's dw/db and rows_sum_add over 2048-4096
 *   rows, scatter_add's ~1400 rows per id, and attention (exponentials and
 *   T-long sums; its backward's dP - rowsum(dP P) cancels).  f32 against
 *   f64 in PyTorch measured 5.5e-6 element-wise for attention's backward at
 *   T = 1024 and 3e-7 for the column sums, norm-wise 4e-7 at most: two f32
 *   orders differ by about twice that.
 * - bf16 gemm and attention: both sides round operands to bf16 and sum in
 *   f32, but the flash attention rounds its unnormalised probabilities
 *   where the cpu rounds normalised ones: 1e-2 norm-wise (bf16 keeps 8
 *   bits), 4e-2 element-wise, twice both for attention's backward; the
 *   printed rel shows how far inside.
 * - Bitwise: memory round trips, relu, gather, fill, dropout masks and
 *   outputs (both draw dt_rng_key_uniform(stream, at(i))), and a matrix's
 *   padding columns (ld > width), which no entry may write. */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "cuda/cuda.h"
#include "dtrain/base.h"
#include "tensor/backend.h"

#define TOL_F32 1e-5
#define TOL_LONG 5e-5
#define TOL_BF16 1e-2
#define BITS (-1.0) /* a tolerance: bitwise equal */

static const dt_compute_ops *gpu;                      /* cuda */
static const dt_compute_ops *const cpu = &dt__cpu_ops; /* the reference */
static int n_ok, n_fail;
static dt_rng rng;

/* ---- buffers: every one a check allocates is freed by release() ---- */

static void *owned_host[64], *owned_gpu[64];
static int n_host, n_gpu;

static void *hmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p || n_host == 64) {
        fprintf(stderr, "gpu_kernels: out of host memory for %zu bytes\n", bytes);
        exit(2);
    }
    return owned_host[n_host++] = p;
}

static float *hnormal(int64_t n, float mean, float std)
{
    float *p = hmalloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++)
        p[i] = mean + std * dt_rng_normal(&rng);
    return p;
}

/* `bytes` of GPU memory, a copy of `h` unless NULL; a failure ends the run. */
static void *galloc(const void *h, size_t bytes)
{
    void *d = gpu->alloc(bytes ? bytes : 1);
    dt_status s = !d ? DT_ERR_NOMEM : h ? gpu->upload(d, h, bytes) : DT_OK;
    if (s != DT_OK || n_gpu == 64) {
        printf("FAIL alloc/upload of %zu bytes: %s\n", bytes, dt_last_error());
        exit(1);
    }
    return owned_gpu[n_gpu++] = d;
}
static float *up(const float *h, int64_t n)
{
    return galloc(h, (size_t)n * sizeof(float));
}
static float *gnew(int64_t n)
{
    return galloc(NULL, (size_t)n * sizeof(float));
}

static void release(void)
{
    while (n_gpu)
        gpu->free(owned_gpu[--n_gpu]);
    while (n_host)
        free(owned_host[--n_host]);
}

/* ---- comparison: one check = one printed line ---- */

typedef struct {
    double rel; /* the largest norm-wise relative error seen */
    bool bad;
    char why[240]; /* the first failure */
} check;
static check c;

static void fail_at(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail_at(const char *fmt, ...)
{
    if (c.bad)
        return;
    c.bad = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c.why, sizeof c.why, fmt, ap);
    va_end(ap);
}

/* got against want, [rows, cols] with row stride ld; columns cols..ld-1
 * (padding) must be bitwise the same.  NaN matches NaN. */
static void cmp_mat(const char *what, const float *got, const float *want, int64_t rows, int64_t cols,
                    int64_t ld, double tol, double elem_tol)
{
    double d2 = 0, w2 = 0, worst = 0;
    int64_t at = -1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++)
            w2 += isnan(want[r * ld + j]) ? 0 : (double)want[r * ld + j] * want[r * ld + j];
    double rms = rows > 0 && cols > 0 ? sqrt(w2 / (double)(rows * cols)) : 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < ld; j++) {
            int64_t i = r * ld + j;
            if (j >= cols || tol == BITS) {
                if (memcmp(got + i, want + i, sizeof *got))
                    fail_at("%s[%lld,%lld] = %.9g, expected %.9g%s", what, (long long)r, (long long)j, got[i],
                            want[i], j >= cols ? " (padding: not to be written)" : " (bitwise)");
            } else if (isnan(got[i]) != isnan(want[i]) || (!isfinite(got[i]) && got[i] != want[i])) {
                fail_at("%s[%lld,%lld] = %g, expected %g", what, (long long)r, (long long)j, got[i], want[i]);
            } else if (!isnan(want[i])) {
                double d = fabs((double)got[i] - want[i]), excess = d - elem_tol * (fabs(want[i]) + rms);
                d2 += d * d;
                if (excess > worst)
                    worst = excess, at = i;
            }
        }
    double rel = w2 > 0 ? sqrt(d2 / w2) : sqrt(d2);
    c.rel = rel > c.rel ? rel : c.rel;
    if (tol != BITS && rel > tol)
        fail_at("%s: norm-wise relative error %.2e > %.0e", what, rel, tol);
    if (at >= 0)
        fail_at("%s[%lld] = %.9g, expected %.9g (|diff| > %.0e (|x| + rms %.3g))", what, (long long)at,
                got[at], want[at], elem_tol, rms);
}

/* n floats of GPU memory d against want (tol BITS: bitwise). */
static void cmp_dev(const char *what, const float *d, const float *want, int64_t n, double tol)
{
    float *got = hmalloc((size_t)n * sizeof *got);
    dt_status s = gpu->download(got, d, (size_t)n * sizeof *got);
    if (s != DT_OK)
        fail_at("download of %s: %s", what, dt_last_error());
    else
        cmp_mat(what, got, want, 1, n, n, tol, tol);
}

static void cmp_scalar(const char *what, double got, double want, double tol)
{
    double rel = want != 0 ? fabs(got - want) / fabs(want) : fabs(got);
    c.rel = rel > c.rel ? rel : c.rel;
    if (!(rel <= tol))
        fail_at("%s = %.12g, expected %.12g (relative %.2e > %.0e)", what, got, want, rel, tol);
}

/* Waits for the GPU (its error fails the check) and prints the check's line. */
static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
    dt_status s = gpu->sync();
    if (s != DT_OK)
        fail_at("sync: %s: %s", dt_status_name(s), dt_last_error());
    char label[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(label, sizeof label, fmt, ap);
    va_end(ap);
    printf("%s %s rel %.1e%s%s\n", c.bad ? "FAIL" : "ok  ", label, c.rel, c.bad ? ": " : "",
           c.bad ? c.why : "");
    fflush(stdout);
    c.bad ? n_fail++ : n_ok++;
    c = (check){0};
}
/* report(), then free the check's buffers. */
#define done(...) (report(__VA_ARGS__), release())

/* ---- memory ---- */

static void test_absurd_alloc(size_t bytes, const char *what)
{
    static const char no_error[DT__ERROR_LEN];
    dt__error_restore(DT_OK, no_error);
    void *p = gpu->alloc(bytes);
    if (p)
        fail_at("alloc(%zu) returned a pointer", bytes), gpu->free(p);
    else if (!dt_last_error()[0])
        fail_at("alloc(%zu) failed with no error text", bytes);
    else
        printf("     (%s)\n", dt_last_error());
    done("alloc(%s) fails with an error, and the GPU works after", what);
}

static void test_memory(size_t n)
{
    unsigned char *h = hmalloc(n), *back = hmalloc(n);
    for (size_t j = 0; j < n; j++)
        h[j] = (unsigned char)(dt_rng_next(&rng) >> 56);
    unsigned char *d = galloc(h, n), *d2 = galloc(NULL, n);
    if ((uintptr_t)d % 256 || (uintptr_t)d2 % 256)
        fail_at("alloc(%zu) not 256-byte aligned: %p", n, (void *)d);
    dt_status s = gpu->download(back, d, n);
    if (s != DT_OK || memcmp(back, h, n))
        fail_at("upload, download: %s", s != DT_OK ? dt_last_error() : "not the bytes uploaded");
    memset(back, 0xAB, n);
    s = gpu->copy(d2, d, n);
    s = s != DT_OK ? s : gpu->download(back, d2, n);
    if (s != DT_OK || memcmp(back, h, n))
        fail_at("copy: %s", s != DT_OK ? dt_last_error() : "not the bytes uploaded");
    size_t z0 = n / 16 * 4, zn = n / 2; /* zero a middle part, 4-byte aligned like the engine's floats */
    if (gpu->zero(d + z0, zn) != DT_OK || gpu->download(back, d, n) != DT_OK)
        fail_at("zero: %s", dt_last_error());
    memset(h + z0, 0, zn);
    if (memcmp(back, h, n))
        fail_at("zero of bytes %zu..%zu: other bytes changed or these not zero", z0, z0 + zn);
    done("memory alloc/upload/download/copy/zero %zu bytes", n);
}

/* The copy-stream entries (the prefetcher's uploads): from page-locked
 * memory on a stream of our own, the compute stream waiting for its event
 * before a copy that reads the upload; the memory figures. */
static void test_copy_stream(size_t n)
{
    size_t total = 0, free_b = 0, peak0 = gpu->mem_peak();
    if (gpu->mem_info(&total, &free_b) != DT_OK || total == 0 || free_b > total)
        fail_at("mem_info: %s (total %zu, free %zu)", dt_last_error(), total, free_b);
    unsigned char *h = gpu->host_alloc(n), *back = hmalloc(n);
    void *stream = gpu->stream_create(), *ev = gpu->event_create();
    unsigned char *d = galloc(NULL, n), *d2 = galloc(NULL, n);
    if (!h || !stream || !ev) {
        fail_at("host_alloc, stream_create or event_create: %s", dt_last_error());
    } else {
        for (size_t j = 0; j < n; j++)
            h[j] = (unsigned char)(dt_rng_next(&rng) >> 56);
        dt_status s = gpu->upload_async(d, h, n, stream);
        s = s != DT_OK ? s : gpu->event_record(ev, stream);
        s = s != DT_OK ? s : gpu->stream_wait_event(NULL, ev);
        s = s != DT_OK ? s : gpu->copy(d2, d, n); /* on the compute stream, after the upload */
        s = s != DT_OK ? s : gpu->download(back, d2, n);
        s = s != DT_OK ? s : gpu->event_sync(ev);
        if (s != DT_OK || memcmp(back, h, n))
            fail_at("upload_async, event, copy: %s", s != DT_OK ? dt_last_error() : "not the bytes uploaded");
        if (gpu->mem_peak() < peak0 || gpu->mem_peak() < 2 * n)
            fail_at("mem_peak %zu below the %zu bytes held", gpu->mem_peak(), 2 * n);
    }
    gpu->event_destroy(ev);
    gpu->stream_destroy(stream);
    gpu->host_free(h);
    done("copy stream: pinned upload_async of %zu bytes, events; mem_info, mem_peak", n);
}

/* ---- matrix products ---- */

static void test_gemm(dt_dtype dt, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, float beta,
                      int64_t pad)
{
    int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    int64_t lda = ac + pad, ldb = bc + pad, ldc = n + pad;
    float *a = hnormal(ar * lda, 0, 1), *b = hnormal(br * ldb, 0, 1), *cc = hnormal(m * ldc, 0, 1);
    for (int64_t i = 0; i < ar * lda; i++) /* NaN padding in A and B: read, it poisons C */
        a[i] = i % lda >= ac ? NAN : a[i];
    for (int64_t i = 0; i < br * ldb; i++)
        b[i] = i % ldb >= bc ? NAN : b[i];
    for (int64_t i = 0; i < m * ldc; i++) /* beta 0: C's NaN must not leak */
        cc[i] = i % ldc >= n ? 12345.0f : beta == 0 ? NAN : cc[i];
    float *dc = up(cc, m * ldc), *got = hmalloc((size_t)(m * ldc) * sizeof *got);
    gpu->gemm(dt, ta, tb, m, n, k, alpha, up(a, ar * lda), lda, up(b, br * ldb), ldb, beta, dc, ldc);
    cpu->gemm(dt, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, cc, ldc);
    if (gpu->download(got, dc, (size_t)(m * ldc) * sizeof *got) != DT_OK)
        fail_at("download: %s", dt_last_error());
    else if (dt == DT_BF16)
        cmp_mat("C", got, cc, m, n, ldc, TOL_BF16, 4 * TOL_BF16);
    else
        cmp_mat("C", got, cc, m, n, ldc, TOL_F32, TOL_F32);
    done("gemm %s %c%c %lldx%lldx%lld alpha %g beta %g%s%s", dt == DT_BF16 ? "bf16" : "f32", ta ? 'T' : 'N',
         tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k, alpha, beta, beta == 0 ? " (C NaN)" : "",
         pad ? " ld+pad" : "");
}

/* ---- vectors ---- */

static void test_vectors(int64_t n)
{
    float *x = hnormal(n, 0, 1), *y = hnormal(n, 0, 1), *a = hnormal(n, 0, 2), *z = hmalloc((size_t)n * 4);
    float *dx = up(x, n), *dy = up(y, n), *da = up(a, n), *dz = gnew(n);
    gpu->axpy(dy, -0.37f, dx, n);
    cpu->axpy(y, -0.37f, x, n);
    cmp_dev("y", dy, y, n, TOL_F32);
    gpu->add(dz, dx, da, n);
    cpu->add(z, x, a, n);
    cmp_dev("add", dz, z, n, TOL_F32);
    gpu->mul(dz, dx, da, n);
    cpu->mul(z, x, a, n);
    cmp_dev("mul", dz, z, n, TOL_F32);
    gpu->scale(da, -1.7f, n);
    cpu->scale(a, -1.7f, n);
    cmp_dev("scale", da, a, n, TOL_F32);
    cmp_scalar("sumsq", gpu->sumsq(dx, n), cpu->sumsq(x, n), 1e-9); /* both square and sum in double */
    done("axpy, add, mul, scale (in place), sumsq n=%lld", (long long)n);
}

/* linear_grads against the two gemm calls it replaces, on the GPU (the
 * same bits: dy is converted once instead of twice) and against the cpu. */
static void test_linear_grads(dt_dtype dt, int64_t m, int64_t n, int64_t k, bool bias, bool want_dx)
{
    if (!gpu->linear_grads) {
        fail_at("the cuda table has no linear_grads");
        done("linear_grads");
        return;
    }
    float *dy = hnormal(k * m, 0, 1), *x = hnormal(k * n, 0, 1), *w = hnormal(m * n, 0, 1),
          *dw = hnormal(m * n, 0, 1), *db = hnormal(m, 0, 1), *dx = hnormal(k * n, 0, 1);
    float *gdy = up(dy, k * m), *gx = up(x, k * n), *gw = up(w, m * n);
    float *gdw = up(dw, m * n), *gdb = up(db, m), *gdx = gnew(k * n);
    float *fdw = up(dw, m * n), *fdb = up(db, m), *fdx = gnew(k * n);
    gpu->linear_grads(dt, m, n, k, gdy, gx, gw, gdw, bias ? gdb : NULL, want_dx ? gdx : NULL);
    gpu->gemm(dt, 1, 0, m, n, k, 1.0f, gdy, m, gx, n, 1.0f, fdw, n);
    if (bias)
        gpu->rows_sum_add(fdb, gdy, k, m);
    if (want_dx)
        gpu->gemm(dt, 0, 0, k, n, m, 1.0f, gdy, m, gw, n, 0.0f, fdx, n);
    float *hf = hmalloc((size_t)(k * n > m * n ? k * n : m * n) * sizeof *hf);
    if (gpu->download(hf, fdw, (size_t)(m * n) * sizeof *hf) != DT_OK)
        fail_at("download: %s", dt_last_error());
    cmp_dev("dw (against the gemm calls)", gdw, hf, m * n, BITS);
    if (bias && gpu->download(hf, fdb, (size_t)m * sizeof *hf) == DT_OK)
        cmp_dev("db (against rows_sum_add)", gdb, hf, m, BITS);
    if (want_dx && gpu->download(hf, fdx, (size_t)(k * n) * sizeof *hf) == DT_OK)
        cmp_dev("dx (against the gemm call)", gdx, hf, k * n, BITS);
    cpu->gemm(dt, 1, 0, m, n, k, 1.0f, dy, m, x, n, 1.0f, dw, n);
    cmp_dev("dw", gdw, dw, m * n, dt == DT_BF16 ? 4 * TOL_BF16 : TOL_LONG);
    if (bias) {
        cpu->rows_sum_add(db, dy, k, m);
        cmp_dev("db", gdb, db, m, k > 256 ? TOL_LONG : TOL_F32);
    }
    if (want_dx) {
        cpu->gemm(dt, 0, 0, k, n, m, 1.0f, dy, m, w, n, 0.0f, dx, n);
        cmp_dev("dx", gdx, dx, k * n, dt == DT_BF16 ? 4 * TOL_BF16 : TOL_LONG);
    }
    done("linear_grads %s m=%lld n=%lld k=%lld%s%s", dt == DT_BF16 ? "bf16" : "f32", (long long)m, (long long)n,
         (long long)k, bias ? " +db" : "", want_dx ? " +dx" : "");
}

/* ---- rows ---- */

static void test_rows(int64_t rows, int64_t cols, int64_t table_rows)
{
    int64_t n = rows * cols, tn = table_rows * cols;
    float *row = hnormal(cols, 0, 1), *x = hnormal(n, 0, 1), *y = hnormal(n, 0, 1),
          *sum = hnormal(cols, 0, 1);
    float *drow = up(row, cols), *dx = up(x, n), *dy = up(y, n), *dsum = up(sum, cols);
    gpu->rows_fill(dy, drow, rows, cols);
    cpu->rows_fill(y, row, rows, cols);
    cmp_dev("fill", dy, y, n, BITS);
    gpu->rows_add(dy, drow, rows, cols);
    cpu->rows_add(y, row, rows, cols);
    cmp_dev("add", dy, y, n, TOL_F32);
    gpu->rows_sum_add(dsum, dx, rows, cols);
    cpu->rows_sum_add(sum, x, rows, cols);
    cmp_dev("sum", dsum, sum, cols, rows > 256 ? TOL_LONG : TOL_F32);
    done("rows_fill, rows_add, rows_sum_add %lldx%lld", (long long)rows, (long long)cols);

    /* ids: whole numbers as floats, many repeats when table_rows is small */
    float *ids = hmalloc((size_t)rows * sizeof *ids), *table = hnormal(tn, 0, 1),
          *out = hmalloc((size_t)n * 4);
    x = hnormal(n, 0, 1);
    for (int64_t r = 0; r < rows; r++)
        ids[r] = (float)(dt_rng_next(&rng) % (uint64_t)table_rows);
    float *dids = up(ids, rows), *dtab = up(table, tn), *dout = gnew(n);
    gpu->rows_gather(dout, dtab, dids, rows, cols);
    cpu->rows_gather(out, table, ids, rows, cols);
    cmp_dev("gather", dout, out, n, BITS);
    gpu->rows_scatter_add(dtab, dids, up(x, n), rows, cols);
    cpu->rows_scatter_add(table, ids, x, rows, cols);
    cmp_dev("scatter_add", dtab, table, tn, rows / table_rows > 256 ? TOL_LONG : TOL_F32);
    done("rows_gather, rows_scatter_add %lld rows of [%lld, %lld]", (long long)rows, (long long)table_rows,
         (long long)cols);
}

/* ---- layers ---- */

static void test_layernorm(int64_t rows, int64_t cols)
{
    int64_t n = rows * cols;
    float *x = hnormal(n, 2.0f, 1.5f), *w = hnormal(cols, 1, 0.1f), *b = hnormal(cols, 0, 0.1f);
    float *y = hmalloc((size_t)n * 4), *xh = hmalloc((size_t)n * 4), *rs = hmalloc((size_t)rows * 4);
    float *gy = gnew(n), *gxh = gnew(n), *grs = gnew(rows);
    gpu->layernorm_fwd(gy, gxh, grs, up(x, n), up(w, cols), up(b, cols), rows, cols, 1e-5f);
    cpu->layernorm_fwd(y, xh, rs, x, w, b, rows, cols, 1e-5f);
    cmp_dev("y", gy, y, n, TOL_F32);
    cmp_dev("xhat", gxh, xh, n, TOL_F32);
    cmp_dev("rstd", grs, rs, rows, TOL_F32);
    report("layernorm_fwd %lldx%lld", (long long)rows, (long long)cols);

    /* the backward from the cpu's xhat and rstd on both; dw and db accumulate */
    for (int with_dx = 1; with_dx >= 0; with_dx--) {
        float *dy = hnormal(n, 0, 1), *dw = hnormal(cols, 0, 1), *db = hnormal(cols, 0, 1);
        float *dx = with_dx ? hmalloc((size_t)n * 4) : NULL;
        float *gdx = with_dx ? gnew(n) : NULL, *gdw = up(dw, cols), *gdb = up(db, cols);
        gpu->layernorm_bwd(gdx, gdw, gdb, up(dy, n), up(xh, n), up(rs, rows), up(w, cols), rows, cols);
        cpu->layernorm_bwd(dx, dw, db, dy, xh, rs, w, rows, cols);
        if (with_dx)
            cmp_dev("dx", gdx, dx, n, TOL_F32);
        cmp_dev("dw", gdw, dw, cols, rows > 256 ? TOL_LONG : TOL_F32);
        cmp_dev("db", gdb, db, cols, rows > 256 ? TOL_LONG : TOL_F32);
        report("layernorm_bwd %lldx%lld%s", (long long)rows, (long long)cols, with_dx ? "" : " dx=NULL");
    }
    release();
}

static void test_activations(int64_t n)
{
    float *x = hnormal(n, 0, 3), *dy = hnormal(n, 0, 1);
    for (int64_t i = 0; i < n; i += 97)
        x[i] = 0.0f; /* relu's edge */
    float *y = hmalloc((size_t)n * 4), *t = hmalloc((size_t)n * 4), *dx = hmalloc((size_t)n * 4);
    float *gx = up(x, n), *gdy = up(dy, n), *gy = gnew(n), *gt = gnew(n);
    gpu->gelu_fwd(gy, gt, gx, n);
    cpu->gelu_fwd(y, t, x, n);
    cmp_dev("gelu y", gy, y, n, TOL_F32);
    cmp_dev("gelu t", gt, t, n, TOL_F32);
    gpu->gelu_bwd(gy, gdy, gx, up(t, n), n); /* the cpu's tanh on both */
    cpu->gelu_bwd(dx, dy, x, t, n);
    cmp_dev("gelu dx", gy, dx, n, TOL_F32);
    if (gpu->gelu_fwd_bf16 && gpu->gelu_bwd_bf16) { /* no t kept: bitwise the GPU's f32 pair, tanh recomputed */
        float *pair_y = hmalloc((size_t)n * 4), *pair_dx = hmalloc((size_t)n * 4), *gy2 = gnew(n), *gdx2 = gnew(n);
        gpu->gelu_fwd(gy, gt, gx, n);
        gpu->gelu_bwd(gdx2, gdy, gx, gt, n);
        if (gpu->download(pair_y, gy, (size_t)n * 4) != DT_OK || gpu->download(pair_dx, gdx2, (size_t)n * 4) != DT_OK)
            fail_at("download: %s", dt_last_error());
        if (!gpu->gelu_fwd_bf16(gy2, gx, n) || !gpu->gelu_bwd_bf16(gdx2, gdy, gx, n))
            fail_at("the bf16 GELU entries refused n=%lld", (long long)n);
        cmp_dev("gelu_fwd_bf16 y", gy2, pair_y, n, BITS);
        cmp_dev("gelu_bwd_bf16 dx", gdx2, pair_dx, n, BITS);
        cmp_dev("gelu_bwd_bf16 dx against the cpu", gdx2, dx, n, TOL_F32);
    }
    gpu->relu_fwd(gy, gx, n);
    cpu->relu_fwd(y, x, n);
    cmp_dev("relu y", gy, y, n, BITS);
    gpu->relu_bwd(gy, gdy, gx, n);
    cpu->relu_bwd(dx, dy, x, n);
    cmp_dev("relu dx", gy, dx, n, BITS);
    done("gelu_fwd, gelu_bwd (and their bf16 forms), relu_fwd, relu_bwd n=%lld", (long long)n);
}

static void test_dropout(int64_t n, float prob, int64_t slice, int64_t whole, int64_t first)
{
    uint64_t stream = dt_rng_next(&rng);
    float keep = 1.0f / (1.0f - prob);
    float *x = hnormal(n, 0, 1), *y = hmalloc((size_t)n * 4), *mask = hmalloc((size_t)n * 4);
    float *gy = gnew(n), *gm = gnew(n);
    gpu->dropout_fwd(gy, gm, up(x, n), n, stream, prob, keep, slice, whole, first);
    cpu->dropout_fwd(y, mask, x, n, stream, prob, keep, slice, whole, first);
    cmp_dev("mask", gm, mask, n, BITS);
    cmp_dev("y", gy, y, n, BITS);
    done("dropout n=%lld p=%g slice %lld of %lld from %lld (bitwise)", (long long)n, prob, (long long)slice,
         (long long)whole, (long long)first);
}

static void test_attention(dt_dtype dt, int64_t B, int64_t T, int64_t H, int64_t hd, float qscale)
{
    int64_t D = H * hd, nq = B * T * 3 * D, no = B * T * D;
    double tol = dt == DT_BF16 ? TOL_BF16 : TOL_F32, etol = dt == DT_BF16 ? 4 * TOL_BF16 : TOL_LONG;
    float *qkv = hnormal(nq, 0, qscale), *dout = hnormal(no, 0, 1), *got = hmalloc((size_t)nq * 4);
    float *out = hmalloc((size_t)no * 4), *dqkv = hmalloc((size_t)nq * 4);
    float *saved = hmalloc((size_t)cpu->attn_saved_floats(B, H, T) * 4);
    float *scratch = hmalloc((size_t)cpu->attn_scratch_floats(B, H, T, hd) * 4);
    float *gq = up(qkv, nq), *gout = gnew(no), *gsaved = gnew(gpu->attn_saved_floats(B, H, T));
    gpu->attn_fwd(dt, gout, gsaved, gq, B, T, H, hd);
    cpu->attn_fwd(dt, out, saved, qkv, B, T, H, hd);
    if (gpu->download(got, gout, (size_t)no * 4) != DT_OK)
        fail_at("download: %s", dt_last_error());
    cmp_mat("out", got, out, 1, no, no, tol, etol);
    char label[120];
    snprintf(label, sizeof label, "%s B%lld T%lld H%lld hd%lld%s", dt == DT_BF16 ? "bf16" : "f32",
             (long long)B, (long long)T, (long long)H, (long long)hd, qscale != 1 ? " (peaked scores)" : "");
    report("attn_fwd %s", label);

    for (int64_t i = 0; i < nq; i++) /* the backward writes dqkv whole: it starts as NaN */
        got[i] = NAN;
    float *gdq = up(got, nq);
    gpu->attn_bwd(dt, gdq, gnew(gpu->attn_scratch_floats(B, H, T, hd)), up(dout, no), gq, gout, gsaved, B, T,
                  H, hd);
    cpu->attn_bwd(dt, dqkv, scratch, dout, qkv, out, saved, B, T, H, hd);
    if (gpu->download(got, gdq, (size_t)nq * 4) != DT_OK)
        fail_at("download: %s", dt_last_error());
    cmp_mat("dqkv", got, dqkv, 1, nq, nq, dt == DT_BF16 ? 2 * tol : tol, dt == DT_BF16 ? 2 * etol : etol);
    done("attn_bwd %s", label);
}

static void test_xent(int64_t rows, int64_t classes, int ignore_pct)
{
    int64_t n = rows * classes, counted = 0;
    float *z = hnormal(n, 0, 2), *dz = hmalloc((size_t)n * 4);
    z[n / 2] = 80.0f; /* a large logit: exp overflows without the max shift */
    int32_t *t = hmalloc((size_t)rows * sizeof *t);
    for (int64_t r = 0; r < rows; r++) {
        t[r] = (int)(dt_rng_next(&rng) % 100) < ignore_pct ? -1
                                                           : (int32_t)(dt_rng_next(&rng) % (uint64_t)classes);
        counted += t[r] != -1;
    }
    float *gz = up(z, n), *gdz = gnew(n);
    int32_t *gt = galloc(t, (size_t)rows * sizeof *t);
    for (int with_grad = 1; with_grad >= 0; with_grad--) {
        float lg = NAN, lc = NAN;
        dt_status sg = gpu->xent(&lg, with_grad ? gdz : NULL, gz, gt, rows, classes, counted);
        dt_status sc = cpu->xent(&lc, with_grad ? dz : NULL, z, t, rows, classes, counted);
        if (sg != DT_OK || sc != DT_OK)
            fail_at("xent returned %s, cpu %s: %s", dt_status_name(sg), dt_status_name(sc), dt_last_error());
        cmp_scalar("loss", lg, lc, TOL_F32);
        if (with_grad)
            cmp_dev("dlogits", gdz, dz, n, TOL_F32);
        report("xent %lldx%lld, %lld counted%s", (long long)rows, (long long)classes, (long long)counted,
               with_grad ? "" : " (loss only)");
    }
    release();
}

/* ---- optimizers: a few steps from fresh state, compared after the first and the last ---- */

static void test_optim(int64_t n, bool adam, float wd, float mu, bool nesterov)
{
    float *p = hnormal(n, 0, 0.5f), *m = hnormal(n, 0, 1), *v = hmalloc((size_t)n * 4);
    if (adam)
        memset(m, 0, (size_t)n * 4),
            memset(v, 0, (size_t)n * 4); /* sgd: m is buf, garbage the first step sets */
    float *gp = up(p, n), *gm = up(m, n), *gv = up(v, n);
    const float lr = adam ? 1e-3f : 0.05f, b1 = 0.9f, b2 = 0.95f;
    char label[120];
    if (adam)
        snprintf(label, sizeof label, "adamw n=%lld wd %g", (long long)n, wd);
    else
        snprintf(label, sizeof label, "sgd n=%lld wd %g momentum %g%s", (long long)n, wd, mu,
                 nesterov ? " nesterov" : "");
    for (int step = 1; step <= 3; step++) {
        float *g = hnormal(n, 0, 1), *gg = up(g, n);
        float bc1 = 1.0f - powf(b1, (float)step), bc2s = sqrtf(1.0f - powf(b2, (float)step));
        if (adam) {
            gpu->adamw(gp, gg, gm, gv, n, lr, wd, b1, b2, 1e-8f, bc1, bc2s);
            cpu->adamw(p, g, m, v, n, lr, wd, b1, b2, 1e-8f, bc1, bc2s);
        } else { /* momentum 0: buf unused, NULL */
            gpu->sgd(gp, gg, mu > 0 ? gm : NULL, n, lr, wd, mu, nesterov, step == 1);
            cpu->sgd(p, g, mu > 0 ? m : NULL, n, lr, wd, mu, nesterov, step == 1);
        }
        if (step == 2)
            continue;
        cmp_dev("p", gp, p, n, TOL_F32);
        if (adam || mu > 0)
            cmp_dev(adam ? "m" : "buf", gm, m, n, TOL_F32);
        if (adam)
            cmp_dev("v", gv, v, n, TOL_F32);
        report("%s after step %d", label, step);
    }
    release();
}

int main(int argc, char **argv)
{
    const char *env = getenv("DT_TEST_QUICK");
    bool quick = (argc > 1 && !strcmp(argv[1], "--quick")) || (env && !strcmp(env, "1"));
    if (dt__cuda_init(0) != DT_OK) {
        printf("SKIP: %s\n", dt_last_error());
        return 77;
    }
    if (!(gpu = dt__cuda_ops())) {
        printf("SKIP: dt__cuda_ops() is NULL: built without CUDA\n");
        return 77;
    }
    dt__cuda_set_tf32(false); /* full f32 products: the 1e-5 bounds assume them */
    char desc[256] = "?";
    dt__cuda_describe(desc, sizeof desc);
    printf("gpu_kernels: %s%s\n", desc, quick ? " (quick)" : "");
    dt_rng_seed(&rng, 42);

    test_absurd_alloc((size_t)1 << 50, "1 PiB");
    test_absurd_alloc(SIZE_MAX - 100, "SIZE_MAX - 100: rounding up must not wrap");
    gpu->free(NULL);
    size_t mem[] = {0, 1, 3, 13, 4099, ((size_t)1 << 20) + 3};
    for (size_t i = 0; i < sizeof mem / sizeof *mem; i++)
        test_memory(mem[i]);
    test_copy_stream(1);
    test_copy_stream(((size_t)64 << 20) + 5);

    const struct {
        int64_t m, n, k, pad;
    } gs[] = {{1, 1, 1, 0},      {67, 33, 129, 3},  {96, 64, 132, 4},  {5, 1, 300, 1},
              {1, 77, 31, 0},    {128, 256, 64, 0}, {257, 65, 513, 5}, {2048, 2304, 768, 0}};
    /* pad 4: strided rows of whole 16-byte groups (the bf16 conversion's vector path); 3, 5: its fallback */
    for (int s = 0; s < (quick ? 6 : 8); s++)
        for (int t = 0; t < 4; t++) {
            test_gemm(DT_F32, t >> 1, t & 1, gs[s].m, gs[s].n, gs[s].k, 1.0f, 0.0f, gs[s].pad);
            test_gemm(DT_F32, t >> 1, t & 1, gs[s].m, gs[s].n, gs[s].k, 0.7f, -1.3f, gs[s].pad);
            test_gemm(DT_BF16, t >> 1, t & 1, gs[s].m, gs[s].n, gs[s].k, 1.0f, 0.0f, gs[s].pad);
            test_gemm(DT_BF16, t >> 1, t & 1, gs[s].m, gs[s].n, gs[s].k, -0.5f, 0.25f, gs[s].pad);
        }

    const int64_t vn[] = {1, 7, 4096, 1000003};
    for (int i = 0; i < (quick ? 3 : 4); i++)
        test_vectors(vn[i]);

    test_linear_grads(DT_BF16, 1, 1, 1, true, true);
    test_linear_grads(DT_BF16, 67, 33, 129, true, true); /* odd sizes: the conversion's fallback */
    test_linear_grads(DT_BF16, 96, 64, 300, false, true);
    test_linear_grads(DT_BF16, 96, 64, 300, true, false);
    test_linear_grads(DT_F32, 67, 33, 129, true, true);
    if (!quick)
        test_linear_grads(DT_BF16, 2304, 768, 2048, true, true); /* GPT-2's QKV, 2 of 8 sequences */
    test_rows(1, 1, 1);
    test_rows(37, 67, 5);
    test_rows(130, 33, 1000);
    test_rows(3, 100003, 2);  /* rows_add: blocks along the columns */
    test_rows(8, 786433, 2);  /* ... and a grid-stride over them (GPT-2's position add is 8 x 786432) */
    if (!quick)
        test_rows(4096, 768, 3); /* ~1365 rows per id: scatter_add's long sums */

    const int64_t ln[][2] = {{1, 1}, {3, 7}, {67, 129}, {5, 3072}, {2048, 768}};
    for (int i = 0; i < (quick ? 4 : 5); i++)
        test_layernorm(ln[i][0], ln[i][1]);

    const int64_t an[] = {1, 1001, 4096, (1 << 20) + 7};
    for (int i = 0; i < (quick ? 3 : 4); i++)
        test_activations(an[i]);

    int64_t big = quick ? 4099 : (1 << 20) + 3;
    test_dropout(1, 0.1f, 1, 1, 0);
    test_dropout(1000, 0.1f, 1000, 1000, 0);
    test_dropout(67 * 48, 0.5f, 48, 128, 32); /* a sequence-parallel slice */
    test_dropout(big, 0.2f, big, big, 0);

    const struct {
        int64_t B, T, H, hd;
        float qscale;
    } at[] = {{1, 1, 1, 16, 1},  {1, 1, 12, 64, 1},  {2, 67, 3, 32, 1},
              {3, 17, 2, 16, 1}, {1, 67, 12, 64, 1}, {2, 128, 4, 64, 3},
              {1, 65, 1, 32, 1}, {4, 256, 6, 64, 1}, {1, 1024, 12, 64, 1}};
    for (int i = 0; i < (quick ? 7 : 9); i++) {
        test_attention(DT_F32, at[i].B, at[i].T, at[i].H, at[i].hd, at[i].qscale);
        test_attention(DT_BF16, at[i].B, at[i].T, at[i].H, at[i].hd, at[i].qscale);
    }

    test_xent(1, 1, 0);
    test_xent(5, 3, 0);
    test_xent(67, 257, 20);
    test_xent(4, 100, 100); /* every target ignored: loss 0, gradient 0 */
    test_xent(quick ? 8 : 256, 50304, 10);

    const int64_t on[] = {1, 1001, (1 << 20) + 5};
    for (int i = 0; i < (quick ? 2 : 3); i++) {
        test_optim(on[i], true, 0.1f, 0, false);
        test_optim(on[i], true, 0.0f, 0, false);
        test_optim(on[i], false, 0.0f, 0.9f, false);
        test_optim(on[i], false, 1e-2f, 0.9f, false);
        test_optim(on[i], false, 1e-2f, 0.9f, true);
        test_optim(on[i], false, 1e-2f, 0.0f, false);
    }

    done("sync at the end");
    printf("gpu_kernels: %d checks, %d ok, %d failed\n", n_ok + n_fail, n_ok, n_fail);
    return n_fail ? 1 : 0;
}
