/* PowerSGD (Vogels, Karimireddy, Jaggi, NeurIPS 2019), as PyTorch's
 * powerSGD_hook does it, on one bucket.  Each matrix of the bucket (a
 * parameter of 2 or more dimensions, rows = shape[0], cols = the rest, worth
 * compressing: r (rows + cols) <= rows cols / 2) with its error e:
 *
 *   M = G + e                 (in place in the gradients)
 *   P = M Q                   rows x r, Q cols x r warm-started from the last step
 *   allreduce P (average)     together with the bucket's other tensors, uncompressed
 *   P = orthonormal columns (Gram-Schmidt, in a fixed order)
 *   Q = M^T P                 allreduce Q (average)
 *   M' = P Q^T,  e = M - M',  G = M'
 *
 * Bytes per matrix: r (rows + cols) floats instead of rows x cols.  Every
 * rank gets the same P and Q bits from the allreduces and computes M' from
 * them alone, so every rank's M' is the same.  Q starts from a normal draw
 * keyed by the parameter's index, the same on every rank.
 *
 * The per-matrix compute has two forms (DT_POWERSGD_KERNELS): the fast one
 * (powersgd_fast.c: blocked products on the compute threads, fused and
 * vectorised error passes, Gram-Schmidt by rows, its matrices in parallel)
 * and the reference below, which it equals to f32 rounding. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/status.h"
#include "parallel/ddp/compress.h"
#include "parallel/ddp/powersgd_fast.h"
#include "tensor/threads.h"

typedef struct {
    int64_t off;        /* in the flat buffer */
    int64_t rows, cols; /* M is rows x cols, row-major */
    int64_t p_at, q_at; /* in pbuf, in q */
} matrix;

typedef struct {
    int64_t off, n;
} plain;

struct dt__cx_impl {
    int r;
    matrix *m;
    int nm;
    plain *u; /* sent uncompressed */
    int nu;
    int64_t p_floats, u_floats, q_floats;
    float *pbuf; /* the matrices' P, then the uncompressed tensors */
    float *q;    /* persistent: the matrices' Q */
    double *dot; /* the fast Gram-Schmidt's scratch, r per matrix */
    bool fast;   /* powersgd_fast.c's kernels (else the reference's) */
    int phase;
};

static bool worth_it(const dt_param_info *info, int r, int64_t *rows, int64_t *cols)
{
    if (info->ndim < 2 || info->row_sparse || info->numel == 0)
        return false;
    *rows = info->shape[0];
    *cols = info->numel / info->shape[0];
    return (double)r * (double)(*rows + *cols) * 2 <= (double)*rows * (double)*cols;
}

static dt_status create(dt__compressor *c, int b, int64_t offset, int64_t count, dt__cx_impl **out)
{
    (void)b;
    dt__cx_impl *k = calloc(1, sizeof *k);
    int n = dt_params_count(c->p);
    if (!k || !(k->m = calloc((size_t)n, sizeof *k->m)) || !(k->u = calloc((size_t)n, sizeof *k->u))) {
        if (k) {
            free(k->m);
            free(k);
        }
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    *out = k;
    k->r = c->cfg.powersgd_rank;
    const char *kernels = dt__env_str("DT_POWERSGD_KERNELS");
    if (kernels && strcmp(kernels, "fast") && strcmp(kernels, "reference"))
        return dt__fail(DT_ERR_INVALID, "DT_POWERSGD_KERNELS='%s': expected fast or reference", kernels);
    k->fast = !kernels || !strcmp(kernels, "fast");
    for (int i = 0; i < n; i++) {
        const dt_param_info *info = dt_params_info(c->p, i);
        if (info->offset < offset || info->offset >= offset + count)
            continue;
        int64_t rows, cols;
        if (worth_it(info, k->r, &rows, &cols)) {
            k->m[k->nm++] = (matrix){info->offset, rows, cols, k->p_floats, k->q_floats};
            k->p_floats += rows * k->r;
            k->q_floats += cols * k->r;
        } else {
            k->u[k->nu++] = (plain){info->offset, info->numel};
            k->u_floats += info->numel;
        }
    }
    k->pbuf = malloc((size_t)(k->p_floats + k->u_floats + 1) * sizeof(float));
    k->q = malloc((size_t)(k->q_floats + 1) * sizeof(float));
    k->dot = malloc((size_t)(k->nm * k->r + 1) * sizeof(double));
    if (!k->pbuf || !k->q || !k->dot)
        return dt__fail(DT_ERR_NOMEM, "powersgd: out of memory for %lld + %lld floats", (long long)k->p_floats,
                        (long long)k->q_floats);
    for (int j = 0; j < k->nm; j++) { /* the same draw on every rank */
        dt_rng g;
        dt_rng_seed(&g, 0x9e3779b97f4a7c15ull ^ (uint64_t)k->m[j].off);
        for (int64_t e = 0; e < k->m[j].cols * k->r; e++)
            k->q[k->m[j].q_at + e] = dt_rng_normal(&g);
    }
    return DT_OK;
}

/* Columns of the rows x r row-major P made orthonormal, one after the other
 * (sums in double, a fixed order).  A zero column stays zero.  The
 * reference (powersgd_fast.h). */
void dt__psgd_orthogonalise_ref(float *p, int64_t rows, int r)
{
    for (int i = 0; i < r; i++) {
        double ss = 0;
        for (int64_t j = 0; j < rows; j++)
            ss += (double)p[j * r + i] * p[j * r + i];
        float inv = ss > 0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
        for (int64_t j = 0; j < rows; j++)
            p[j * r + i] *= inv;
        for (int l = i + 1; l < r; l++) {
            double dot = 0;
            for (int64_t j = 0; j < rows; j++)
                dot += (double)p[j * r + i] * p[j * r + l];
            for (int64_t j = 0; j < rows; j++)
                p[j * r + l] -= (float)dot * p[j * r + i];
        }
    }
}

/* The fast Gram-Schmidt of matrices [b, e) of the bucket, one per thread. */
static void orthogonalise_range(int64_t b, int64_t e, void *arg)
{
    dt__cx_impl *k = arg;
    for (int64_t j = b; j < e; j++)
        dt__psgd_orthogonalise(k->pbuf + k->m[j].p_at, k->m[j].rows, k->r, k->dot + j * k->r);
}

/* M = G + e into G; P = M Q; the uncompressed tensors after the P's. */
static dt_status begin(dt__compressor *c, dt__cx_impl *k, float *g, dt__cx_msg *msg)
{
    float *e = c->error;
    for (int j = 0; j < k->nm; j++) {
        const matrix *m = &k->m[j];
        float *mg = g + m->off, *me = e + m->off;
        if (k->fast) {
            dt__psgd_encode(mg, me, m->rows, m->cols, k->r, k->q + m->q_at, k->pbuf + m->p_at);
            continue;
        }
        for (int64_t i = 0; i < m->rows * m->cols; i++)
            mg[i] += me[i];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m->rows, k->r, (int)m->cols, 1.0f, mg,
                    (int)m->cols, k->q + m->q_at, k->r, 0.0f, k->pbuf + m->p_at, k->r);
    }
    float *u = k->pbuf + k->p_floats;
    for (int j = 0; j < k->nu; u += k->u[j].n, j++)
        memcpy(u, g + k->u[j].off, (size_t)k->u[j].n * sizeof *u);
    k->phase = 1;
    *msg = (dt__cx_msg){false, k->pbuf, k->pbuf, (size_t)(k->p_floats + k->u_floats)};
    return DT_OK;
}

static dt_status next(dt__compressor *c, dt__cx_impl *k, float *g, dt__cx_msg *msg, bool *more)
{
    if (k->phase == 1) { /* P and the uncompressed tensors averaged */
        const float *u = k->pbuf + k->p_floats;
        for (int j = 0; j < k->nu; u += k->u[j].n, j++)
            memcpy(g + k->u[j].off, u, (size_t)k->u[j].n * sizeof *u);
        if (k->fast)
            dt__parallel_for(k->nm, 1, orthogonalise_range, k);
        for (int j = 0; j < k->nm; j++) {
            const matrix *m = &k->m[j];
            float *p = k->pbuf + m->p_at;
            if (k->fast) {
                dt__psgd_project(g + m->off, m->rows, m->cols, k->r, p, k->q + m->q_at);
                continue;
            }
            dt__psgd_orthogonalise_ref(p, m->rows, k->r);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)m->cols, k->r, (int)m->rows, 1.0f,
                        g + m->off, (int)m->cols, p, k->r, 0.0f, k->q + m->q_at, k->r);
        }
        k->phase = k->nm > 0 ? 2 : 0;
        *more = k->nm > 0;
        *msg = (dt__cx_msg){false, k->q, k->q, (size_t)k->q_floats};
        return DT_OK;
    }
    if (k->phase != 2)
        return dt__fail(DT_ERR_INTERNAL, "powersgd: next in phase %d", k->phase);
    /* Q averaged: M' = P Q^T into the error's place, then e = M - M', G = M' */
    for (int j = 0; j < k->nm; j++) {
        const matrix *m = &k->m[j];
        float *mg = g + m->off, *me = c->error + m->off;
        if (k->fast) {
            dt__psgd_decode(mg, me, m->rows, m->cols, k->r, k->pbuf + m->p_at, k->q + m->q_at);
            continue;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m->rows, (int)m->cols, k->r, 1.0f,
                    k->pbuf + m->p_at, k->r, k->q + m->q_at, k->r, 0.0f, me, (int)m->cols);
        for (int64_t i = 0; i < m->rows * m->cols; i++) {
            float approx = me[i];
            me[i] = mg[i] - approx;
            mg[i] = approx;
        }
    }
    k->phase = 0;
    *more = false;
    return DT_OK;
}

static int messages(const dt__cx_impl *k) { return k->nm > 0 ? 2 : 1; }

static float *state(dt__cx_impl *k, size_t *n)
{
    *n = (size_t)k->q_floats;
    return k->q;
}

static void destroy(dt__cx_impl *k)
{
    free(k->m);
    free(k->u);
    free(k->pbuf);
    free(k->q);
    free(k->dot);
    free(k);
}

const dt__cx_ops dt__cx_powersgd = {"powersgd", create, begin, next, messages, state, destroy};
