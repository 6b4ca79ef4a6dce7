/* conv2d (NCHW, square kernel, stride 1, zero padding) through oneDNN
 * (conv_dnnl.c, where the build has it and DT_CONV is not im2col) or else
 * through im2col + GEMM, and 2x2/stride-2 max pooling.  Weights
 * [out, in, k, k] as PyTorch's Conv2d.  What follows is the im2col path.
 *
 * One GEMM per image (M = out, N = oh*ow, K = in*k*k).  Each image is first
 * copied into a zero-bordered buffer, so that im2col and col2im are
 * branch-free copies and adds of whole output rows.  Several images per
 * GEMM (an image-chunked [in*k*k][B*oh*ow] im2col, the product then copied
 * to NCHW) measured slower on the Fashion-MNIST CNN: for conv2 one image's
 * im2col is 627 KiB, which stays in L2, while B = 2, 4, 8 took 4-12% more
 * CPU time per training run.  Backward recomputes im2col rather than keeping it: it
 * is in*k*k times the input (80 MiB for conv2 at batch 128), and re-reading
 * that from memory costs more than remaking it from the cached image.
 *
 * Threads take whole images (forward) or GROUP-image groups (backward; each
 * group sums its own weight- and bias-gradient part, and the parts are added
 * in group order at the end).  The groups depend only on the batch size, and
 * each image's products run whole on one thread, so the results are bitwise
 * the same for any thread count, except for a batch of one image (forward)
 * or one group (backward): that runs on the calling thread, where dt_sgemm
 * splits a large product itself (the same bits for a given thread count). */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dtrain/nn.h"
#include "nn/conv_dnnl.h"
#include "nn/init.h"
#include "nn/layer.h"
#include "nn/saved.h"
#include "tensor/threads.h"

/* Images per weight-gradient part: small enough that a batch of 16 still
 * gives two threads a group each, large enough that the parts (conv2's are
 * 200 KiB each) stay few. */
#define GROUP 8

typedef struct {
    dt_layer base;
    int64_t cin, cout, k, pad;
    int w, b;
    dt__conv_dnnl *dnnl; /* oneDNN's primitives by shape (conv_dnnl.c), made on first use */
} conv2d;

/* One call's shapes and buffers, shared by the threads. */
typedef struct {
    int64_t n, cin, cout, k, pad, h, w, oh, ow, hp, wp, ckk;
    const float *x, *wt, *bias, *dy;
    float *y, *dx;
    float *dw_part, *db_part; /* backward: [groups][cout*ckk], [groups][cout] */
    atomic_int failed;
} conv_job;

/* A running chunk's scratch. */
typedef struct {
    float *xp;    /* the padded image [cin][hp][wp] (the border stays zero) */
    float *cols;  /* [ckk][oh*ow] */
    float *dcols; /* [ckk][oh*ow] (backward with dx) */
    float *dxp;   /* the padded input gradient [cin][hp][wp] */
    void *mem;
} conv_scratch;

static int scratch_init(conv_scratch *s, const conv_job *j, bool backward)
{
    size_t pad = (size_t)(j->cin * j->hp * j->wp), cols = (size_t)(j->ckk * j->oh * j->ow);
    bool dx = backward && j->dx;
    s->mem = calloc((dx ? 2 * (pad + cols) : pad + cols) + 16, sizeof(float));
    if (!s->mem)
        return -1;
    s->xp = (float *)(((uintptr_t)s->mem + 63) & ~(uintptr_t)63);
    s->cols = s->xp + pad;
    s->dcols = dx ? s->cols + cols : NULL;
    s->dxp = dx ? s->dcols + cols : NULL;
    return 0;
}

/* The short row copies and adds of im2col and col2im (restrict on the
 * parameters spares the vector loops a run-time overlap check). */
static inline void copy_row(float *restrict d, const float *restrict s, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        d[i] = s[i];
}

static inline void add_row(float *restrict d, const float *restrict s, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        d[i] += s[i];
}

/* Image n into the padded buffer's interior. */
static void pad_image(const conv_job *j, int64_t n, float *xp)
{
    const float *src = j->x + n * j->cin * j->h * j->w;
    for (int64_t c = 0; c < j->cin; c++)
        for (int64_t y = 0; y < j->h; y++)
            copy_row(xp + (c * j->hp + y + j->pad) * j->wp + j->pad, src + (c * j->h + y) * j->w, j->w);
}

/* cols[(c*k + ky)*k + kx][oy*ow + ox] = xp[c][oy + ky][ox + kx] */
static void im2col(const conv_job *j, const float *xp, float *cols)
{
    int64_t ow = j->ow, ohw = j->oh * ow;
    for (int64_t c = 0; c < j->cin; c++)
        for (int64_t ky = 0; ky < j->k; ky++)
            for (int64_t kx = 0; kx < j->k; kx++) {
                float *row = cols + ((c * j->k + ky) * j->k + kx) * ohw;
                const float *src = xp + (c * j->hp + ky) * j->wp + kx;
                for (int64_t oy = 0; oy < j->oh; oy++)
                    copy_row(row + oy * ow, src + oy * j->wp, ow);
            }
}

/* The transpose of im2col: adds each column entry to its padded input
 * position (in im2col's row order, so every input element sums in a fixed
 * order), then copies the interior out to image n of dx. */
static void col2im(const conv_job *j, int64_t n, const float *dcols, float *dxp)
{
    int64_t ow = j->ow, ohw = j->oh * ow;
    memset(dxp, 0, (size_t)(j->cin * j->hp * j->wp) * sizeof(float));
    for (int64_t c = 0; c < j->cin; c++)
        for (int64_t ky = 0; ky < j->k; ky++)
            for (int64_t kx = 0; kx < j->k; kx++) {
                const float *row = dcols + ((c * j->k + ky) * j->k + kx) * ohw;
                float *dst = dxp + (c * j->hp + ky) * j->wp + kx;
                for (int64_t oy = 0; oy < j->oh; oy++)
                    add_row(dst + oy * j->wp, row + oy * ow, ow);
            }
    float *dx = j->dx + n * j->cin * j->h * j->w;
    for (int64_t c = 0; c < j->cin; c++)
        for (int64_t y = 0; y < j->h; y++)
            copy_row(dx + (c * j->h + y) * j->w, dxp + (c * j->hp + y + j->pad) * j->wp + j->pad, j->w);
}

static void forward_range(int64_t begin, int64_t end, void *arg)
{
    conv_job *j = arg;
    conv_scratch s;
    if (scratch_init(&s, j, false) != 0) {
        atomic_store(&j->failed, 1);
        return;
    }
    int64_t ohw = j->oh * j->ow;
    for (int64_t n = begin; n < end; n++) {
        float *out = j->y + n * j->cout * ohw;
        pad_image(j, n, s.xp);
        im2col(j, s.xp, s.cols);
        dt_sgemm(0, 0, j->cout, ohw, j->ckk, 1.0f, j->wt, s.cols, 0.0f, out);
        for (int64_t o = 0; o < j->cout; o++) {
            float *restrict row = out + o * ohw, bias = j->bias[o];
            for (int64_t i = 0; i < ohw; i++)
                row[i] += bias;
        }
    }
    free(s.mem);
}

static dt_status conv_forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    DT_CHECK(dt__cpu_only(ctx, l));
    conv2d *L = (conv2d *)l;
    if (x->ndim != 4 || x->shape[1] != L->cin)
        return dt__fail(DT_ERR_INVALID, "%s: expects [batch, %lld, height, width]", l->name, (long long)L->cin);
    int64_t N = x->shape[0], H = x->shape[2], W = x->shape[3];
    int64_t OH = H + 2 * L->pad - L->k + 1, OW = W + 2 * L->pad - L->k + 1;
    if (OH <= 0 || OW <= 0)
        return dt__fail(DT_ERR_INVALID, "%s: %lldx%lld input is smaller than the kernel", l->name, (long long)H, (long long)W);
    dt_tensor *saved = DT_SAVE(ctx, l, dt_tensor);
    if (!saved)
        return DT_ERR_NOMEM;
    *saved = *x;
    *y = dt_tensor_view(NULL, 4, (int64_t[]){N, L->cout, OH, OW});
    y->data = dt_arena_alloc(ctx->arena, N * L->cout * OH * OW);
    if (!y->data)
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    if (dt__conv_dnnl_enabled()) {
        dt__conv_shape cs = {N, L->cin, L->cout, L->k, L->pad, H, W, ctx->compute == DT_BF16};
        return dt__conv_dnnl_forward(&L->dnnl, l->name, &cs, ctx->arena, x->data, dt_param_value(ctx->params, L->w),
                                     dt_param_value(ctx->params, L->b), y->data);
    }
    conv_job j = {.n = N, .cin = L->cin, .cout = L->cout, .k = L->k, .pad = L->pad, .h = H, .w = W, .oh = OH,
                  .ow = OW, .hp = H + 2 * L->pad, .wp = W + 2 * L->pad, .ckk = L->cin * L->k * L->k, .x = x->data,
                  .wt = dt_param_value(ctx->params, L->w), .bias = dt_param_value(ctx->params, L->b), .y = y->data};
    atomic_init(&j.failed, 0);
    dt__parallel_for(N, 1, forward_range, &j);
    if (atomic_load(&j.failed))
        return dt__fail(DT_ERR_NOMEM, "%s: out of memory for im2col", l->name);
    return DT_OK;
}

/* Sum of n floats in 16 lanes (which vectorise without reassociation), the
 * lanes then added in order. */
static float sum_f32(const float *x, int64_t n)
{
    float lane[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++)
            lane[l] += x[i + l];
    for (int l = 0; i < n; i++, l++)
        lane[l] += x[i];
    float s = 0;
    for (int l = 0; l < 16; l++)
        s += lane[l];
    return s;
}

static void backward_range(int64_t begin, int64_t end, void *arg)
{
    conv_job *j = arg;
    conv_scratch s;
    if (scratch_init(&s, j, true) != 0) {
        atomic_store(&j->failed, 1);
        return;
    }
    int64_t ohw = j->oh * j->ow;
    for (int64_t g = begin; g < end; g++) {
        float *dw = j->dw_part + g * j->cout * j->ckk, *db = j->db_part + g * j->cout;
        int64_t n1 = (g + 1) * GROUP < j->n ? (g + 1) * GROUP : j->n;
        for (int64_t n = g * GROUP; n < n1; n++) {
            const float *dy = j->dy + n * j->cout * ohw;
            for (int64_t o = 0; o < j->cout; o++)
                db[o] += sum_f32(dy + o * ohw, ohw);
            pad_image(j, n, s.xp);
            im2col(j, s.xp, s.cols);
            dt_sgemm(0, 1, j->cout, j->ckk, ohw, 1.0f, dy, s.cols, n == g * GROUP ? 0.0f : 1.0f, dw);
            if (j->dx) {
                dt_sgemm(1, 0, j->ckk, ohw, j->cout, 1.0f, j->wt, dy, 0.0f, s.dcols);
                col2im(j, n, s.dcols, s.dxp);
            }
        }
    }
    free(s.mem);
}

typedef struct {
    float *sum;
    const float *part;
    int64_t len, parts;
} part_sum;

/* sum[i] += part[0][i] + part[1][i] + ... in part order (a block of
 * elements at a time, so the adds run along rows and vectorise). */
static void part_sum_range(int64_t begin, int64_t end, void *arg)
{
    part_sum *a = arg;
    float acc[256];
    for (int64_t i0 = begin; i0 < end; i0 += 256) {
        int64_t n = end - i0 < 256 ? end - i0 : 256;
        copy_row(acc, a->part + i0, n);
        for (int64_t p = 1; p < a->parts; p++)
            add_row(acc, a->part + p * a->len + i0, n);
        add_row(a->sum + i0, acc, n);
    }
}

static dt_status conv_backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    conv2d *L = (conv2d *)l;
    const dt_tensor *x = DT_LOAD(ctx, l, dt_tensor);
    if (!x)
        return DT_ERR_INVALID;
    int64_t N = x->shape[0], H = x->shape[2], W = x->shape[3], groups = (N + GROUP - 1) / GROUP;
    if (dt__conv_dnnl_enabled())
        groups = 1; /* one part: oneDNN's weight and bias gradients of the whole batch */
    conv_job j = {.n = N, .cin = L->cin, .cout = L->cout, .k = L->k, .pad = L->pad, .h = H, .w = W,
                  .oh = dy->shape[2], .ow = dy->shape[3], .hp = H + 2 * L->pad, .wp = W + 2 * L->pad,
                  .ckk = L->cin * L->k * L->k, .x = x->data, .wt = dt_param_value(ctx->params, L->w), .dy = dy->data};
    atomic_init(&j.failed, 0);
    j.dw_part = dt_arena_alloc(ctx->arena, groups * j.cout * j.ckk);
    j.db_part = dt_arena_calloc(ctx->arena, groups * j.cout);
    if (!j.dw_part || !j.db_part)
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    if (need_dx) {
        *dx = *x;
        if (!(dx->data = j.dx = dt_arena_alloc(ctx->arena, N * L->cin * H * W)))
            return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    }
    if (dt__conv_dnnl_enabled()) {
        dt__conv_shape cs = {N, L->cin, L->cout, L->k, L->pad, H, W, ctx->compute == DT_BF16};
        dt_status s = dt__conv_dnnl_backward(&L->dnnl, l->name, &cs, ctx->arena, j.x, j.wt, j.dy, j.dx, j.dw_part, j.db_part);
        if (s != DT_OK)
            return s;
    } else {
        dt__parallel_for(groups, 1, backward_range, &j);
        if (atomic_load(&j.failed))
            return dt__fail(DT_ERR_NOMEM, "%s: out of memory for im2col", l->name);
    }
    part_sum w = {dt_param_grad(ctx->params, L->w), j.dw_part, j.cout * j.ckk, groups};
    dt__parallel_for(w.len, 4096, part_sum_range, &w);
    part_sum b = {dt_param_grad(ctx->params, L->b), j.db_part, j.cout, groups};
    part_sum_range(0, b.len, &b);
    dt_params_grad_ready(ctx->params, L->w);
    dt_params_grad_ready(ctx->params, L->b);
    return DT_OK;
}

/* PyTorch's Conv2d default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in*k*k. */
static void conv_init(dt_layer *l, dt_params *p, uint64_t seed)
{
    conv2d *L = (conv2d *)l;
    float bound = 1.0f / sqrtf((float)(L->cin * L->k * L->k));
    dt__init_uniform(p, L->w, seed, bound);
    dt__init_uniform(p, L->b, seed, bound);
}

static void free_layer(dt_layer *l) { free(l); }

static void conv_free(dt_layer *l)
{
    dt__conv_dnnl_free(((conv2d *)l)->dnnl);
    free(l);
}

static const dt_layer_ops conv_ops = {"conv2d", conv_forward, conv_backward, conv_init, conv_free};

dt_status dt_conv2d_create(dt_params *p, const char *name, int64_t in, int64_t out, int64_t k, int64_t pad, dt_layer **l)
{
    if (in <= 0 || out <= 0 || k <= 0 || pad < 0 || pad >= k)
        return dt__fail(DT_ERR_INVALID, "conv2d %s: in %lld, out %lld, kernel %lld, padding %lld", name, (long long)in,
                        (long long)out, (long long)k, (long long)pad);
    conv2d *L = dt__layer_new(sizeof *L, &conv_ops, "%s", name);
    if (!L)
        return DT_ERR_NOMEM;
    L->cin = in;
    L->cout = out;
    L->k = k;
    L->pad = pad;
    dt_status s = dt__layer_param(p, &L->base, "weight", 4, (int64_t[]){out, in, k, k}, &L->w);
    if (s == DT_OK)
        s = dt__layer_param(p, &L->base, "bias", 1, &out, &L->b);
    if (s != DT_OK) {
        free(L);
        return s;
    }
    *l = &L->base;
    return DT_OK;
}

const char *dt_conv2d_backend(void) { return dt__conv_dnnl_enabled() ? "oneDNN" : "im2col"; }

/* ---- 2x2 max pooling, stride 2 ---- */
/* Each output keeps which of its window's four inputs was the largest (the
 * first of equals, in the order top-left, top-right, bottom-left,
 * bottom-right) as one byte; both passes are select-only loops over output
 * rows, which vectorise, and backward writes every input gradient once
 * (an odd last row or column, outside every window, gets zero). */
typedef struct {
    dt_tensor x;
    uint8_t *arg;
} pool_saved;

typedef struct {
    const float *x, *dy;
    float *y, *dx;
    uint8_t *arg;
    int64_t h, w, oh, ow;
} pool_job;

static void pool_fwd_range(int64_t begin, int64_t end, void *p)
{
    pool_job *j = p;
    int64_t ow = j->ow; /* a local: the byte stores below may alias anything */
    for (int64_t c = begin; c < end; c++)
        for (int64_t oy = 0; oy < j->oh; oy++) {
            const float *restrict r0 = j->x + (c * j->h + 2 * oy) * j->w, *restrict r1 = r0 + j->w;
            float *restrict y = j->y + (c * j->oh + oy) * j->ow;
            uint8_t *restrict arg = j->arg + (c * j->oh + oy) * j->ow;
            for (int64_t ox = 0; ox < ow; ox++) {
                float v0 = r0[2 * ox], v1 = r0[2 * ox + 1], v2 = r1[2 * ox], v3 = r1[2 * ox + 1];
                int b1 = v1 > v0;
                float m = b1 ? v1 : v0;
                int b2 = v2 > m;
                m = b2 ? v2 : m;
                int b3 = v3 > m;
                m = b3 ? v3 : m;
                int a = b1 + b2 * (2 - b1); /* arithmetic, not nested selects: this vectorises */
                a += b3 * (3 - a);
                y[ox] = m;
                arg[ox] = (uint8_t)a;
            }
        }
}

static void pool_bwd_range(int64_t begin, int64_t end, void *p)
{
    pool_job *j = p;
    for (int64_t c = begin; c < end; c++) {
        for (int64_t oy = 0; oy < j->oh; oy++) {
            float *restrict r0 = j->dx + (c * j->h + 2 * oy) * j->w, *restrict r1 = r0 + j->w;
            const float *restrict g = j->dy + (c * j->oh + oy) * j->ow;
            const uint8_t *restrict arg = j->arg + (c * j->oh + oy) * j->ow;
            for (int64_t ox = 0; ox < j->ow; ox++) { /* all loads before the stores: this form vectorises */
                float v = g[ox];
                int a = arg[ox];
                float v0 = a == 0 ? v : 0.0f, v1 = a == 1 ? v : 0.0f, v2 = a == 2 ? v : 0.0f, v3 = a == 3 ? v : 0.0f;
                r0[2 * ox] = v0;
                r0[2 * ox + 1] = v1;
                r1[2 * ox] = v2;
                r1[2 * ox + 1] = v3;
            }
            if (j->w & 1)
                r0[j->w - 1] = r1[j->w - 1] = 0.0f;
        }
        if (j->h & 1)
            memset(j->dx + (c * j->h + j->h - 1) * j->w, 0, (size_t)j->w * sizeof(float));
    }
}

static dt_status pool_forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    DT_CHECK(dt__cpu_only(ctx, l));
    if (x->ndim != 4 || x->shape[2] < 2 || x->shape[3] < 2)
        return dt__fail(DT_ERR_INVALID, "%s: expects [batch, channels, height >= 2, width >= 2]", l->name);
    int64_t NC = x->shape[0] * x->shape[1], H = x->shape[2], W = x->shape[3], OH = H / 2, OW = W / 2;
    pool_saved *P = DT_SAVE(ctx, l, pool_saved);
    if (!P)
        return DT_ERR_NOMEM;
    P->x = *x;
    *y = dt_tensor_view(NULL, 4, (int64_t[]){x->shape[0], x->shape[1], OH, OW});
    y->data = dt_arena_alloc(ctx->arena, NC * OH * OW);
    P->arg = (uint8_t *)dt_arena_alloc(ctx->arena, (NC * OH * OW + 3) / 4);
    if (!y->data || !P->arg)
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    pool_job j = {.x = x->data, .y = y->data, .arg = P->arg, .h = H, .w = W, .oh = OH, .ow = OW};
    dt__parallel_for(NC, (16384 + H * W - 1) / (H * W), pool_fwd_range, &j);
    return DT_OK;
}

static dt_status pool_backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    const pool_saved *P = DT_LOAD(ctx, l, pool_saved);
    if (!P)
        return DT_ERR_INVALID;
    if (!need_dx)
        return DT_OK;
    *dx = P->x;
    if (!(dx->data = dt_arena_alloc(ctx->arena, dt_tensor_numel(&P->x))))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    int64_t H = P->x.shape[2], W = P->x.shape[3];
    pool_job j = {.dy = dy->data, .dx = dx->data, .arg = P->arg, .h = H, .w = W, .oh = H / 2, .ow = W / 2};
    dt__parallel_for(P->x.shape[0] * P->x.shape[1], (16384 + H * W - 1) / (H * W), pool_bwd_range, &j);
    return DT_OK;
}

static void no_init(dt_layer *l, dt_params *p, uint64_t seed)
{
    (void)l, (void)p, (void)seed;
}

static const dt_layer_ops pool_ops = {"maxpool2d", pool_forward, pool_backward, no_init, free_layer};

dt_status dt_maxpool2d_create(const char *name, dt_layer **l)
{
    dt_layer *P = dt__layer_new(sizeof *P, &pool_ops, "%s", name);
    if (!P)
        return DT_ERR_NOMEM;
    *l = P;
    return DT_OK;
}

/* ---- reshape: same data, a new per-sample shape (the batch dimension stays) ---- */
typedef struct {
    dt_layer base;
    int ndim;
    int64_t shape[DT_MAX_DIMS];
} reshape;

static dt_status reshape_forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    reshape *R = (reshape *)l;
    int64_t per = 1;
    for (int i = 0; i < R->ndim; i++)
        per *= R->shape[i];
    if (dt_tensor_numel(x) != x->shape[0] * per)
        return dt__fail(DT_ERR_INVALID, "%s: %lld values per sample cannot be reshaped to %lld", l->name,
                        (long long)(dt_tensor_numel(x) / x->shape[0]), (long long)per);
    dt_tensor *saved = DT_SAVE(ctx, l, dt_tensor);
    if (!saved)
        return DT_ERR_NOMEM;
    *saved = *x;
    *y = *x;
    y->ndim = R->ndim + 1;
    for (int i = 0; i < R->ndim; i++)
        y->shape[i + 1] = R->shape[i];
    return DT_OK;
}

static dt_status reshape_backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    const dt_tensor *x = DT_LOAD(ctx, l, dt_tensor);
    if (!x)
        return DT_ERR_INVALID;
    if (need_dx) {
        *dx = *x;
        dx->data = dy->data;
    }
    return DT_OK;
}

static const dt_layer_ops reshape_ops = {"reshape", reshape_forward, reshape_backward, no_init, free_layer};

dt_status dt_reshape_create(const char *name, int ndim, const int64_t *shape, dt_layer **l)
{
    if (ndim < 1 || ndim >= DT_MAX_DIMS)
        return dt__fail(DT_ERR_INVALID, "reshape %s: %d dimensions per sample", name, ndim);
    reshape *R = dt__layer_new(sizeof *R, &reshape_ops, "%s", name);
    if (!R)
        return DT_ERR_NOMEM;
    R->ndim = ndim;
    memcpy(R->shape, shape, (size_t)ndim * sizeof *shape);
    *l = &R->base;
    return DT_OK;
}
