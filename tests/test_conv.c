/* conv2d and 2x2 max pooling against naive loops (in double) on odd shapes:
 * forward output, input gradient, weight and bias gradients, for 1, 2 and 3
 * compute threads, through both kernels (DT_CONV=im2col and, where the
 * build has it, oneDNN).  Each run takes two forward/backward passes, whose
 * weight gradients must add up (oneDNN's overwrite; conv.c adds).
 * im2col's results are the same bits at every thread count; oneDNN
 * promises that only for a given count (its weight-gradient reductions
 * split by thread), so there a second run at the same count must give the
 * same bits.  Batches of 3 and 21 images cover a partial block and several
 * weight-gradient groups. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtrain/dtrain.h"

typedef struct {
    int64_t n, cin, cout, k, pad, h, w;
} conv_shape;

/* Naive conv2d forward and backward; y, dx, dw, db are overwritten. */
static void conv_reference(const conv_shape *s, const float *x, const float *wt, const float *bias, const float *dy,
                           double *y, double *dx, double *dw, double *db)
{
    int64_t oh = s->h + 2 * s->pad - s->k + 1, ow = s->w + 2 * s->pad - s->k + 1;
    memset(dx, 0, sizeof(double) * (size_t)(s->n * s->cin * s->h * s->w));
    memset(dw, 0, sizeof(double) * (size_t)(s->cout * s->cin * s->k * s->k));
    memset(db, 0, sizeof(double) * (size_t)s->cout);
    for (int64_t n = 0; n < s->n; n++)
        for (int64_t o = 0; o < s->cout; o++)
            for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < ow; ox++) {
                    int64_t yi = ((n * s->cout + o) * oh + oy) * ow + ox;
                    double acc = bias[o];
                    db[o] += dy[yi];
                    for (int64_t c = 0; c < s->cin; c++)
                        for (int64_t ky = 0; ky < s->k; ky++)
                            for (int64_t kx = 0; kx < s->k; kx++) {
                                int64_t iy = oy + ky - s->pad, ix = ox + kx - s->pad;
                                if (iy < 0 || iy >= s->h || ix < 0 || ix >= s->w)
                                    continue;
                                int64_t xi = ((n * s->cin + c) * s->h + iy) * s->w + ix;
                                int64_t wi = ((o * s->cin + c) * s->k + ky) * s->k + kx;
                                acc += (double)wt[wi] * x[xi];
                                dx[xi] += (double)wt[wi] * dy[yi];
                                dw[wi] += (double)x[xi] * dy[yi];
                            }
                    y[yi] = acc;
                }
}

/* got within tol of want, relative to the largest |want| (sums of many terms). */
static int close_to(const char *what, const float *got, const double *want, int64_t n, double tol)
{
    double scale = 1e-30;
    for (int64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= tol * scale) && bad++ < 3)
            fprintf(stderr, "%s[%lld]: %.9g, reference %.9g\n", what, (long long)i, got[i], want[i]);
    return bad == 0;
}

typedef struct {
    float *y, *dx, *dw, *db;
} conv_result;

static void conv_run(const conv_shape *s, int threads, dt_dtype compute, const float *x, const float *dy,
                     conv_result *r, const float **wt, const float **bias)
{
    dt_params *p;
    dt_layer *l;
    dt_arena *arena;
    dt_params_create(&p);
    EXPECT_STATUS(dt_conv2d_create(p, "conv", s->cin, s->cout, s->k, s->pad, &l), DT_OK);
    EXPECT_STATUS(dt_params_finalize(p), DT_OK);
    l->ops->init(l, p, 3);
    dt_params_zero_grads(p);
    dt_arena_create(&arena);
    dt_set_threads(threads);
    dt_ctx ctx = {.arena = arena, .params = p, .training = true, .compute = compute};
    dt_tensor xt = dt_tensor_view((float *)x, 4, (int64_t[]){s->n, s->cin, s->h, s->w}), y, dyt, dx;
    for (int pass = 0; pass < 2; pass++) { /* the gradients accumulate */
        dt_arena_reset(arena);
        EXPECT_STATUS(l->ops->forward(l, &ctx, &xt, &y), DT_OK);
        dyt = y;
        dyt.data = (float *)dy;
        EXPECT_STATUS(l->ops->backward(l, &ctx, &dyt, &dx, true), DT_OK);
    }
    int64_t ny = dt_tensor_numel(&y), nx = dt_tensor_numel(&xt), nw = s->cout * s->cin * s->k * s->k;
    int wi = dt_params_find(p, "conv.weight"), bi = dt_params_find(p, "conv.bias");
    r->y = malloc(sizeof(float) * (size_t)ny);
    r->dx = malloc(sizeof(float) * (size_t)nx);
    r->dw = malloc(sizeof(float) * (size_t)nw);
    r->db = malloc(sizeof(float) * (size_t)s->cout);
    memcpy(r->y, y.data, sizeof(float) * (size_t)ny);
    memcpy(r->dx, dx.data, sizeof(float) * (size_t)nx);
    memcpy(r->dw, dt_param_grad(p, wi), sizeof(float) * (size_t)nw);
    memcpy(r->db, dt_param_grad(p, bi), sizeof(float) * (size_t)s->cout);
    /* the same seed gives the same weights every run: keep a copy for the reference */
    float *w_copy = malloc(sizeof(float) * (size_t)nw), *b_copy = malloc(sizeof(float) * (size_t)s->cout);
    memcpy(w_copy, dt_param_value(p, wi), sizeof(float) * (size_t)nw);
    memcpy(b_copy, dt_param_value(p, bi), sizeof(float) * (size_t)s->cout);
    *wt = w_copy;
    *bias = b_copy;
    dt_arena_destroy(arena);
    dt_layer_destroy(l);
    dt_params_destroy(p);
}

static void conv_result_free(conv_result *r)
{
    free(r->y);
    free(r->dx);
    free(r->dw);
    free(r->db);
}

static void test_conv_shape(conv_shape s)
{
    int64_t oh = s.h + 2 * s.pad - s.k + 1, ow = s.w + 2 * s.pad - s.k + 1;
    int64_t nx = s.n * s.cin * s.h * s.w, ny = s.n * s.cout * oh * ow, nw = s.cout * s.cin * s.k * s.k;
    float *x = malloc(sizeof(float) * (size_t)nx), *dy = malloc(sizeof(float) * (size_t)ny);
    dt_rng rng;
    dt_rng_seed(&rng, 17);
    for (int64_t i = 0; i < nx; i++)
        x[i] = dt_rng_normal(&rng);
    for (int64_t i = 0; i < ny; i++)
        dy[i] = dt_rng_normal(&rng);
    double *y = malloc(sizeof(double) * (size_t)ny), *dx = malloc(sizeof(double) * (size_t)nx);
    double *dw = malloc(sizeof(double) * (size_t)nw), *db = malloc(sizeof(double) * (size_t)s.cout);
    for (int path = 0; path < 2; path++) {
        const char *kernel = path == 0 ? "im2col" : dt_conv2d_backend();
        if (path == 1 && !strcmp(kernel, "im2col"))
            break; /* a build without oneDNN */
        conv_result first = {0};
        for (int threads = 1; threads <= 3; threads++) {
            conv_result r;
            const float *wt, *bias;
            if (path == 0)
                setenv("DT_CONV", "im2col", 1);
            conv_run(&s, threads, DT_F32, x, dy, &r, &wt, &bias);
            unsetenv("DT_CONV");
            if (path == 0 && threads == 1) {
                conv_reference(&s, x, wt, bias, dy, y, dx, dw, db);
                for (int64_t i = 0; i < nw; i++)
                    dw[i] *= 2; /* two passes */
                for (int64_t i = 0; i < s.cout; i++)
                    db[i] *= 2;
            }
            char what[128];
            snprintf(what, sizeof what, "conv n%lld c%lld->%lld k%lld pad%lld %lldx%lld, %s, %d threads",
                     (long long)s.n, (long long)s.cin, (long long)s.cout, (long long)s.k, (long long)s.pad,
                     (long long)s.h, (long long)s.w, kernel, threads);
            fprintf(stderr, "%s\n", what);
            EXPECT(close_to("y", r.y, y, ny, 1e-5));
            EXPECT(close_to("dx", r.dx, dx, nx, 1e-5));
            EXPECT(close_to("dweight", r.dw, dw, nw, 1e-5));
            EXPECT(close_to("dbias", r.db, db, s.cout, 1e-5));
            conv_result same = r; /* what must be the same bits */
            if (path == 1) {      /* oneDNN: again at this thread count */
                const float *wt2, *bias2;
                conv_run(&s, threads, DT_F32, x, dy, &same, &wt2, &bias2);
                free((void *)wt2);
                free((void *)bias2);
            } else if (threads == 1) {
                first = r;
            } else {
                same = first;
            }
            if (same.y != r.y) {
                EXPECT_EQ(memcmp(r.y, same.y, sizeof(float) * (size_t)ny), 0);
                EXPECT_EQ(memcmp(r.dx, same.dx, sizeof(float) * (size_t)nx), 0);
                EXPECT_EQ(memcmp(r.dw, same.dw, sizeof(float) * (size_t)nw), 0);
                EXPECT_EQ(memcmp(r.db, same.db, sizeof(float) * (size_t)s.cout), 0);
                conv_result_free(path == 1 ? &same : &r);
            }
            if (path == 1)
                conv_result_free(&r);
            free((void *)wt);
            free((void *)bias);
        }
        if (path == 0)
            conv_result_free(&first);
    }
    /* Mixed precision (oneDNN: bf16 inputs and weights, f32 sums; im2col
     * stays f32): within bf16's rounding of the operands. */
    if (strcmp(dt_conv2d_backend(), "oneDNN") == 0) {
        conv_result r;
        const float *wt, *bias;
        conv_run(&s, 2, DT_BF16, x, dy, &r, &wt, &bias);
        EXPECT(close_to("y (bf16)", r.y, y, ny, 3e-2));
        EXPECT(close_to("dx (bf16)", r.dx, dx, nx, 3e-2));
        EXPECT(close_to("dweight (bf16)", r.dw, dw, nw, 3e-2));
        EXPECT(close_to("dbias (bf16)", r.db, db, s.cout, 3e-2)); /* from bf16 dy */
        conv_result_free(&r);
        free((void *)wt);
        free((void *)bias);
    }
    free(x);
    free(dy);
    free(y);
    free(dx);
    free(dw);
    free(db);
}

/* Max pooling on an odd-sized input with ties: the first maximum of each
 * window takes the gradient; the odd last row and column get none. */
static void test_pool(void)
{
    enum { N = 3, C = 4, H = 7, W = 9, OH = H / 2, OW = W / 2 };
    static float x[N * C * H * W], dy[N * C * OH * OW], want_y[N * C * OH * OW], want_dx[N * C * H * W];
    dt_rng rng;
    dt_rng_seed(&rng, 5);
    for (int i = 0; i < N * C * H * W; i++)
        x[i] = (float)(dt_rng_next(&rng) % 5) - 2.0f; /* few values: many ties */
    for (int i = 0; i < N * C * OH * OW; i++)
        dy[i] = dt_rng_normal(&rng);
    for (int c = 0; c < N * C; c++)
        for (int oy = 0; oy < OH; oy++)
            for (int ox = 0; ox < OW; ox++) {
                int best = -1;
                for (int d = 0; d < 4; d++) {
                    int i = (c * H + 2 * oy + d / 2) * W + 2 * ox + d % 2;
                    if (best < 0 || x[i] > x[best])
                        best = i;
                }
                int o = (c * OH + oy) * OW + ox;
                want_y[o] = x[best];
                want_dx[best] += dy[o];
            }
    for (int threads = 1; threads <= 2; threads++) {
        dt_set_threads(threads);
        dt_layer *l;
        dt_params *p;
        dt_arena *arena;
        EXPECT_STATUS(dt_maxpool2d_create("pool", &l), DT_OK);
        dt_params_create(&p);
        dt_params_finalize(p);
        dt_arena_create(&arena);
        dt_ctx ctx = {.arena = arena, .params = p, .training = true};
        dt_tensor xt = dt_tensor_view(x, 4, (int64_t[]){N, C, H, W}), y, dyt, dx;
        EXPECT_STATUS(l->ops->forward(l, &ctx, &xt, &y), DT_OK);
        EXPECT(y.shape[2] == OH && y.shape[3] == OW);
        EXPECT_EQ(memcmp(y.data, want_y, sizeof want_y), 0);
        dyt = y;
        dyt.data = dy;
        EXPECT_STATUS(l->ops->backward(l, &ctx, &dyt, &dx, true), DT_OK);
        EXPECT_EQ(memcmp(dx.data, want_dx, sizeof want_dx), 0);
        dt_arena_destroy(arena);
        dt_params_destroy(p);
        dt_layer_destroy(l);
    }
}

int main(void)
{
    test_conv_shape((conv_shape){.n = 3, .cin = 3, .cout = 5, .k = 3, .pad = 1, .h = 7, .w = 9});
    test_conv_shape((conv_shape){.n = 3, .cin = 3, .cout = 5, .k = 5, .pad = 2, .h = 7, .w = 9});
    test_conv_shape((conv_shape){.n = 3, .cin = 3, .cout = 5, .k = 3, .pad = 0, .h = 7, .w = 9});
    test_conv_shape((conv_shape){.n = 21, .cin = 2, .cout = 7, .k = 5, .pad = 1, .h = 9, .w = 6});
    test_conv_shape((conv_shape){.n = 5, .cin = 1, .cout = 4, .k = 5, .pad = 0, .h = 5, .w = 5}); /* a 1x1 output */
    test_pool();
    dt_set_threads(0);
    return CHECK_DONE("test_conv");
}
