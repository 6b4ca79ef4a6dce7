/* Unit tests of the training engine: every layer's backward against central
 * finite differences, gradient-ready order, optimizers and clipping against
 * values PyTorch 1.13 computed (golden numbers below), schedules, arena,
 * compute threads, idx loading and its error messages, the sampler, and a
 * short real Fashion-MNIST training run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "dtrain/dtrain.h"
#include "tensor/cpu_kernels.h"

#define EXPECT_NEAR(got, want, tol)                                                                     \
    do {                                                                                                \
        double g_ = (got), w_ = (want);                                                                 \
        check_count++;                                                                                  \
        if (!(fabs(g_ - w_) <= (tol) * fmax(1.0, fabs(w_)))) {                                          \
            check_failures++;                                                                           \
            fprintf(stderr, "%s:%d: %s is %.9g, expected %.9g\n", __FILE__, __LINE__, #got, g_, w_);    \
        }                                                                                               \
    } while (0)

/* ---- finite differences ---- */

typedef struct {
    dt_layer *layer;
    dt_params *params;
    dt_arena *arena;
    const float *r; /* loss = sum(y * r) */
    uint64_t dropout_seed;
} fd_case;

static double loss_of(fd_case *c, dt_tensor *x, dt_rng *rng)
{
    (void)rng;
    dt_arena_reset(c->arena);
    /* the same key, so the same dropout mask, every evaluation */
    dt_ctx ctx = {.arena = c->arena, .params = c->params, .key = {.seed = c->dropout_seed}, .training = true};
    dt_tensor y;
    if (c->layer->ops->forward(c->layer, &ctx, x, &y) != DT_OK)
        return NAN;
    double l = 0;
    for (int64_t i = 0; i < dt_tensor_numel(&y); i++)
        l += (double)y.data[i] * c->r[i];
    return l;
}

/* Check dL/dx (unless ids) and dL/dparams of one layer on input x. */
static void fd_check(const char *what, fd_case *c, dt_tensor *x, int64_t out_numel, int check_dx)
{
    dt_rng rng;
    float *r = malloc((size_t)out_numel * sizeof *r);
    dt_rng_seed(&rng, 99);
    for (int64_t i = 0; i < out_numel; i++)
        r[i] = dt_rng_normal(&rng);
    c->r = r;
    /* analytic */
    dt_params_zero_grads(c->params);
    dt_arena_reset(c->arena);
    dt_ctx ctx = {.arena = c->arena, .params = c->params, .key = {.seed = c->dropout_seed}, .training = true};
    dt_tensor y, dy, dx = {0};
    EXPECT_STATUS(c->layer->ops->forward(c->layer, &ctx, x, &y), DT_OK);
    EXPECT_EQ(dt_tensor_numel(&y), out_numel);
    dy = y;
    dy.data = r;
    EXPECT_STATUS(c->layer->ops->backward(c->layer, &ctx, &dy, &dx, check_dx), DT_OK);
    int64_t nx = dt_tensor_numel(x);
    float *dx_copy = malloc((size_t)nx * sizeof *dx_copy);
    if (check_dx)
        memcpy(dx_copy, dx.data, (size_t)nx * sizeof *dx_copy);
    const float eps = 1e-2f;
    int bad = 0;
    for (int64_t i = 0; check_dx && i < nx; i++) {
        float keep = x->data[i];
        x->data[i] = keep + eps;
        double lp = loss_of(c, x, &rng);
        x->data[i] = keep - eps;
        double lm = loss_of(c, x, &rng);
        x->data[i] = keep;
        double num = (lp - lm) / (2 * eps);
        if (fabs(num - dx_copy[i]) > 2e-2 * fmax(1.0, fabs(num))) {
            if (bad++ < 3)
                fprintf(stderr, "%s: dx[%lld] analytic %.6g numeric %.6g\n", what, (long long)i, dx_copy[i], num);
        }
    }
    float *values = dt_params_values(c->params), *grads = dt_params_grads(c->params);
    int64_t np = dt_params_numel(c->params);
    float *g_copy = malloc((size_t)(np ? np : 1) * sizeof *g_copy);
    memcpy(g_copy, grads, (size_t)np * sizeof *g_copy);
    for (int64_t i = 0; i < np; i++) {
        float keep = values[i];
        values[i] = keep + eps;
        double lp = loss_of(c, x, &rng);
        values[i] = keep - eps;
        double lm = loss_of(c, x, &rng);
        values[i] = keep;
        double num = (lp - lm) / (2 * eps);
        if (fabs(num - g_copy[i]) > 2e-2 * fmax(1.0, fabs(num))) {
            if (bad++ < 3)
                fprintf(stderr, "%s: dparam[%lld] analytic %.6g numeric %.6g\n", what, (long long)i, g_copy[i], num);
        }
    }
    check_count++;
    if (bad) {
        check_failures++;
        fprintf(stderr, "%s: %d gradients disagree with finite differences\n", what, bad);
    }
    free(r);
    free(dx_copy);
    free(g_copy);
}

static void fd_layer(const char *what, dt_params *p, dt_layer *l, int ndim, const int64_t *shape, int64_t out_numel,
                     int ids, int64_t vocab)
{
    EXPECT_STATUS(dt_params_finalize(p), DT_OK);
    dt_rng rng;
    dt_rng_seed(&rng, 5);
    l->ops->init(l, p, 5);
    /* perturb weights away from their initial symmetric values */
    for (int64_t i = 0; i < dt_params_numel(p); i++)
        dt_params_values(p)[i] += 0.1f * dt_rng_normal(&rng);
    dt_tensor x = dt_tensor_view(NULL, ndim, shape);
    int64_t n = dt_tensor_numel(&x);
    x.data = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        float v = dt_rng_normal(&rng);
        if (!ids && fabsf(v) < 0.05f) /* keep ReLU away from its kink */
            v = v < 0 ? -0.3f : 0.3f;
        x.data[i] = ids ? (float)(dt_rng_next(&rng) % (uint64_t)vocab) : v;
    }
    fd_case c = {.layer = l, .params = p, .dropout_seed = 7};
    dt_arena_create(&c.arena);
    fd_check(what, &c, &x, out_numel, !ids);
    dt_arena_destroy(c.arena);
    free(x.data);
    dt_layer_destroy(l);
    dt_params_destroy(p);
}

static void test_layers(void)
{
    dt_params *p;
    dt_layer *l;
    dt_params_create(&p);
    EXPECT_STATUS(dt_linear_create(p, "lin", 5, 3, true, &l), DT_OK);
    fd_layer("linear", p, l, 3, (int64_t[]){2, 2, 5}, 12, 0, 0);

    dt_params_create(&p);
    dt_relu_create("relu", &l);
    fd_layer("relu", p, l, 2, (int64_t[]){3, 4}, 12, 0, 0);

    dt_params_create(&p);
    dt_gelu_create("gelu", &l);
    fd_layer("gelu", p, l, 2, (int64_t[]){3, 4}, 12, 0, 0);

    dt_params_create(&p);
    EXPECT_STATUS(dt_layernorm_create(p, "ln", 6, 1e-5f, &l), DT_OK);
    fd_layer("layernorm", p, l, 2, (int64_t[]){3, 6}, 18, 0, 0);

    dt_params_create(&p);
    EXPECT_STATUS(dt_embedding_create(p, "emb", 7, 4, &l), DT_OK);
    fd_layer("embedding", p, l, 2, (int64_t[]){2, 3}, 24, 1, 7);

    dt_params_create(&p);
    EXPECT_STATUS(dt_attention_create(p, "attn", 8, 2, &l), DT_OK);
    fd_layer("attention", p, l, 3, (int64_t[]){2, 5, 8}, 80, 0, 0);

    dt_params_create(&p);
    EXPECT_STATUS(dt_conv2d_create(p, "conv", 2, 3, 3, 1, &l), DT_OK);
    fd_layer("conv2d", p, l, 4, (int64_t[]){2, 2, 5, 5}, 150, 0, 0);

    dt_params_create(&p);
    EXPECT_STATUS(dt_dropout_create("drop", 0.3f, &l), DT_OK);
    fd_layer("dropout", p, l, 2, (int64_t[]){4, 5}, 20, 0, 0);

    /* a GELU followed by a linear writes its input gradient over its output */
    dt_params_create(&p);
    EXPECT_STATUS(dt_sequential_create("mlp", &l), DT_OK);
    dt_layer *part;
    EXPECT_STATUS(dt_linear_create(p, "fc1", 4, 6, true, &part), DT_OK);
    EXPECT_STATUS(dt_sequential_append(l, part), DT_OK);
    EXPECT_STATUS(dt_gelu_create("gelu", &part), DT_OK);
    EXPECT_STATUS(dt_sequential_append(l, part), DT_OK);
    EXPECT_STATUS(dt_linear_create(p, "fc2", 6, 3, true, &part), DT_OK);
    EXPECT_STATUS(dt_sequential_append(l, part), DT_OK);
    fd_layer("linear-gelu-linear", p, l, 2, (int64_t[]){5, 4}, 15, 0, 0);

    /* bad arguments are refused with the layer named */
    dt_params_create(&p);
    EXPECT_STATUS(dt_linear_create(p, "bad", 0, 3, true, &l), DT_ERR_INVALID);
    EXPECT_STATUS(dt_dropout_create("bad", 1.0f, &l), DT_ERR_INVALID);
    EXPECT_STATUS(dt_linear_create(p, "dup", 2, 2, false, &l), DT_OK);
    dt_layer *l2;
    EXPECT_STATUS(dt_linear_create(p, "dup", 2, 2, false, &l2), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "dup.weight");
    dt_layer_destroy(l);
    dt_params_destroy(p);
}

/* Parameters of m whose gradient (already in the registry) disagrees with
 * central differences of the cross-entropy loss on (x, t): more than
 * rtol * max(floor, |numeric|) apart.  The first few are printed. */
static int model_fd_mismatches(const char *what, dt_model *m, dt_ctx *ctx, dt_arena *arena, const dt_tensor *x,
                               const int32_t *t, float eps, double rtol, double floor)
{
    dt_params *p = dt_model_params(m);
    float *vals = dt_params_values(p), *grads = dt_params_grads(p);
    int bad = 0;
    dt_tensor y;
    for (int64_t i = 0; i < dt_params_numel(p); i++) {
        float keep = vals[i], lp, lm;
        vals[i] = keep + eps;
        dt_arena_reset(arena);
        dt_model_forward(m, ctx, x, &y);
        dt_softmax_cross_entropy(&y, t, &lp, NULL);
        vals[i] = keep - eps;
        dt_arena_reset(arena);
        dt_model_forward(m, ctx, x, &y);
        dt_softmax_cross_entropy(&y, t, &lm, NULL);
        vals[i] = keep;
        double num = (lp - lm) / (2.0 * eps);
        if (fabs(num - grads[i]) > rtol * fmax(floor, fabs(num)) && bad++ < 5)
            fprintf(stderr, "%s: parameter element %lld analytic %.6g numeric %.6g\n", what, (long long)i, grads[i], num);
    }
    return bad;
}

/* Max pooling on well-separated values (a perturbation never changes the argmax). */
static void test_maxpool(void)
{
    dt_layer *l;
    EXPECT_STATUS(dt_maxpool2d_create("pool", &l), DT_OK);
    enum { N = 2 * 2 * 4 * 5 };
    float xs[N];
    for (int i = 0; i < N; i++)
        xs[i] = 0.1f * (float)((i * 37) % N) - 3.0f; /* a permutation: all distinct by 0.1 */
    dt_params *p;
    dt_params_create(&p);
    dt_params_finalize(p);
    dt_arena *a;
    dt_arena_create(&a);
    dt_ctx ctx = {.arena = a, .params = p};
    dt_tensor x = dt_tensor_view(xs, 4, (int64_t[]){2, 2, 4, 5}), y, dx;
    EXPECT_STATUS(l->ops->forward(l, &ctx, &x, &y), DT_OK);
    EXPECT(y.shape[2] == 2 && y.shape[3] == 2); /* the odd column is dropped */
    float g[16];
    for (int i = 0; i < 16; i++)
        g[i] = (float)(i + 1);
    dt_tensor dy = y;
    dy.data = g;
    EXPECT_STATUS(l->ops->backward(l, &ctx, &dy, &dx, true), DT_OK);
    int bad = 0;
    for (int i = 0; i < N; i++) { /* numeric d(sum g*y)/dx_i */
        float keep = xs[i], num;
        double lp = 0, lm = 0;
        xs[i] = keep + 1e-2f;
        l->ops->forward(l, &ctx, &x, &y);
        for (int k = 0; k < 16; k++)
            lp += g[k] * y.data[k];
        xs[i] = keep - 1e-2f;
        l->ops->forward(l, &ctx, &x, &y);
        for (int k = 0; k < 16; k++)
            lm += g[k] * y.data[k];
        xs[i] = keep;
        num = (float)((lp - lm) / 2e-2);
        bad += fabsf(num - dx.data[i]) > 1e-3f;
    }
    EXPECT_EQ(bad, 0);
    dt_arena_destroy(a);
    dt_params_destroy(p);
    dt_layer_destroy(l);
}

/* A whole tiny CNN against finite differences. */
static void test_cnn(void)
{
    dt_model *m;
    EXPECT_STATUS(dt_cnn_create(8, 2, 3, 4, &m), DT_OK);
    dt_model_init(m, 2);
    dt_params *p = dt_model_params(m);
    EXPECT_EQ(dt_params_numel(p), (2 * 25 + 2) + (3 * 2 * 25 + 3) + (12 * 4 + 4));
    EXPECT(dt_params_find(p, "conv2.weight") >= 0 && dt_params_find(p, "fc.bias") >= 0);
    dt_rng rng;
    dt_rng_seed(&rng, 12);
    float xs[2 * 64];
    for (int i = 0; i < 128; i++)
        xs[i] = dt_rng_normal(&rng);
    int32_t t[2] = {3, 1};
    dt_arena *arena;
    dt_arena_create(&arena);
    dt_ctx ctx = {.arena = arena, .training = true};
    dt_tensor x = dt_tensor_view(xs, 2, (int64_t[]){2, 64}), y;
    dt_params_zero_grads(p);
    EXPECT_STATUS(dt_model_forward(m, &ctx, &x, &y), DT_OK);
    EXPECT(y.ndim == 2 && y.shape[1] == 4);
    dt_tensor g = y;
    g.data = dt_arena_alloc(arena, dt_tensor_numel(&y));
    float loss;
    dt_softmax_cross_entropy(&y, t, &loss, &g);
    EXPECT_STATUS(dt_model_backward(m, &ctx, &g), DT_OK);
    EXPECT_EQ(model_fd_mismatches("cnn", m, &ctx, arena, &x, t, 1e-3f, 3e-2, 0.02), 0);
    EXPECT_STATUS(dt_cnn_create(2, 2, 3, 4, &m), DT_ERR_INVALID);
    dt_arena_destroy(arena);
    dt_model_destroy(m);
}

static void test_loss(void)
{
    float z[6] = {1.0f, 2.0f, 0.5f, -1.0f, 0.0f, 3.0f}, g[6];
    int32_t t[2] = {1, 2};
    dt_tensor logits = dt_tensor_view(z, 2, (int64_t[]){2, 3}), dz = dt_tensor_view(g, 2, (int64_t[]){2, 3});
    float loss;
    EXPECT_STATUS(dt_softmax_cross_entropy(&logits, t, &loss, &dz), DT_OK);
    /* log-sum-exp by hand */
    double l0 = log(exp(1.0) + exp(2.0) + exp(0.5)) - 2.0, l1 = log(exp(-1.0) + exp(0.0) + exp(3.0)) - 3.0;
    EXPECT_NEAR(loss, (l0 + l1) / 2, 1e-6);
    for (int i = 0; i < 6; i++) { /* finite differences of the loss itself */
        float keep = z[i], lp, lm;
        z[i] = keep + 1e-3f;
        dt_softmax_cross_entropy(&logits, t, &lp, NULL);
        z[i] = keep - 1e-3f;
        dt_softmax_cross_entropy(&logits, t, &lm, NULL);
        z[i] = keep;
        EXPECT_NEAR(g[i], (lp - lm) / 2e-3, 2e-3);
    }
    int32_t ignored[2] = {-1, 2};
    EXPECT_STATUS(dt_softmax_cross_entropy(&logits, ignored, &loss, &dz), DT_OK);
    EXPECT_NEAR(loss, l1, 1e-6);
    EXPECT(g[0] == 0 && g[1] == 0 && g[2] == 0);
    int32_t bad[2] = {3, 0};
    EXPECT_STATUS(dt_softmax_cross_entropy(&logits, bad, &loss, NULL), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "target 3");
}

static int ready_order[16], ready_count;
static void on_ready(int index, void *user)
{
    (void)user;
    if (ready_count < 16)
        ready_order[ready_count] = index;
    ready_count++;
}

/* A whole MLP + loss against finite differences, and the gradient-ready order. */
static void test_mlp(void)
{
    dt_model *m;
    EXPECT_STATUS(dt_mlp_create((int64_t[]){6, 5, 4, 3}, 4, &m), DT_OK);
    dt_model_init(m, 12); /* a seed whose ReLU inputs stay clear of the kink by more than eps */
    dt_params *p = dt_model_params(m);
    EXPECT_EQ(dt_params_count(p), 6);
    EXPECT(dt_params_find(p, "fc3.bias") == 5 && dt_params_find(p, "fc1.weight") == 0);
    EXPECT_EQ(dt_params_numel(p), 6 * 5 + 5 + 5 * 4 + 4 + 4 * 3 + 3);
    dt_arena *arena;
    dt_arena_create(&arena);
    float xs[2 * 6];
    dt_rng rng;
    dt_rng_seed(&rng, 3);
    for (int i = 0; i < 12; i++)
        xs[i] = dt_rng_normal(&rng);
    int32_t t[2] = {2, 0};
    dt_tensor x = dt_tensor_view(xs, 2, (int64_t[]){2, 6}), y;
    dt_ctx ctx = {.arena = arena, .training = true};
    dt_params_on_grad_ready(p, on_ready, NULL);
    dt_params_zero_grads(p);
    EXPECT_STATUS(dt_model_forward(m, &ctx, &x, &y), DT_OK);
    float loss;
    float *g = dt_arena_alloc(arena, dt_tensor_numel(&y));
    dt_tensor dy = y;
    dy.data = g;
    EXPECT_STATUS(dt_softmax_cross_entropy(&y, t, &loss, &dy), DT_OK);
    EXPECT_STATUS(dt_model_backward(m, &ctx, &dy), DT_OK);
    int want[6] = {4, 5, 2, 3, 0, 1}; /* backward order: fc3, fc2, fc1 (weight, then bias) */
    EXPECT_EQ(ready_count, 6);
    for (int i = 0; i < 6 && i < ready_count; i++)
        EXPECT_EQ(ready_order[i], want[i]);
    dt_params_on_grad_ready(p, NULL, NULL);
    EXPECT_EQ(model_fd_mismatches("mlp", m, &ctx, arena, &x, t, 1e-2f, 2e-2, 0.05), 0);
    /* a wrong input width is an error naming the layer */
    dt_tensor wrong = dt_tensor_view(xs, 2, (int64_t[]){3, 4});
    dt_arena_reset(arena);
    EXPECT_STATUS(dt_model_forward(m, &ctx, &wrong, &y), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "fc1");
    dt_arena_destroy(arena);
    dt_model_destroy(m);
}

/* Optimizer state offloaded to a file: the same bits as in memory, for
 * AdamW and SGD with momentum, over 3 windows (the last one short), updated
 * whole, in ranges out of order and in slices; the state read back for a
 * checkpoint, changed and written back on the next update; a range read
 * straight from the file (dt_optimizer_state_read) equals memory's. */
static void test_offload(void)
{
    const int64_t n = 2 * (1 << 20) + 12345;
    float *p[2], *g = malloc((size_t)n * sizeof *g);
    for (int k = 0; k < 2; k++)
        p[k] = malloc((size_t)n * sizeof *p[k]);
    for (int kind = 0; kind < 2; kind++) {
        dt_optimizer *o[2];
        for (int k = 0; k < 2; k++) {
            if (kind == 0)
                EXPECT_STATUS(dt_adamw_create(&(dt_adamw_config){0.9f, 0.99f, 1e-8f, 0.01f}, n, &o[k]), DT_OK);
            else
                EXPECT_STATUS(dt_sgd_create(&(dt_sgd_config){0.9f, 0.001f, true}, n, &o[k]), DT_OK);
            for (int64_t i = 0; i < n; i++)
                p[k][i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
        }
        EXPECT_STATUS(dt_optimizer_offload(o[1], "/tmp"), DT_OK);
        for (int step = 0; step < 4; step++) {
            for (int64_t i = 0; i < n; i++)
                g[i] = (float)(((i + 13 * step) * 53) % 97) / 97.0f - 0.5f;
            for (int k = 0; k < 2; k++) {
                if (step == 0)
                    EXPECT_STATUS(dt_optimizer_step(o[k], p[k], g, n, 0.01f), DT_OK);
                else if (step == 1) { /* ranges backwards, as data parallelism's buckets land */
                    int64_t cut[] = {0, 1000, (1 << 20) + 7, n};
                    for (int r = 2; r >= 0; r--)
                        EXPECT_STATUS(dt_optimizer_update_range(o[k], p[k], g, cut[r], cut[r + 1] - cut[r], 0.01f), DT_OK);
                    dt_optimizer_end_step(o[k]);
                } else { /* slices, as ZeRO updates them where they sit */
                    for (int64_t at = 0; at < n; at += 300000) {
                        int64_t len = n - at < 300000 ? n - at : 300000;
                        EXPECT_STATUS(dt_optimizer_update_slice(o[k], p[k] + at, g + at, at, len, 0.01f), DT_OK);
                    }
                    dt_optimizer_end_step(o[k]);
                }
            }
            if (step == 2) { /* a checkpoint reads both states, a resume changes them */
                for (int k = 0; k < 2; k++) {
                    dt_optim_state st[2];
                    int ns = dt_optimizer_state_buffers(o[k], st, 2);
                    for (int b = 0; b < ns; b++)
                        st[b].data[5] = 0.25f;
                }
            }
        }
        EXPECT(memcmp(p[0], p[1], (size_t)n * sizeof(float)) == 0);
        /* a range of each buffer straight from the file (across windows), as in memory */
        EXPECT_EQ(dt_optimizer_state_count(o[1]), kind == 0 ? 2 : 1);
        float *part = malloc((1 << 20) * sizeof *part), *ref = malloc((1 << 20) * sizeof *ref);
        for (int b = 0; b < dt_optimizer_state_count(o[1]); b++) {
            EXPECT_STATUS(dt_optimizer_state_read(o[1], b, (1 << 20) - 7, 1 << 20, part), DT_OK);
            EXPECT_STATUS(dt_optimizer_state_read(o[0], b, (1 << 20) - 7, 1 << 20, ref), DT_OK);
            EXPECT(memcmp(part, ref, (1 << 20) * sizeof *part) == 0);
        }
        EXPECT_STATUS(dt_optimizer_state_read(o[1], 0, n - 1, 2, part), DT_ERR_INVALID);
        EXPECT_STATUS(dt_optimizer_state_read(o[1], 2, 0, 1, part), DT_ERR_INVALID);
        free(part);
        free(ref);
        dt_optim_state a[2], b[2];
        int na = dt_optimizer_state_buffers(o[0], a, 2), nb = dt_optimizer_state_buffers(o[1], b, 2);
        EXPECT(na == nb);
        for (int k = 0; k < na && k < nb; k++)
            EXPECT(memcmp(a[k].data, b[k].data, (size_t)n * sizeof(float)) == 0);
        uint64_t rd, wr;
        dt_optimizer_offload_io(o[1], &rd, &wr);
        EXPECT(rd >= 4 * (uint64_t)n * sizeof(float) && wr >= 4 * (uint64_t)n * sizeof(float));
        for (int k = 0; k < 2; k++)
            dt_optimizer_destroy(o[k]);
    }
    free(g);
    free(p[0]);
    free(p[1]);
}

/* The synthetic delay model (pipeline schedule benchmarks): forward copies,
 * backward passes the gradient through, one parameter per block whose
 * gradient is 0 and reported ready; 0 ms so that nothing here is timed. */
static int delay_ready;
static void on_delay_ready(int index, void *user)
{
    (void)index;
    (void)user;
    delay_ready++;
}

static void test_delay(void)
{
    dt_model_desc *d = NULL;
    EXPECT_STATUS(dt_delay_describe(0, 4, 1, 1, &d), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "0 blocks");
    EXPECT_STATUS(dt_delay_describe(2, 4, -1, 1, &d), DT_ERR_INVALID);
    EXPECT_STATUS(dt_delay_describe(3, 4, 0, 0, &d), DT_OK);
    EXPECT_EQ(dt_model_desc_blocks(d), 3);
    EXPECT(dt_model_desc_block(d, 0)->flops > 0 && dt_model_desc_block(d, 0)->flops == dt_model_desc_block(d, 2)->flops);
    dt_model *m;
    EXPECT_STATUS(dt_model_instantiate(d, 0, 3, &m), DT_OK);
    dt_model_init(m, 1);
    dt_params *p = dt_model_params(m);
    EXPECT_EQ(dt_params_count(p), 3);
    EXPECT(dt_params_find(p, "delay.2.weight") == 2);
    EXPECT_EQ(dt_params_numel(p), 3);
    dt_arena *arena;
    dt_arena_create(&arena);
    float xs[2 * 4] = {1, -2, 3, 0.5f, 0, 7, -1, 2};
    int32_t t[2] = {2, 1};
    dt_tensor x = dt_tensor_view(xs, 2, (int64_t[]){2, 4}), y;
    dt_ctx ctx = {.arena = arena, .training = true};
    dt_params_zero_grads(p);
    dt_params_on_grad_ready(p, on_delay_ready, NULL);
    EXPECT_STATUS(dt_model_forward(m, &ctx, &x, &y), DT_OK);
    EXPECT(y.data != xs && y.ndim == 2 && y.shape[0] == 2 && y.shape[1] == 4);
    EXPECT(memcmp(y.data, xs, sizeof xs) == 0);
    dt_tensor dy = y, dx;
    dy.data = dt_arena_alloc(arena, dt_tensor_numel(&y));
    float loss;
    EXPECT_STATUS(dt_model_loss(m, &y, t, &loss, &dy), DT_OK);
    EXPECT_STATUS(dt_model_backward_dx(m, &ctx, &dy, &dx), DT_OK);
    EXPECT(dx.ndim == 2 && memcmp(dx.data, dy.data, sizeof xs) == 0);
    EXPECT_EQ(delay_ready, 3);
    for (int i = 0; i < 3; i++)
        EXPECT_NEAR(dt_param_grad(p, i)[0], 0.0, 0);
    EXPECT_EQ(dt_ctx_saved_depth(&ctx), 0);
    dt_params_on_grad_ready(p, NULL, NULL);
    dt_tensor wrong = dt_tensor_view(xs, 2, (int64_t[]){4, 2});
    EXPECT_STATUS(dt_model_forward(m, &ctx, &wrong, &y), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "delay.0");
    dt_arena_destroy(arena);
    dt_model_destroy(m);
    dt_model_desc_destroy(d);
}

/* A whole tiny GPT + loss against finite differences (every parameter). */
static void test_gpt(void)
{
    dt_model *m;
    dt_gpt_config cfg = {.vocab = 11, .context = 6, .layers = 2, .heads = 2, .dim = 8};
    EXPECT_STATUS(dt_gpt_create(&cfg, &m), DT_OK);
    dt_model_init(m, 4);
    dt_params *p = dt_model_params(m);
    EXPECT(dt_params_find(p, "transformer.h.1.attn.c_attn.weight") >= 0);
    EXPECT(dt_params_find(p, "transformer.ln_f.bias") >= 0);
    EXPECT(dt_params_find(p, "lm_head.weight") < 0); /* tied to wte */
    /* 2 blocks x (ln 16 + c_attn 216 + c_proj 72 + ln 16 + fc 288 + proj 264) + wte 88 + wpe 48 + ln_f 16 */
    EXPECT_EQ(dt_params_numel(p), 2 * (16 + 216 + 72 + 16 + 288 + 264) + 88 + 48 + 16);
    dt_rng rng;
    dt_rng_seed(&rng, 8);
    for (int64_t i = 0; i < dt_params_numel(p); i++) /* larger weights than 0.02 so every path matters */
        dt_params_values(p)[i] += 0.3f * dt_rng_normal(&rng);
    float ids[2 * 5];
    int32_t t[2 * 5];
    for (int i = 0; i < 10; i++) {
        ids[i] = (float)(dt_rng_next(&rng) % 11);
        t[i] = (int32_t)(dt_rng_next(&rng) % 11);
    }
    dt_arena *arena;
    dt_arena_create(&arena);
    dt_ctx ctx = {.arena = arena, .training = true};
    dt_tensor x = dt_tensor_view(ids, 2, (int64_t[]){2, 5}), y;
    ready_count = 0;
    dt_params_on_grad_ready(p, on_ready, NULL);
    dt_params_zero_grads(p);
    EXPECT_STATUS(dt_model_forward(m, &ctx, &x, &y), DT_OK);
    EXPECT(y.ndim == 3 && y.shape[2] == 11);
    float loss;
    dt_tensor g = y;
    g.data = dt_arena_alloc(arena, dt_tensor_numel(&y));
    dt_softmax_cross_entropy(&y, t, &loss, &g);
    EXPECT_STATUS(dt_model_backward(m, &ctx, &g), DT_OK);
    EXPECT_EQ(ready_count, dt_params_count(p)); /* every parameter exactly once, wte included */
    EXPECT_EQ(ready_order[ready_count < 16 ? 0 : 0], dt_params_find(p, "transformer.ln_f.weight"));
    dt_params_on_grad_ready(p, NULL, NULL);
    EXPECT_EQ(model_fd_mismatches("gpt", m, &ctx, arena, &x, t, 1e-2f, 3e-2, 0.05), 0);
    float too_long[7] = {0};
    dt_tensor lx = dt_tensor_view(too_long, 2, (int64_t[]){1, 7});
    dt_arena_reset(arena);
    EXPECT_STATUS(dt_model_forward(m, &ctx, &lx, &y), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "time <= 6");
    cfg.heads = 3;
    dt_model *bad_model;
    EXPECT_STATUS(dt_gpt_create(&cfg, &bad_model), DT_ERR_INVALID);
    dt_arena_destroy(arena);
    dt_model_destroy(m);
}

static void test_optim(void)
{
    const float p0[4] = {0.5f, -1.25f, 2.0f, 0.0f};
    const float grads[3][4] = {{0.1f, -0.2f, 0.3f, -0.4f}, {0.05f, 0.5f, -0.25f, 1.0f}, {-0.3f, 0.2f, 0.1f, 0.0f}};
    struct {
        const char *name;
        int adam;
        dt_sgd_config sgd;
        dt_adamw_config aw;
        float lr;
        double want[4]; /* torch.optim after 3 steps */
    } cases[] = {
        {"sgd momentum+wd", 0, {0.9f, 0.01f, false}, {0, 0, 0, 0}, 0.1f, {0.490640402, -1.30381954, 1.94507861, -0.0816519484}},
        {"sgd nesterov", 0, {0.9f, 0.0f, true}, {0, 0, 0, 0}, 0.1f, {0.509060025, -1.35472, 1.94558001, -0.133440003}},
        {"adamw", 1, {0, 0, false}, {0.9f, 0.999f, 1e-8f, 0.1f}, 0.01f, {0.482681274, -1.24612093, 1.98177397, 0.00214394415}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        dt_optimizer *o;
        EXPECT_STATUS(cases[k].adam ? dt_adamw_create(&cases[k].aw, 4, &o) : dt_sgd_create(&cases[k].sgd, 4, &o), DT_OK);
        float p[4];
        memcpy(p, p0, sizeof p);
        for (int s = 0; s < 3; s++)
            EXPECT_STATUS(dt_optimizer_step(o, p, grads[s], 4, cases[k].lr), DT_OK);
        for (int i = 0; i < 4; i++)
            EXPECT_NEAR(p[i], cases[k].want[i], 2e-6);
        EXPECT_EQ(dt_optimizer_steps(o), 3);
        EXPECT_STATUS(dt_optimizer_step(o, p, grads[0], 3, 0.1f), DT_ERR_INVALID);
        dt_optimizer_destroy(o);
    }
    dt_optimizer *o;
    EXPECT_STATUS(dt_sgd_create(&(dt_sgd_config){.momentum = 1.5f}, 4, &o), DT_ERR_INVALID);
    EXPECT_STATUS(dt_adamw_create(&(dt_adamw_config){.beta1 = 0.9f, .beta2 = 1.0f, .eps = 1e-8f}, 4, &o), DT_ERR_INVALID);

    float g[3] = {3, 4, 0};
    EXPECT_NEAR(dt_clip_grad_norm(g, 3, 2.0f), 5.0, 1e-7);
    EXPECT_NEAR(g[0], 1.19999981, 1e-6);
    EXPECT_NEAR(g[1], 1.59999967, 1e-6);

    dt_lr_schedule cst = {.kind = DT_LR_CONSTANT, .base_lr = 0.1f, .warmup_steps = 4};
    EXPECT_NEAR(dt_lr_at(&cst, 0), 0.025, 1e-7);
    EXPECT_NEAR(dt_lr_at(&cst, 3), 0.1, 1e-7);
    EXPECT_NEAR(dt_lr_at(&cst, 100), 0.1, 1e-7);
    dt_lr_schedule cos_s = {.kind = DT_LR_COSINE, .base_lr = 1.0f, .min_lr = 0.1f, .warmup_steps = 10, .total_steps = 110};
    EXPECT_NEAR(dt_lr_at(&cos_s, 9), 1.0, 1e-7);
    EXPECT_NEAR(dt_lr_at(&cos_s, 10), 1.0, 1e-6);
    EXPECT_NEAR(dt_lr_at(&cos_s, 60), 0.55, 1e-6);
    EXPECT_NEAR(dt_lr_at(&cos_s, 110), 0.1, 1e-6);
    EXPECT_NEAR(dt_lr_at(&cos_s, 500), 0.1, 1e-6);
}

static void test_gelu_golden(void)
{
    float xs[5] = {-3.0f, -0.5f, 0.0f, 0.7f, 2.5f};
    double want[5] = {-0.00363743305, -0.154285997, 0, 0.530570149, 2.48491573}; /* torch gelu(tanh) */
    dt_layer *l;
    dt_gelu_create("g", &l);
    dt_arena *a;
    dt_arena_create(&a);
    dt_ctx ctx = {.arena = a};
    dt_tensor x = dt_tensor_view(xs, 1, (int64_t[]){5}), y;
    EXPECT_STATUS(l->ops->forward(l, &ctx, &x, &y), DT_OK);
    for (int i = 0; i < 5; i++)
        EXPECT_NEAR(y.data[i], want[i], 1e-6);
    dt_arena_destroy(a);
    dt_layer_destroy(l);
}

/* GELU in bf16 training (src/tensor/cpu_gelu_bf16.c): its own tanh,
 * recomputed in the backward, so it keeps n floats fewer than the f32
 * layer; y and dx within the bound of tanh's absolute error (1.2e-7 against
 * tanhf) of the f32 layer's, and bitwise the same at 1 and 2 threads (an odd
 * n, so the threads' chunks end inside a vector). */
static void test_gelu_bf16(void)
{
    const double dt_max = 1.5e-7, K = 0.7978845608028654, C = 0.044715;
    int64_t n = 100003;
    float *x = malloc((size_t)n * sizeof *x), *dy = malloc((size_t)n * sizeof *dy), *out[2][2];
    for (int64_t i = 0; i < n; i++) {
        x[i] = i % 101 == 0 ? 1e-20f * (float)(i % 3) : -12.0f + 24.0f * (float)i / (float)n;
        dy[i] = 1.0f + 0.25f * (float)(i % 5);
    }
    dt_layer *l;
    dt_gelu_create("g", &l);
    dt_arena *a;
    dt_arena_create(&a);
    int64_t bytes[2] = {0, 0};
    for (int run = 0; run < 3; run++) { /* f32 at 2 threads, bf16 at 1, bf16 at 2 */
        EXPECT_STATUS(dt_set_threads(run == 1 ? 1 : 2), DT_OK);
        dt_arena_reset(a);
        dt_ctx ctx = {.arena = a, .training = true, .compute = run ? DT_BF16 : DT_F32};
        dt_tensor xt = dt_tensor_view(x, 1, (int64_t[]){n}), y, dyt = xt, dx = {0};
        dyt.data = dy;
        EXPECT_STATUS(l->ops->forward(l, &ctx, &xt, &y), DT_OK);
        if (run < 2)
            bytes[run] = (int64_t)dt_arena_bytes_in_use(a);
        EXPECT_STATUS(l->ops->backward(l, &ctx, &dyt, &dx, true), DT_OK);
        float *keep = malloc((size_t)(2 * n) * sizeof *keep);
        memcpy(keep, y.data, (size_t)n * sizeof *keep);
        memcpy(keep + n, dx.data, (size_t)n * sizeof *keep);
        if (run < 2) {
            out[run][0] = keep;
            out[run][1] = keep + n;
        } else {
            EXPECT(memcmp(keep, out[1][0], (size_t)(2 * n) * sizeof *keep) == 0);
            free(keep);
        }
    }
    EXPECT(bytes[0] - bytes[1] >= n * (int64_t)sizeof(float));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double xi = x[i], du = K * (1 + 3 * C * xi * xi);
        /* tanh's error, that of rounding 1 + t, then a few roundings of the result */
        double ty = 0.5 * fabs(xi) * (dt_max + 1.2e-7) + 2.4e-7 * fabs(out[0][0][i]);
        double tdx = (0.5 + fabs(xi) * du) * (dt_max + 1.2e-7) * dy[i] + 4.8e-7 * fabs(out[0][1][i]);
        if (fabs(out[1][0][i] - out[0][0][i]) > ty || fabs(out[1][1][i] - out[0][1][i]) > tdx) {
            if (bad++ < 3)
                fprintf(stderr, "gelu bf16: x %.9g: y %.9g (f32 %.9g), dx %.9g (f32 %.9g)\n", xi, out[1][0][i],
                        out[0][0][i], out[1][1][i], out[0][1][i]);
        }
    }
    EXPECT_EQ(bad, 0);
    free(out[0][0]), free(out[1][0]);
    free(x), free(dy);
    dt_arena_destroy(a);
    dt_layer_destroy(l);
}

/* Attention's softmax in bf16 training (cpu_attention.c, AVX-512): on
 * scores the bf16 products give exactly (small whole numbers), the kept
 * probabilities are within 2 ulp-scale errors of the f32 softmax's, zero
 * above the diagonal, and bitwise the same at 1 and 2 threads. */
static void test_softmax_bf16(void)
{
    int64_t B = 2, T = 70, H = 3, hd = 8, D = H * hd, np = B * H * T * T;
    float *qkv = malloc((size_t)(B * T * 3 * D) * sizeof *qkv), *out = malloc((size_t)(B * T * D) * sizeof *out);
    float *p[3];
    for (int64_t i = 0; i < B * T * 3 * D; i++)
        qkv[i] = (float)((i * 7919) % 9) - 4.0f; /* whole: every product and sum exact in f32 and bf16 */
    for (int r = 0; r < 3; r++) { /* f32, bf16 at 1 thread, bf16 at 2 */
        EXPECT_STATUS(dt_set_threads(r == 1 ? 1 : 2), DT_OK);
        p[r] = malloc((size_t)np * sizeof *p[r]);
        dt__cpu_attn_fwd(r ? DT_BF16 : DT_F32, out, p[r], qkv, B, T, H, hd);
    }
    EXPECT(memcmp(p[1], p[2], (size_t)np * sizeof(float)) == 0);
    int64_t bad = 0;
    for (int64_t i = 0; i < np; i++) {
        int64_t row = i / T % T, col = i % T;
        bool ok = col > row ? p[1][i] == 0.0f : fabs(p[1][i] - p[0][i]) <= 4e-7 * p[0][i] + 1e-30;
        if (!ok && bad++ < 3)
            fprintf(stderr, "softmax bf16: P[%lld] (row %lld, col %lld) %.9g, f32 %.9g\n", (long long)i,
                    (long long)row, (long long)col, p[1][i], p[0][i]);
    }
    EXPECT_EQ(bad, 0);
    for (int r = 0; r < 3; r++)
        free(p[r]);
    free(qkv), free(out);
}

/* Attention's backward in bf16 training (cpu_attention.c, AVX-512: dS
 * with the dot in f32 lanes): the input gradient within bf16 rounding of
 * the f32 backward's (3% of the largest magnitude of its part: dQ, dK or
 * dV), and bitwise the same at 1 and 2 threads. */
static void test_attention_bwd_bf16(void)
{
    int64_t B = 2, T = 70, H = 3, hd = 8, D = H * hd, np = B * H * T * T, nq = B * T * 3 * D;
    float *qkv = malloc((size_t)nq * sizeof *qkv), *out = malloc((size_t)(B * T * D) * sizeof *out);
    float *dout = malloc((size_t)(B * T * D) * sizeof *dout), *p = malloc((size_t)np * sizeof *p);
    float *scratch = malloc((size_t)np * sizeof *scratch), *dq[3];
    for (int64_t i = 0; i < nq; i++)
        qkv[i] = (float)((i * 7919) % 97) / 48.0f - 1.0f;
    for (int64_t i = 0; i < B * T * D; i++)
        dout[i] = (float)((i * 104729) % 89) / 44.0f - 1.0f;
    for (int r = 0; r < 3; r++) { /* f32, bf16 at 1 thread, bf16 at 2 */
        EXPECT_STATUS(dt_set_threads(r == 1 ? 1 : 2), DT_OK);
        dt_dtype c = r ? DT_BF16 : DT_F32;
        dq[r] = malloc((size_t)nq * sizeof *dq[r]);
        dt__cpu_attn_fwd(c, out, p, qkv, B, T, H, hd);
        dt__cpu_attn_bwd(c, dq[r], scratch, dout, qkv, out, p, B, T, H, hd);
    }
    EXPECT(memcmp(dq[1], dq[2], (size_t)nq * sizeof(float)) == 0);
    double top[3] = {0, 0, 0}; /* the largest dQ, dK and dV */
    for (int64_t i = 0; i < nq; i++)
        top[i % (3 * D) / D] = fmax(top[i % (3 * D) / D], fabs(dq[0][i]));
    int64_t bad = 0;
    for (int64_t i = 0; i < nq; i++) {
        double t = top[i % (3 * D) / D];
        if (!(fabs(dq[1][i] - dq[0][i]) <= 0.03 * t) && bad++ < 3)
            fprintf(stderr, "attention backward bf16: dqkv[%lld] %.9g, f32 %.9g (largest of its part %.3g)\n",
                    (long long)i, dq[1][i], dq[0][i], t);
    }
    EXPECT(top[0] > 0.01 && top[1] > 0.01 && top[2] > 0.01);
    EXPECT_EQ(bad, 0);
    for (int r = 0; r < 3; r++)
        free(dq[r]);
    free(qkv), free(out), free(dout), free(p), free(scratch);
}

/* The GELU's input gradient over its dead output: in [linear, gelu,
 * linear] the backward allocates fc2's input gradient on top of the
 * forward's activations and nothing more of that size (the GELU writes over
 * its own output), so the arena's peak is the forward's plus one [rows, 64]
 * tensor (and small records), not two. */
static void test_gelu_grad_over_output(void)
{
    int64_t rows = 256, hidden = 64;
    dt_params *p;
    dt_layer *seq, *part;
    dt_params_create(&p);
    EXPECT_STATUS(dt_sequential_create("mlp", &seq), DT_OK);
    EXPECT_STATUS(dt_linear_create(p, "fc1", 8, hidden, true, &part), DT_OK);
    EXPECT_STATUS(dt_sequential_append(seq, part), DT_OK);
    EXPECT_STATUS(dt_gelu_create("gelu", &part), DT_OK);
    EXPECT_STATUS(dt_sequential_append(seq, part), DT_OK);
    EXPECT_STATUS(dt_linear_create(p, "fc2", hidden, 8, true, &part), DT_OK);
    EXPECT_STATUS(dt_sequential_append(seq, part), DT_OK);
    EXPECT_STATUS(dt_params_finalize(p), DT_OK);
    seq->ops->init(seq, p, 3);
    float *x = calloc((size_t)(rows * 8), sizeof *x), *dyv = calloc((size_t)(rows * 8), sizeof *dyv);
    for (int64_t i = 0; i < rows * 8; i++)
        x[i] = (float)(i % 13) * 0.1f - 0.6f, dyv[i] = 0.01f * (float)(i % 7);
    dt_arena *a;
    dt_arena_create(&a);
    dt_ctx ctx = {.arena = a, .params = p, .training = true};
    dt_tensor xt = dt_tensor_view(x, 2, (int64_t[]){rows, 8}), y, dy, dx = {0};
    EXPECT_STATUS(seq->ops->forward(seq, &ctx, &xt, &y), DT_OK);
    size_t after_forward = dt_arena_bytes_in_use(a);
    dt_arena_reset_peak(a);
    dy = y;
    dy.data = dyv;
    EXPECT_STATUS(seq->ops->backward(seq, &ctx, &dy, &dx, true), DT_OK);
    size_t grad = (size_t)(rows * hidden) * sizeof(float);
    size_t peak = dt_arena_peak_bytes(a);
    if (peak >= after_forward + grad + grad / 2)
        fprintf(stderr, "gelu grad over output: backward peak %zu bytes, forward %zu, one gradient %zu\n", peak,
                after_forward, grad);
    EXPECT(peak < after_forward + grad + grad / 2);
    free(x), free(dyv);
    dt_arena_destroy(a);
    dt_layer_destroy(seq);
    dt_params_destroy(p);
}

static void test_arena_and_threads(void)
{
    dt_arena *a;
    dt_arena_create(&a);
    float *p1 = dt_arena_alloc(a, 10), *p2 = dt_arena_alloc(a, 100 << 20); /* forces a second chunk */
    EXPECT(p1 && p2 && ((uintptr_t)p1 % 64) == 0);
    p1[0] = 42;
    float *p3 = dt_arena_alloc(a, 5);
    EXPECT(p1[0] == 42 && p3 != p1);
    dt_arena_reset(a);
    EXPECT_EQ(dt_arena_bytes_in_use(a), 0);
    EXPECT(dt_arena_alloc(a, 10) == p1); /* reused */
    p1[0] = 7;
    dt_arena_reset(a);
    EXPECT(dt_arena_calloc(a, 10) == p1 && p1[0] == 0); /* calloc clears */
    dt_arena_destroy(a);

    int64_t n = 1000003;
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4), *z = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(i % 97), y[i] = 1.0f;
    for (int t = 1; t <= 3; t++) {
        EXPECT_STATUS(dt_set_threads(t), DT_OK);
        EXPECT_EQ(dt_get_threads(), t);
        memcpy(z, y, (size_t)n * 4);
        dt_vec_axpy(z, 2.0f, x, n);
        int bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += z[i] != 1.0f + 2.0f * (float)(i % 97);
        EXPECT_EQ(bad, 0);
    }
    EXPECT_STATUS(dt_set_threads(-1), DT_ERR_INVALID);
    dt_set_threads(0);
    EXPECT(dt_get_threads() >= 1);
    /* the default: DT_THREADS, else the cores / DT_LOCAL_WORLD_SIZE, at least 1 */
    int dflt = 0;
    setenv("DT_THREADS", "3", 1);
    EXPECT_STATUS(dt_threads_default(&dflt, NULL), DT_OK);
    EXPECT_EQ(dflt, 3);
    setenv("DT_THREADS", "abc", 1);
    EXPECT_STATUS(dt_threads_default(&dflt, NULL), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "DT_THREADS: 'abc'");
    unsetenv("DT_THREADS");
    setenv("DT_LOCAL_WORLD_SIZE", "1000", 1);
    EXPECT_STATUS(dt_threads_default(&dflt, NULL), DT_OK);
    EXPECT_EQ(dflt, dt_cpus_bound() ? dt_cores_available() : 1);
    unsetenv("DT_LOCAL_WORLD_SIZE");
    EXPECT_STATUS(dt_threads_default(&dflt, NULL), DT_OK);
    EXPECT_EQ(dflt, dt_cores_available());
    free(x);
    free(y);
    free(z);
}

/* ---- data ---- */

static void write_gz(const char *path, const uint8_t *bytes, size_t n)
{
    gzFile f = gzopen(path, "wb");
    gzwrite(f, bytes, (unsigned)n);
    gzclose(f);
}

static void idx_files(const char *dir, uint32_t nimg, uint32_t nlab, uint32_t magic, size_t cut, int bad_label)
{
    uint8_t buf[16 + 3 * 2 * 2];
    size_t n = 0;
    uint32_t hdr[4] = {magic, nimg, 2, 2};
    for (int i = 0; i < 4; i++)
        for (int b = 3; b >= 0; b--)
            buf[n++] = (uint8_t)(hdr[i] >> (8 * b));
    for (uint32_t i = 0; i < nimg * 4; i++)
        buf[n++] = (uint8_t)(i * 20);
    char path[512];
    snprintf(path, sizeof path, "%s/img.gz", dir);
    write_gz(path, buf, n - cut);
    uint8_t lab[8 + 3] = {0, 0, 8, 1, 0, 0, 0, (uint8_t)nlab, 1, 9, 4};
    if (bad_label)
        lab[10] = 12;
    snprintf(path, sizeof path, "%s/lab.gz", dir);
    write_gz(path, lab, 8 + nlab);
}

static void test_idx(void)
{
    char dir[] = "/tmp/dtrain-idx-XXXXXX", img[600], lab[600];
    EXPECT(mkdtemp(dir) != NULL);
    snprintf(img, sizeof img, "%s/img.gz", dir);
    snprintf(lab, sizeof lab, "%s/lab.gz", dir);
    dt_idx_set s;
    idx_files(dir, 3, 3, 0x803, 0, 0);
    EXPECT_STATUS(dt_idx_load(img, lab, &s), DT_OK);
    EXPECT(s.count == 3 && s.rows == 2 && s.cols == 2 && s.labels[1] == 9 && s.images[5] == 100);
    float x[8];
    int32_t y[2];
    dt_idx_batch(&s, (int64_t[]){2, 0}, 2, x, y);
    EXPECT(y[0] == 4 && y[1] == 1 && fabsf(x[0] - 160.0f / 255.0f) < 1e-7f);
    dt_idx_free(&s);

    idx_files(dir, 3, 3, 0x804, 0, 0);
    EXPECT_STATUS(dt_idx_load(img, lab, &s), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "bad magic");
    EXPECT_CONTAINS(dt_last_error(), "img.gz");
    idx_files(dir, 3, 3, 0x803, 5, 0);
    EXPECT_STATUS(dt_idx_load(img, lab, &s), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "truncated");
    idx_files(dir, 3, 2, 0x803, 0, 0);
    EXPECT_STATUS(dt_idx_load(img, lab, &s), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "3 images but");
    idx_files(dir, 3, 3, 0x803, 0, 1);
    EXPECT_STATUS(dt_idx_load(img, lab, &s), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "label 12");
    EXPECT_STATUS(dt_idx_load("/nonexistent/images.gz", lab, &s), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "/nonexistent/images.gz");
    EXPECT_STATUS(dt_idx_load_dir(dir, "validation", &s), DT_ERR_INVALID);
    unlink(img);
    unlink(lab);
    rmdir(dir);
}

static void test_sampler(void)
{
    enum { N = 10, W = 3 };
    int seen[N] = {0};
    int64_t idx[16];
    for (int r = 0; r < W; r++) {
        dt_sampler s;
        EXPECT_STATUS(dt_sampler_init(&s, N, 42, r, W, true, false), DT_OK);
        EXPECT_EQ(dt_sampler_per_rank(&s), 4); /* padded to 12 */
        int64_t got = dt_sampler_next(&s, 16, idx);
        EXPECT_EQ(got, 4);
        for (int64_t i = 0; i < got; i++)
            seen[idx[i]]++;
        dt_sampler_free(&s);
    }
    int covered = 0, twice = 0;
    for (int i = 0; i < N; i++)
        covered += seen[i] > 0, twice += seen[i] == 2;
    EXPECT_EQ(covered, N);
    EXPECT_EQ(twice, 2); /* the two padding samples */

    /* epochs differ, seeds repeat, resume and re-shard continue exactly */
    dt_sampler a, b;
    dt_sampler_init(&a, 1000, 7, 0, 1, true, true);
    dt_sampler_init(&b, 1000, 7, 0, 1, true, true);
    int64_t e0[100], e1[100], x[100];
    dt_sampler_next(&a, 100, e0);
    dt_sampler_next(&b, 100, x);
    EXPECT(memcmp(e0, x, sizeof x) == 0);
    for (int i = 0; i < 9; i++)
        dt_sampler_next(&a, 100, x);
    EXPECT_EQ(dt_sampler_next(&a, 100, e1), 100);
    EXPECT_EQ(a.epoch, 1);
    EXPECT(memcmp(e0, e1, sizeof e0) != 0);
    dt_sampler_free(&a);
    dt_sampler_free(&b);

    /* 4 ranks consume 2 steps of 5, then the job resumes on 2 ranks */
    int used[40] = {0};
    for (int r = 0; r < 4; r++) {
        dt_sampler_init(&a, 40, 3, r, 4, true, true);
        for (int step = 0; step < 2; step++) {
            int64_t n = dt_sampler_next(&a, 5, x);
            for (int64_t i = 0; i < n; i++)
                used[x[i]]++;
        }
        EXPECT_EQ(a.position, 40);
        dt_sampler_free(&a);
    }
    int all_once = 1; /* the whole epoch was used exactly once */
    for (int i = 0; i < 40; i++)
        all_once &= used[i] == 1;
    EXPECT(all_once);
    memset(used, 0, sizeof used);
    for (int r = 0; r < 4; r++) {
        dt_sampler_init(&a, 40, 3, r, 4, true, true);
        int64_t n = dt_sampler_next(&a, 5, x); /* one step: 20 samples globally */
        for (int64_t i = 0; i < n; i++)
            used[x[i]]++;
        dt_sampler_free(&a);
    }
    for (int r = 0; r < 2; r++) {
        dt_sampler_init(&a, 40, 3, 0, 1, true, true);
        EXPECT_STATUS(dt_sampler_seek(&a, 0, 20, r, 2), DT_OK);
        int64_t n = dt_sampler_next(&a, 10, x);
        EXPECT_EQ(n, 10);
        for (int64_t i = 0; i < n; i++)
            used[x[i]]++;
        dt_sampler_free(&a);
    }
    all_once = 1;
    for (int i = 0; i < 40; i++)
        all_once &= used[i] == 1;
    EXPECT(all_once);
    EXPECT_STATUS(dt_sampler_init(&a, 2, 1, 0, 4, true, true), DT_ERR_INVALID);
    EXPECT_STATUS(dt_sampler_init(&a, 10, 1, 3, 3, true, true), DT_ERR_INVALID);
}

/* Train the MLP briefly on real Fashion-MNIST: the loss falls and test accuracy passes 75%. */
static void test_fashion_mnist(void)
{
    dt_idx_set train, test;
    if (access(DT_FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        fprintf(stderr, "test_engine: %s missing (scripts/setup.sh installs dataset-fashion-mnist)\n",
                DT_FASHION_MNIST_DIR);
        check_failures++;
        return;
    }
    EXPECT_STATUS(dt_idx_load_dir(DT_FASHION_MNIST_DIR, "train", &train), DT_OK);
    EXPECT_STATUS(dt_idx_load_dir(DT_FASHION_MNIST_DIR, "t10k", &test), DT_OK);
    EXPECT(train.count == 60000 && test.count == 10000 && train.rows == 28);
    dt_model *m;
    dt_mlp_create((int64_t[]){784, 128, 10}, 3, &m);
    dt_model_init(m, 1);
    dt_params *p = dt_model_params(m);
    dt_optimizer *o;
    dt_sgd_create(&(dt_sgd_config){.momentum = 0.9f}, dt_params_numel(p), &o);
    dt_sampler s;
    dt_sampler_init(&s, train.count, 1, 0, 1, true, true);
    dt_arena *arena;
    dt_arena_create(&arena);
    enum { B = 64 };
    int64_t idx[B];
    float *x = malloc(B * 784 * sizeof *x);
    int32_t y[B];
    float first = 0, last = 0;
    for (int step = 0; step < 300; step++) {
        int64_t n = dt_sampler_next(&s, B, idx);
        dt_idx_batch(&train, idx, n, x, y);
        dt_arena_reset(arena);
        dt_ctx ctx = {.arena = arena, .training = true};
        dt_tensor in = dt_tensor_view(x, 2, (int64_t[]){n, 784}), out;
        dt_params_zero_grads(p);
        dt_model_forward(m, &ctx, &in, &out);
        dt_tensor g = out;
        g.data = dt_arena_alloc(arena, dt_tensor_numel(&out));
        float loss;
        dt_softmax_cross_entropy(&out, y, &loss, &g);
        dt_model_backward(m, &ctx, &g);
        dt_optimizer_step(o, dt_params_values(p), dt_params_grads(p), dt_params_numel(p), 0.05f);
        if (step < 20)
            first += loss / 20;
        if (step >= 280)
            last += loss / 20;
    }
    int correct = 0;
    for (int64_t base = 0; base < 2000; base += B) {
        int64_t n = 0;
        for (; n < B && base + n < 2000; n++)
            idx[n] = base + n;
        dt_idx_batch(&test, idx, n, x, y);
        dt_arena_reset(arena);
        dt_ctx ctx = {.arena = arena};
        dt_tensor in = dt_tensor_view(x, 2, (int64_t[]){n, 784}), out;
        dt_model_forward(m, &ctx, &in, &out);
        for (int64_t i = 0; i < n; i++) {
            int best = 0;
            for (int c = 1; c < 10; c++)
                best = out.data[i * 10 + c] > out.data[i * 10 + best] ? c : best;
            correct += best == y[i];
        }
    }
    printf("fashion-mnist mlp: loss %.3f -> %.3f over 300 steps, test accuracy %.1f%% (2000 images)\n", first, last,
           correct / 20.0);
    EXPECT(last < first * 0.6f);
    EXPECT(correct > 1500);
    free(x);
    dt_arena_destroy(arena);
    dt_sampler_free(&s);
    dt_optimizer_destroy(o);
    dt_model_destroy(m);
    dt_idx_free(&train);
    dt_idx_free(&test);
}

/* The vector conversions (F16C, threaded) agree bit for bit with the base
 * layer's scalar reference on every kind of value, tails included. */
static void test_half_storage(void)
{
    const int64_t n = 200003; /* several threads' chunks and a ragged tail */
    float *src = malloc((size_t)n * sizeof *src), *back = malloc((size_t)n * sizeof *back);
    uint16_t *h = malloc((size_t)n * sizeof *h);
    dt_rng rng;
    dt_rng_seed(&rng, 7);
    const float special[] = {0.0f, -0.0f, 1.0f, 65504.0f, 65520.0f, 1e30f, -1e-30f, 5.9604645e-08f, 2.9802322e-08f,
                             6.1e-5f, INFINITY, -INFINITY, 3.0e38f};
    for (int64_t i = 0; i < n; i++) {
        float scale = ldexpf(1.0f, (int)(dt_rng_next(&rng) % 60) - 30);
        src[i] = i < 13 ? special[i] : (dt_rng_uniform(&rng) - 0.5f) * scale;
    }
    src[n - 1] = NAN;
    dt_dtype kinds[2] = {DT_F16, DT_BF16};
    for (int k = 0; k < 2; k++) {
        EXPECT_EQ(dt_vec_to_half(h, src, n, kinds[k]), DT_OK);
        int64_t bad = 0;
        for (int64_t i = 0; i < n - 1; i++)
            bad += h[i] != (kinds[k] == DT_F16 ? dt_f32_to_f16(src[i]) : dt_f32_to_bf16(src[i]));
        EXPECT_EQ(bad, 0);
        EXPECT_EQ(dt_vec_from_half(back, h, n, kinds[k]), DT_OK);
        bad = 0;
        for (int64_t i = 0; i < n - 1; i++) {
            float want = kinds[k] == DT_F16 ? dt_f16_to_f32(h[i]) : dt_bf16_to_f32(h[i]);
            bad += memcmp(&back[i], &want, sizeof want) != 0;
        }
        EXPECT_EQ(bad, 0);
        EXPECT(isnan(back[n - 1]));
        for (int64_t i = 0; i < n; i++)
            back[i] = 1.0f;
        EXPECT_EQ(dt_vec_add_half(back, h, n, kinds[k]), DT_OK);
        float want = 1.0f + (kinds[k] == DT_F16 ? dt_f16_to_f32(h[20]) : dt_bf16_to_f32(h[20]));
        EXPECT_EQ(memcmp(&back[20], &want, sizeof want), 0);
    }
    dt_tensor t = dt_tensor_view(src, 2, (int64_t[]){3, 4});
    dt_tensor_half th = {.data = h};
    EXPECT_EQ(dt_tensor_to_half(&t, DT_BF16, &th), DT_OK);
    EXPECT_EQ(th.ndim, 2);
    EXPECT_EQ(th.shape[1], 4);
    dt_tensor tb = {.data = back};
    EXPECT_EQ(dt_tensor_from_half(&th, &tb), DT_OK);
    EXPECT_EQ(tb.shape[0], 3);
    EXPECT_EQ(back[2], 1.0f);
    EXPECT_EQ(dt_vec_to_half(h, src, 4, DT_F32), DT_ERR_INVALID);
    EXPECT(strstr(dt_last_error(), "f16 or bf16") != NULL);
    free(src);
    free(back);
    free(h);
}

/* Loss and gradients of one step, for the thread-count comparison below. */
static float gpt_step_grads(dt_model *m, dt_arena *arena, const float *ids, const int32_t *t, int64_t B, int64_t T,
                            float *grads)
{
    dt_params *p = dt_model_params(m);
    dt_arena_reset(arena);
    dt_params_zero_grads(p);
    dt_ctx ctx = {.arena = arena, .training = true};
    dt_tensor x = dt_tensor_view((float *)ids, 2, (int64_t[]){B, T}), y;
    float loss = NAN;
    if (dt_model_forward(m, &ctx, &x, &y) != DT_OK)
        return NAN;
    dt_tensor g = y;
    g.data = dt_arena_alloc(arena, dt_tensor_numel(&y));
    dt_softmax_cross_entropy(&y, t, &loss, &g);
    if (dt_model_backward(m, &ctx, &g) != DT_OK)
        return NAN;
    memcpy(grads, dt_params_grads(p), (size_t)dt_params_numel(p) * sizeof(float));
    return loss;
}

/* Large products are split across the compute threads and attention heads
 * run in parallel.  With a given thread count a step is bitwise repeatable;
 * across thread counts the split changes which OpenBLAS kernel handles each
 * part (it has separate kernels for small products), so results agree to
 * rounding only. */
/* The row kernels against plain loops, bit for bit, at 1, 2 and 3 threads
 * (sizes large enough that they do split). */
static void test_row_kernels(void)
{
    enum { R = 700, C = 96, V = 50 };
    float *x = malloc(sizeof(float) * R * C), *ids = malloc(sizeof(float) * R), *table = malloc(sizeof(float) * V * C);
    float *out = malloc(sizeof(float) * R * C), *want = malloc(sizeof(float) * V * C);
    float sum[C], sum_want[C];
    dt_rng rng;
    dt_rng_seed(&rng, 11);
    for (int i = 0; i < R * C; i++)
        x[i] = dt_rng_normal(&rng);
    for (int i = 0; i < V * C; i++)
        table[i] = dt_rng_normal(&rng);
    for (int r = 0; r < R; r++)
        ids[r] = (float)(dt_rng_next(&rng) % V);
    double sumsq_ref = 0;
    for (int i = 0; i < R * C; i++)
        sumsq_ref += (double)x[i] * x[i];
    for (int threads = 1; threads <= 3; threads++) {
        dt_set_threads(threads);
        dt_rows_fill(out, table + 7 * C, R, C);
        EXPECT_EQ(memcmp(out + (R - 1) * C, table + 7 * C, sizeof(float) * C), 0);
        for (int j = 0; j < C; j++)
            sum[j] = sum_want[j] = (float)j;
        dt_rows_sum_add(sum, x, R, C);
        for (int r = 0; r < R; r++)
            for (int j = 0; j < C; j++)
                sum_want[j] += x[r * C + j];
        EXPECT_EQ(memcmp(sum, sum_want, sizeof sum), 0);
        dt_rows_gather(out, table, ids, R, C);
        EXPECT_EQ(memcmp(out + 123 * C, table + (int)ids[123] * C, sizeof(float) * C), 0);
        memcpy(want, table, sizeof(float) * V * C);
        for (int r = 0; r < R; r++)
            for (int j = 0; j < C; j++)
                want[(int)ids[r] * C + j] += x[r * C + j];
        dt_rows_scatter_add(table, ids, x, R, C);
        EXPECT_EQ(memcmp(table, want, sizeof(float) * V * C), 0);
        EXPECT_NEAR(dt_vec_sumsq(x, R * C), sumsq_ref, 1e-9 * sumsq_ref);
    }
    /* the norm's bits do not depend on the thread count */
    static float big[1 << 20];
    for (int i = 0; i < 1 << 20; i++)
        big[i] = (float)(i % 977) * 1e-3f;
    dt_set_threads(1);
    double one = dt_vec_sumsq(big, 1 << 20);
    dt_set_threads(3);
    double three = dt_vec_sumsq(big, 1 << 20);
    EXPECT_EQ(memcmp(&one, &three, sizeof one), 0);
    dt_set_threads(0);
    free(x);
    free(ids);
    free(table);
    free(out);
    free(want);
}

static void test_thread_count_invariance(void)
{
    dt_model *m;
    dt_gpt_config cfg = {.vocab = 64, .context = 64, .layers = 2, .heads = 4, .dim = 128};
    EXPECT_STATUS(dt_gpt_create(&cfg, &m), DT_OK);
    dt_model_init(m, 3);
    int64_t B = 6, T = 64, n = dt_params_numel(dt_model_params(m));
    float *ids = malloc((size_t)(B * T) * sizeof *ids), *ref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4),
          *again = malloc((size_t)n * 4);
    int32_t *t = malloc((size_t)(B * T) * sizeof *t);
    dt_rng rng;
    dt_rng_seed(&rng, 5);
    for (int64_t i = 0; i < B * T; i++) {
        ids[i] = (float)(dt_rng_next(&rng) % 64);
        t[i] = (int32_t)(dt_rng_next(&rng) % 64);
    }
    dt_arena *arena;
    dt_arena_create(&arena);
    dt_set_threads(1);
    float ref_loss = gpt_step_grads(m, arena, ids, t, B, T, ref);
    EXPECT(isfinite(ref_loss));
    for (int threads = 2; threads <= 3; threads++) {
        dt_set_threads(threads);
        float loss = gpt_step_grads(m, arena, ids, t, B, T, got);
        float loss2 = gpt_step_grads(m, arena, ids, t, B, T, again);
        EXPECT_EQ(memcmp(&loss, &loss2, sizeof loss), 0);
        EXPECT_EQ(memcmp(got, again, (size_t)n * 4), 0);
        EXPECT_NEAR(loss, ref_loss, 1e-6);
        double diff = 0, norm = 0;
        for (int64_t i = 0; i < n; i++) {
            diff += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
            norm += (double)ref[i] * ref[i];
        }
        EXPECT(sqrt(diff / norm) < 1e-5);
    }
    dt_set_threads(0);
    dt_arena_destroy(arena);
    dt_model_destroy(m);
    free(ids);
    free(t);
    free(ref);
    free(got);
    free(again);
}

/* Buckets in backward order: each at most the limit (unless one parameter is
 * larger), the last (sent after backward, exposed) at most a quarter of it,
 * together every gradient exactly once. */
static void test_ddp_buckets(void)
{
    dt_params *p = NULL;
    EXPECT_STATUS(dt_params_create(&p), DT_OK);
    const int64_t sizes[] = {3000, 500, 700, 9000, 4000, 4000, 2500, 6000, 1000};
    int64_t total = 0;
    for (int i = 0; i < 9; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        int64_t shape[1] = {sizes[i]};
        int idx;
        EXPECT_STATUS(dt_params_add(p, name, 1, shape, &idx), DT_OK);
        total += sizes[i];
    }
    EXPECT_STATUS(dt_params_finalize(p), DT_OK);
    dt_comm *world = NULL;
    EXPECT_STATUS(dt_comm_init_env(&world), DT_OK);
    dt_ddp_config cfg = {.bucket_bytes = 8000 * sizeof(float), .wire = DT_F32};
    dt_ddp *d = NULL;
    EXPECT_STATUS(dt_ddp_create(world, p, &cfg, &d), DT_OK);
    int nb = dt_ddp_buckets(d);
    int64_t sum = 0;
    for (int b = 0; b < nb; b++) {
        int64_t n = dt_ddp_bucket_numel(d, b);
        EXPECT(n > 0);
        EXPECT(n <= 9000);
        sum += n;
    }
    EXPECT_EQ(sum, total);
    /* registration order w0 (3000) then w1 (500) would exceed 2000: w0 alone */
    EXPECT_EQ(dt_ddp_bucket_numel(d, nb - 1), 3000);
    EXPECT_EQ(dt_ddp_bucket_numel(d, nb - 2), 1200);
    EXPECT_EQ(dt_ddp_bucket_numel(d, 0), 7000);
    dt_ddp_destroy(d);
    dt_comm_destroy(world);
    dt_params_destroy(p);
}

/* The OPENBLAS_CORETYPE dtrain asks for, on every pair of OpenBLAS's pick
 * and CPU features (forced here: the test does not depend on this CPU). */
static void test_blas_core_choice(void)
{
    static const struct {
        const char *core;
        bool avx512, avx2;
        const char *want;
    } cases[] = {
        {"Haswell", true, true, "SKYLAKEX"},   /* AMD Zen 4/5 under OpenBLAS 0.3.21 */
        {"Zen", true, true, "SKYLAKEX"},
        {"Prescott", true, true, "SKYLAKEX"},  /* an Intel model it does not know (Emerald Rapids) */
        {"Prescott", false, true, "HASWELL"},  /* the same on an AVX2 CPU */
        {"Sandybridge", false, true, "HASWELL"},
        {"Prescott", false, false, NULL},      /* what the CPU has */
        {"SkylakeX", true, true, NULL},
        {"Cooperlake", true, true, NULL},
        {"SapphireRapids", true, true, NULL},
        {"Haswell", false, true, NULL},
        {"Zen", false, true, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *got = dt__blas_core_for(cases[i].core, cases[i].avx512, cases[i].avx2);
        bool ok = got == cases[i].want || (got && cases[i].want && !strcmp(got, cases[i].want));
        if (!ok)
            printf("  core %s avx512 %d avx2 %d: got %s, want %s\n", cases[i].core, cases[i].avx512, cases[i].avx2,
                   got ? got : "NULL", cases[i].want ? cases[i].want : "NULL");
        EXPECT(ok);
    }
}

int main(void)
{
    test_blas_core_choice();
    test_layers();
    test_loss();
    test_mlp();
    test_delay();
    test_offload();
    test_maxpool();
    test_cnn();
    test_gpt();
    test_optim();
    test_gelu_golden();
    test_gelu_bf16();
    test_softmax_bf16();
    test_attention_bwd_bf16();
    test_gelu_grad_over_output();
    test_arena_and_threads();
    test_half_storage();
    test_row_kernels();
    test_thread_count_invariance();
    test_idx();
    test_sampler();
    test_fashion_mnist();
    test_ddp_buckets();
    return CHECK_DONE("test_engine");
}
