/* DT_KERNEL_PROFILE=1: where a device's step goes, entry by entry.  The
 * device table (emu or cuda) is wrapped: each compute and copy entry waits
 * for the device before and after it (the table's sync) and adds the time
 * between to its key (the entry's name; a matrix product's also its
 * precision, transposes and shape, with its FLOP rate).  The waits remove
 * the overlap of launches with the GPU's work, so the sum is above the
 * step's time; each kernel's own time is what it measures.  Nothing runs
 * through here unless the variable is set: the table dt_device_open hands
 * out is the device's own then.
 *
 * One device kind per process is profiled (the first opened); the report
 * (dt_device_profile_print) sorts the keys by total time. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/env.h"
#include "tensor/backend.h"
#include "tensor/profile.h"

#define MAX_KEYS 512

typedef struct {
    char key[112];
    int64_t calls;
    int64_t ns;
    double flops; /* 0: not a matrix product */
} prof_row;

static const dt_compute_ops *inner; /* the wrapped device's own table */
static dt_compute_ops wrapped;
static prof_row rows[MAX_KEYS];
static int nrows;
static bool overflowed;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static int64_t begin(void)
{
    (void)inner->sync();
    return dt__now_ns();
}

static void end(int64_t t0, const char *key, double flops)
{
    (void)inner->sync();
    int64_t ns = dt__now_ns() - t0;
    pthread_mutex_lock(&mu);
    int i = 0;
    while (i < nrows && strcmp(rows[i].key, key))
        i++;
    if (i == nrows) {
        if (nrows == MAX_KEYS) {
            overflowed = true;
            pthread_mutex_unlock(&mu);
            return;
        }
        snprintf(rows[nrows++].key, sizeof rows[0].key, "%s", key);
    }
    rows[i].calls++;
    rows[i].ns += ns;
    rows[i].flops += flops;
    pthread_mutex_unlock(&mu);
}

/* Time `call` under `key` (a string literal or a buffer). */
#define TIMED(key, flops, call) \
    do { \
        int64_t t0_ = begin(); \
        call; \
        end(t0_, key, flops); \
    } while (0)

static const char *prec(dt_dtype c) { return c == DT_BF16 ? "bf16" : "f32"; }

/* A product's key: precision, transposes, shape, and where its output is
 * not 256-byte aligned, its alignment (cuBLASLt picks kernels by it). */
static void gemm_key(char *k, size_t n, const char *what, dt_dtype c, int ta, int tb, int64_t m, int64_t nn,
                     int64_t kk, const void *out)
{
    uintptr_t low = (uintptr_t)out & 255u;
    char al[24] = "";
    if (low)
        snprintf(al, sizeof al, " (C %u-byte aligned)", (unsigned)(low & (~low + 1)));
    snprintf(k, n, "%s %s %c%c m=%lld n=%lld k=%lld%s", what, prec(c), ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)m,
             (long long)nn, (long long)kk, al);
}

/* ---- the wrappers: the inner entry, timed ---- */

static dt_status w_upload(void *d, const void *s, size_t b)
{
    dt_status r;
    TIMED("upload", 0, r = inner->upload(d, s, b));
    return r;
}
static dt_status w_download(void *d, const void *s, size_t b)
{
    dt_status r;
    TIMED("download", 0, r = inner->download(d, s, b));
    return r;
}
static dt_status w_copy(void *d, const void *s, size_t b)
{
    dt_status r;
    TIMED("copy", 0, r = inner->copy(d, s, b));
    return r;
}
static dt_status w_zero(void *d, size_t b)
{
    dt_status r;
    TIMED("zero", 0, r = inner->zero(d, b));
    return r;
}
static void w_gemm(dt_dtype c, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float beta, float *cc, int64_t ldc)
{
    char key[112];
    gemm_key(key, sizeof key, "gemm", c, ta, tb, m, n, k, cc);
    TIMED(key, 2.0 * (double)m * (double)n * (double)k,
          inner->gemm(c, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, cc, ldc));
}
static void w_gemm_bias(dt_dtype c, int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                        const float *b, int64_t ldb, const float *bias, float *cc)
{
    char key[112];
    gemm_key(key, sizeof key, "gemm+bias", c, ta, tb, m, n, k, cc);
    TIMED(key, 2.0 * (double)m * (double)n * (double)k, inner->gemm_bias(c, ta, tb, m, n, k, a, lda, b, ldb, bias, cc));
}
static void w_gemm_grad_bias(dt_dtype c, int64_t m, int64_t n, int64_t k, const float *dy, const float *x, float *dw,
                             float *db)
{
    char key[112];
    gemm_key(key, sizeof key, "gemm dW+db", c, 1, 0, m, n, k, dw);
    TIMED(key, 2.0 * (double)m * (double)n * (double)k, inner->gemm_grad_bias(c, m, n, k, dy, x, dw, db));
}
static void w_linear_grads(dt_dtype c, int64_t m, int64_t n, int64_t k, const float *dy, const float *x,
                           const float *w, float *dw, float *db, float *dx)
{
    char key[112];
    gemm_key(key, sizeof key, dx ? "linear dW+dx" : "linear dW", c, 1, 0, m, n, k, dw);
    TIMED(key, (dx ? 4.0 : 2.0) * (double)m * (double)n * (double)k,
          inner->linear_grads(c, m, n, k, dy, x, w, dw, db, dx));
}
static void w_axpy(float *y, float alpha, const float *x, int64_t n) { TIMED("axpy", 0, inner->axpy(y, alpha, x, n)); }
static void w_add(float *y, const float *a, const float *b, int64_t n) { TIMED("add", 0, inner->add(y, a, b, n)); }
static void w_mul(float *y, const float *a, const float *b, int64_t n) { TIMED("mul", 0, inner->mul(y, a, b, n)); }
static void w_scale(float *x, float alpha, int64_t n) { TIMED("scale", 0, inner->scale(x, alpha, n)); }
static double w_sumsq(const float *x, int64_t n)
{
    double r;
    TIMED("sumsq", 0, r = inner->sumsq(x, n));
    return r;
}
static void w_rows_fill(float *y, const float *row, int64_t r, int64_t c)
{
    TIMED("rows_fill", 0, inner->rows_fill(y, row, r, c));
}
static void w_rows_sum_add(float *s, const float *x, int64_t r, int64_t c)
{
    TIMED("rows_sum_add", 0, inner->rows_sum_add(s, x, r, c));
}
static void w_rows_add(float *y, const float *row, int64_t r, int64_t c)
{
    TIMED("rows_add", 0, inner->rows_add(y, row, r, c));
}
static void w_rows_gather(float *o, const float *t, const float *ids, int64_t n, int64_t c)
{
    TIMED("rows_gather (embedding)", 0, inner->rows_gather(o, t, ids, n, c));
}
static void w_rows_scatter_add(float *t, const float *ids, const float *x, int64_t n, int64_t c)
{
    TIMED("rows_scatter_add (embedding grad)", 0, inner->rows_scatter_add(t, ids, x, n, c));
}
static void w_layernorm_fwd(float *y, float *xhat, float *rstd, const float *x, const float *w, const float *b,
                            int64_t r, int64_t c, float eps)
{
    TIMED("layernorm_fwd", 0, inner->layernorm_fwd(y, xhat, rstd, x, w, b, r, c, eps));
}
static void w_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *xhat, const float *rstd,
                            const float *w, int64_t r, int64_t c)
{
    TIMED("layernorm_bwd", 0, inner->layernorm_bwd(dx, dw, db, dy, xhat, rstd, w, r, c));
}
static void w_gelu_fwd(float *y, float *t, const float *x, int64_t n) { TIMED("gelu_fwd", 0, inner->gelu_fwd(y, t, x, n)); }
static void w_gelu_bwd(float *dx, const float *dy, const float *x, const float *t, int64_t n)
{
    TIMED("gelu_bwd", 0, inner->gelu_bwd(dx, dy, x, t, n));
}
static bool w_gelu_fwd_bf16(float *y, const float *x, int64_t n)
{
    bool r;
    TIMED("gelu_fwd (bf16 path)", 0, r = inner->gelu_fwd_bf16(y, x, n));
    return r;
}
static bool w_gelu_bwd_bf16(float *dx, const float *dy, const float *x, int64_t n)
{
    bool r;
    TIMED("gelu_bwd (bf16 path)", 0, r = inner->gelu_bwd_bf16(dx, dy, x, n));
    return r;
}
static void w_relu_fwd(float *y, const float *x, int64_t n) { TIMED("relu_fwd", 0, inner->relu_fwd(y, x, n)); }
static void w_relu_bwd(float *dx, const float *dy, const float *x, int64_t n)
{
    TIMED("relu_bwd", 0, inner->relu_bwd(dx, dy, x, n));
}
static void w_dropout_fwd(float *y, float *mask, const float *x, int64_t n, uint64_t stream, float prob, float keep,
                          int64_t slice, int64_t whole, int64_t first)
{
    TIMED("dropout_fwd", 0, inner->dropout_fwd(y, mask, x, n, stream, prob, keep, slice, whole, first));
}
static void w_attn_fwd(dt_dtype c, float *out, float *saved, const float *qkv, int64_t B, int64_t T, int64_t H,
                       int64_t hd)
{
    char key[80];
    snprintf(key, sizeof key, "attention fwd %s B=%lld T=%lld H=%lld hd=%lld", prec(c), (long long)B, (long long)T,
             (long long)H, (long long)hd);
    /* causal: half of the 2 products of 2 B H T^2 hd FLOPs each */
    TIMED(key, 2.0 * (double)B * (double)H * (double)T * (double)T * (double)hd,
          inner->attn_fwd(c, out, saved, qkv, B, T, H, hd));
}
static void w_attn_bwd(dt_dtype c, float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                       const float *saved, int64_t B, int64_t T, int64_t H, int64_t hd)
{
    char key[80];
    snprintf(key, sizeof key, "attention bwd %s B=%lld T=%lld H=%lld hd=%lld", prec(c), (long long)B, (long long)T,
             (long long)H, (long long)hd);
    /* causal: half of 5 products (the recomputed scores, dV, dP, dQ, dK) */
    TIMED(key, 5.0 * (double)B * (double)H * (double)T * (double)T * (double)hd,
          inner->attn_bwd(c, dqkv, scratch, dout, qkv, out, saved, B, T, H, hd));
}
static dt_status w_xent(float *loss, float *dl, const float *logits, const int32_t *targets, int64_t r, int64_t c,
                        int64_t counted)
{
    dt_status s;
    TIMED("softmax cross-entropy", 0, s = inner->xent(loss, dl, logits, targets, r, c, counted));
    return s;
}
static void w_adamw(float *p, const float *g, float *m, float *v, int64_t n, float lr, float wd, float b1, float b2,
                    float eps, float bc1, float bc2)
{
    TIMED("adamw", 0, inner->adamw(p, g, m, v, n, lr, wd, b1, b2, eps, bc1, bc2));
}
static void w_sgd(float *p, const float *g, float *buf, int64_t n, float lr, float wd, float mu, bool nesterov,
                  bool first)
{
    TIMED("sgd", 0, inner->sgd(p, g, buf, n, lr, wd, mu, nesterov, first));
}

bool dt__profile_on(void)
{
    const char *v = dt__env_str("DT_KERNEL_PROFILE");
    return v && !strcmp(v, "1");
}

const dt_compute_ops *dt__profile_wrap(const dt_compute_ops *ops)
{
    if (!ops || ops->host)
        return ops;
    pthread_mutex_lock(&mu);
    if (inner && inner != ops) { /* one device kind per process */
        pthread_mutex_unlock(&mu);
        return ops;
    }
    if (!inner) {
        inner = ops;
        wrapped = *ops;
/* an optional entry stays NULL */
#define WRAP(e) wrapped.e = ops->e ? w_##e : NULL
        WRAP(upload);
        WRAP(download);
        WRAP(copy);
        WRAP(zero);
        WRAP(gemm);
        WRAP(gemm_bias);
        WRAP(gemm_grad_bias);
        WRAP(linear_grads);
        WRAP(axpy);
        WRAP(add);
        WRAP(mul);
        WRAP(scale);
        WRAP(sumsq);
        WRAP(rows_fill);
        WRAP(rows_sum_add);
        WRAP(rows_add);
        WRAP(rows_gather);
        WRAP(rows_scatter_add);
        WRAP(layernorm_fwd);
        WRAP(layernorm_bwd);
        WRAP(gelu_fwd);
        WRAP(gelu_bwd);
        WRAP(gelu_fwd_bf16);
        WRAP(gelu_bwd_bf16);
        WRAP(relu_fwd);
        WRAP(relu_bwd);
        WRAP(dropout_fwd);
        WRAP(attn_fwd);
        WRAP(attn_bwd);
        WRAP(xent);
        WRAP(adamw);
        WRAP(sgd);
#undef WRAP
    }
    pthread_mutex_unlock(&mu);
    return &wrapped;
}

const dt_compute_ops *dt__profile_inner(const dt_compute_ops *ops)
{
    return inner && ops == &wrapped ? inner : ops;
}

static int by_time(const void *a, const void *b)
{
    const prof_row *x = a, *y = b;
    return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : strcmp(x->key, y->key);
}

bool dt_device_profile_print(FILE *f, int top)
{
    pthread_mutex_lock(&mu);
    if (!inner || nrows == 0) {
        pthread_mutex_unlock(&mu);
        return false;
    }
    prof_row *sorted = malloc((size_t)nrows * sizeof *sorted);
    if (!sorted) {
        pthread_mutex_unlock(&mu);
        return false;
    }
    int n = nrows;
    memcpy(sorted, rows, (size_t)n * sizeof *sorted);
    bool over = overflowed;
    pthread_mutex_unlock(&mu);
    qsort(sorted, (size_t)n, sizeof *sorted, by_time);
    double total = 0;
    for (int i = 0; i < n; i++)
        total += (double)sorted[i].ns;
    fprintf(f, "kernel profile (DT_KERNEL_PROFILE=1, %s; each entry timed between device waits, so launches do not "
               "overlap): %.1f ms in %d kinds of call\n",
            inner->name, total / 1e6, n);
    fprintf(f, "  %7s %10s %9s %6s %8s  %s\n", "share", "total ms", "calls", "us", "TFLOP/s", "entry");
    int shown = top > 0 && top < n ? top : n;
    for (int i = 0; i < shown; i++) {
        const prof_row *r = &sorted[i];
        char rate[16] = "";
        if (r->flops > 0 && r->ns > 0)
            snprintf(rate, sizeof rate, "%.1f", r->flops / ((double)r->ns * 1e3));
        fprintf(f, "  %6.1f%% %10.3f %9lld %6.0f %8s  %s\n", 100.0 * (double)r->ns / total, (double)r->ns / 1e6,
                (long long)r->calls, (double)r->ns / 1e3 / (double)r->calls, rate, r->key);
    }
    if (shown < n) {
        double rest = 0;
        for (int i = shown; i < n; i++)
            rest += (double)sorted[i].ns;
        fprintf(f, "  %6.1f%% %10.3f %9s %6s %8s  (%d more kinds)\n", 100.0 * rest / total, rest / 1e6, "", "", "",
                n - shown);
    }
    if (over)
        fprintf(f, "  (more than %d kinds: the later ones are not counted)\n", MAX_KEYS);
    free(sorted);
    return true;
}
