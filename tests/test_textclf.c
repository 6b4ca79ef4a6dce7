/* The pieces of the sparse text classifier, single process: row-sparse
 * bookkeeping and zeroing, EmbeddingBag by hand, Adagrad and SGD updating
 * touched rows only against the dense update (to the bit), the fortunes
 * data set (counts per category against the .dat indexes, the split, an
 * example's features) and a few textclf steps.  The PyTorch comparisons
 * are in tests/textclf_torch_check.py. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "dtrain/data.h"
#include "dtrain/nn.h"
#include "dtrain/optim.h"
#include "dtrain/parallel.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static bool all_zero(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (x[i] != 0)
            return false;
    return true;
}

/* Touched rows: sorted, unique, cleared by the zeroing, which clears only them. */
static void test_bookkeeping(void)
{
    dt_params *p;
    int a, t, b;
    EXPECT_STATUS(dt_params_create(&p), DT_OK);
    EXPECT_STATUS(dt_params_add(p, "a", 1, (int64_t[]){5}, &a), DT_OK);
    EXPECT_STATUS(dt_params_add(p, "table", 2, (int64_t[]){1000, 4}, &t), DT_OK);
    EXPECT_STATUS(dt_params_add(p, "b", 2, (int64_t[]){3, 2}, &b), DT_OK);
    EXPECT_STATUS(dt_param_set_row_sparse(p, a), DT_ERR_INVALID); /* 1-D */
    EXPECT_STATUS(dt_param_set_row_sparse(p, t), DT_OK);
    EXPECT_STATUS(dt_params_finalize(p), DT_OK);
    EXPECT(dt_param_is_row_sparse(p, t) && !dt_param_is_row_sparse(p, b) && dt_params_any_row_sparse(p));
    EXPECT(dt_params_info(p, t)->row_sparse);
    const int64_t *rows;
    EXPECT_EQ(dt_param_touched_rows(p, b, &rows), -1);
    EXPECT_EQ(dt_param_touched_rows(p, t, &rows), 0);
    EXPECT_STATUS(dt_param_touch_rows(p, t, (int64_t[]){999, 5, 3, 5, 64, 3}, 6), DT_OK);
    EXPECT_STATUS(dt_param_touch_rows(p, t, (int64_t[]){1000}, 1), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "table");
    EXPECT_STATUS(dt_param_touch_rows(p, b, (int64_t[]){0}, 1), DT_ERR_INVALID);
    int64_t n = dt_param_touched_rows(p, t, &rows);
    EXPECT_EQ(n, 4);
    int64_t want[] = {3, 5, 64, 999};
    for (int i = 0; i < 4 && n == 4; i++)
        EXPECT_EQ(rows[i], want[i]);
    float *g = dt_params_grads(p), *gt = dt_param_grad(p, t);
    for (int64_t i = 0; i < dt_params_numel(p); i++)
        g[i] = 0;
    for (int i = 0; i < 5; i++)
        dt_param_grad(p, a)[i] = 1;
    for (int i = 0; i < 6; i++)
        dt_param_grad(p, b)[i] = 2;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            gt[want[i] * 4 + j] = 3;
    gt[7 * 4] = 9; /* an untouched row written behind the registry's back: the zeroing must not see it */
    dt_params_zero_grads(p);
    EXPECT_EQ(dt_param_touched_rows(p, t, &rows), 0);
    EXPECT(all_zero(dt_param_grad(p, a), 5) && all_zero(dt_param_grad(p, b), 6));
    EXPECT(gt[7 * 4] == 9); /* proof that only the touched rows were cleared */
    gt[7 * 4] = 0;
    EXPECT(all_zero(gt, 4000));
    /* touch_all: every row, and the zeroing clears the whole table */
    EXPECT_STATUS(dt_param_touch_rows(p, t, (int64_t[]){2}, 1), DT_OK);
    dt_param_touch_all(p, t);
    EXPECT_EQ(dt_param_touched_rows(p, t, &rows), 1000);
    EXPECT(rows == NULL);
    gt[500] = 1;
    dt_params_zero_grads(p);
    EXPECT(gt[500] == 0);
    EXPECT_EQ(dt_param_touched_rows(p, t, &rows), 0);
    /* the bits were cleared with the rows: touching again records again */
    EXPECT_STATUS(dt_param_touch_rows(p, t, (int64_t[]){2, 3}, 2), DT_OK);
    EXPECT_EQ(dt_param_touched_rows(p, t, &rows), 2);
    dt_params_destroy(p);
}

/* A 2^20 x 32 table: zeroing after a batch's rows costs those rows.  1000
 * zeroings of 128 MiB would take ~10 s; of 200 rows, milliseconds. */
static void test_zeroing_cost(void)
{
    dt_params *p;
    int t;
    EXPECT_STATUS(dt_params_create(&p), DT_OK);
    EXPECT_STATUS(dt_params_add(p, "embedding.weight", 2, (int64_t[]){1 << 20, 32}, &t), DT_OK);
    EXPECT_STATUS(dt_param_set_row_sparse(p, t), DT_OK);
    EXPECT_STATUS(dt_params_finalize(p), DT_OK);
    float *g = dt_param_grad(p, t);
    double t0 = now_s();
    for (int step = 0; step < 1000; step++) {
        int64_t rows[200];
        for (int i = 0; i < 200; i++)
            rows[i] = ((int64_t)step * 7919 + (int64_t)i * 104729) % (1 << 20);
        EXPECT_STATUS(dt_param_touch_rows(p, t, rows, 200), DT_OK);
        for (int i = 0; i < 200; i++)
            g[rows[i] * 32 + step % 32] += 1;
        dt_params_zero_grads(p);
        if (g[rows[17] * 32 + step % 32] != 0) {
            EXPECT(!"a touched row survived the zeroing");
            break;
        }
    }
    double took = now_s() - t0;
    printf("1000 steps of 200 touched rows of a 2^20 x 32 table zeroed in %.3f s\n", took);
    EXPECT(took < 2.0);
    dt_params_destroy(p);
}

/* EmbeddingBag against sums done by hand: means, an empty bag, the
 * gradient dy / |bag| at each id (twice for a repeated id), touched rows. */
static void test_embedding_bag(void)
{
    dt_params *p;
    dt_layer *l;
    EXPECT_STATUS(dt_params_create(&p), DT_OK);
    EXPECT_STATUS(dt_embedding_bag_create(p, "bag", 6, 2, &l), DT_OK);
    EXPECT_STATUS(dt_params_finalize(p), DT_OK);
    float *W = dt_params_values(p);
    for (int i = 0; i < 12; i++)
        W[i] = (float)i; /* row r = (2r, 2r+1) */
    /* torch's form: ids 0 2 | 5 5 1 | (empty) -> padded to width 4 */
    float x[12];
    EXPECT_STATUS(dt_bags_from_offsets((int64_t[]){0, 2, 5, 5, 1}, 5, (int64_t[]){0, 2, 5}, 3, 4, x), DT_OK);
    float want_x[12] = {0, 2, -1, -1, 5, 5, 1, -1, -1, -1, -1, -1};
    EXPECT(memcmp(x, want_x, sizeof x) == 0);
    EXPECT_STATUS(dt_bags_from_offsets((int64_t[]){0, 2, 5, 5, 1}, 5, (int64_t[]){0, 2, 5}, 3, 2, x),
                  DT_ERR_INVALID);
    dt_arena *arena;
    dt_arena_create(&arena);
    dt_ctx ctx = {.arena = arena, .params = p, .training = true};
    dt_tensor in = dt_tensor_view(want_x, 2, (int64_t[]){3, 4}), y, dx;
    EXPECT_STATUS(l->ops->forward(l, &ctx, &in, &y), DT_OK);
    EXPECT(y.ndim == 2 && y.shape[0] == 3 && y.shape[1] == 2);
    float want_y[6] = {2, 3, (10 + 10 + 2) / 3.0f, (11 + 11 + 3) / 3.0f, 0, 0};
    for (int i = 0; i < 6; i++)
        EXPECT(fabsf(y.data[i] - want_y[i]) < 1e-6f);
    float dy_data[6] = {1, 2, 3, 6, 7, 7};
    dt_tensor dy = dt_tensor_view(dy_data, 2, (int64_t[]){3, 2});
    EXPECT_STATUS(l->ops->backward(l, &ctx, &dy, &dx, false), DT_OK);
    const float *G = dt_params_grads(p);
    float want_g[12] = {0.5f, 1, 1, 2, 0.5f, 1, 0, 0, 0, 0, 2, 4};
    for (int i = 0; i < 12; i++)
        EXPECT(fabsf(G[i] - want_g[i]) < 1e-6f);
    const int64_t *rows;
    EXPECT_EQ(dt_param_touched_rows(p, 0, &rows), 4); /* 0, 1, 2, 5 */
    EXPECT(rows && rows[0] == 0 && rows[1] == 1 && rows[2] == 2 && rows[3] == 5);
    float bad[2] = {6, -1}, frac[2] = {1.5f, -1}, neg[2] = {-2, 0};
    dt_tensor b1 = dt_tensor_view(bad, 2, (int64_t[]){1, 2}), b2 = dt_tensor_view(frac, 2, (int64_t[]){1, 2}),
              b3 = dt_tensor_view(neg, 2, (int64_t[]){1, 2});
    EXPECT_STATUS(l->ops->forward(l, &ctx, &b1, &y), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "bag 0");
    EXPECT_STATUS(l->ops->forward(l, &ctx, &b2, &y), DT_ERR_INVALID);
    EXPECT_STATUS(l->ops->forward(l, &ctx, &b3, &y), DT_ERR_INVALID);
    EXPECT_EQ(dt_ctx_saved_depth(&ctx), 0);
    dt_arena_destroy(arena);
    dt_layer_destroy(l);
    dt_params_destroy(p);
}

/* A batch big enough to be split across threads (1024 bags of up to 64
 * ids, dim 32): the output and the table's gradient have the same bits on
 * 1 and 2 threads. */
static void test_embedding_bag_threads(void)
{
    enum { BAGS = 1024, WIDTH = 64, ROWS = 5000, DIM = 32 };
    float *x = malloc(sizeof(float) * BAGS * WIDTH), *dy = malloc(sizeof(float) * BAGS * DIM);
    float *out[2], *grad[2];
    dt_rng r;
    dt_rng_seed(&r, 11);
    for (int i = 0; i < BAGS * WIDTH; i++)
        x[i] = dt_rng_next(&r) % 4 == 0 ? -1.0f : (float)(dt_rng_next(&r) % ROWS);
    for (int i = 0; i < BAGS * DIM; i++)
        dy[i] = dt_rng_normal(&r);
    for (int t = 0; t < 2; t++) {
        dt_set_threads(t + 1);
        dt_params *p;
        dt_layer *l;
        dt_arena *arena;
        EXPECT_STATUS(dt_params_create(&p), DT_OK);
        EXPECT_STATUS(dt_embedding_bag_create(p, "bag", ROWS, DIM, &l), DT_OK);
        EXPECT_STATUS(dt_params_finalize(p), DT_OK);
        l->ops->init(l, p, 9);
        dt_arena_create(&arena);
        dt_ctx ctx = {.arena = arena, .params = p, .training = true};
        dt_tensor in = dt_tensor_view(x, 2, (int64_t[]){BAGS, WIDTH}), y, dx;
        dt_tensor g = dt_tensor_view(dy, 2, (int64_t[]){BAGS, DIM});
        EXPECT_STATUS(l->ops->forward(l, &ctx, &in, &y), DT_OK);
        out[t] = malloc(sizeof(float) * BAGS * DIM);
        memcpy(out[t], y.data, sizeof(float) * BAGS * DIM);
        EXPECT_STATUS(l->ops->backward(l, &ctx, &g, &dx, false), DT_OK);
        grad[t] = malloc(sizeof(float) * ROWS * DIM);
        memcpy(grad[t], dt_params_grads(p), sizeof(float) * ROWS * DIM);
        dt_arena_destroy(arena);
        dt_layer_destroy(l);
        dt_params_destroy(p);
    }
    EXPECT(memcmp(out[0], out[1], sizeof(float) * BAGS * DIM) == 0);
    EXPECT(memcmp(grad[0], grad[1], sizeof(float) * ROWS * DIM) == 0);
    for (int t = 0; t < 2; t++) {
        free(out[t]);
        free(grad[t]);
    }
    free(x);
    free(dy);
    dt_set_threads(2);
}

/* Random sparse gradients on a registry [dense 7] [table 300 x 8, row-sparse]
 * [dense 5 x 3]: dt_params_optimizer_step (touched rows only) against
 * dt_optimizer_step over everything, from the same values: the same bits. */
static void sparse_vs_dense(const char *what, dt_status (*make)(int64_t, dt_optimizer **), bool expect_rows,
                            float scale, float clip)
{
    dt_params *p[2];
    int t = 0, idx;
    for (int k = 0; k < 2; k++) {
        EXPECT_STATUS(dt_params_create(&p[k]), DT_OK);
        EXPECT_STATUS(dt_params_add(p[k], "pre", 1, (int64_t[]){7}, &idx), DT_OK);
        EXPECT_STATUS(dt_params_add(p[k], "table", 2, (int64_t[]){300, 8}, &t), DT_OK);
        EXPECT_STATUS(dt_params_add(p[k], "post", 2, (int64_t[]){5, 3}, &idx), DT_OK);
        EXPECT_STATUS(dt_param_set_row_sparse(p[k], t), DT_OK);
        EXPECT_STATUS(dt_params_finalize(p[k]), DT_OK);
    }
    int64_t n = dt_params_numel(p[0]);
    dt_optimizer *o[2];
    EXPECT_STATUS(make(n, &o[0]), DT_OK);
    EXPECT_STATUS(make(n, &o[1]), DT_OK);
    EXPECT(dt_optimizer_rows_exact(o[0], 7, 2400) == expect_rows);
    dt_rng r;
    dt_rng_seed(&r, 5);
    for (int64_t i = 0; i < n; i++)
        dt_params_values(p[0])[i] = dt_params_values(p[1])[i] = dt_rng_normal(&r);
    float norms[2] = {0, 0};
    for (int step = 0; step < 6; step++) {
        int64_t rows[20];
        for (int i = 0; i < 20; i++)
            rows[i] = (int64_t)(dt_rng_next(&r) % 300);
        for (int k = 0; k < 2; k++)
            dt_params_zero_grads(p[k]);
        for (int k = 0; k < 2; k++)
            EXPECT_STATUS(dt_param_touch_rows(p[k], t, rows, 20), DT_OK);
        for (int i = 0; i < 20; i++)
            for (int j = 0; j < 8; j++) {
                float v = dt_rng_normal(&r);
                dt_param_grad(p[0], t)[rows[i] * 8 + j] += v;
                dt_param_grad(p[1], t)[rows[i] * 8 + j] += v;
            }
        for (int i = 0; i < 7; i++)
            dt_params_grads(p[0])[i] = dt_params_grads(p[1])[i] = dt_rng_normal(&r);
        for (int i = 2407; i < n; i++)
            dt_params_grads(p[0])[i] = dt_params_grads(p[1])[i] = dt_rng_normal(&r);
        EXPECT_STATUS(dt_params_optimizer_step(p[0], o[0], 0.1f, scale, clip, &norms[0]), DT_OK);
        /* the dense reference: the whole buffers */
        float *g = dt_params_grads(p[1]);
        if (scale != 1)
            dt_vec_scale(g, scale, n);
        norms[1] = dt_clip_grad_norm(g, n, clip);
        EXPECT_STATUS(dt_optimizer_step(o[1], dt_params_values(p[1]), g, n, 0.1f), DT_OK);
        EXPECT(fabsf(norms[0] - norms[1]) <= 1e-6f * norms[1]);
    }
    bool same = memcmp(dt_params_values(p[0]), dt_params_values(p[1]), (size_t)n * sizeof(float)) == 0;
    int64_t count[2];
    float *s0 = dt_optimizer_state(o[0], &count[0]), *s1 = dt_optimizer_state(o[1], &count[1]);
    same =
        same && count[0] == count[1] && (!count[0] || memcmp(s0, s1, (size_t)count[0] * sizeof(float)) == 0);
    printf("%s: row-only update (%s) and dense update after 6 steps: %s\n", what,
           expect_rows ? "used" : "not exact: dense", same ? "the same bits" : "DIFFERENT");
    EXPECT(same);
    for (int k = 0; k < 2; k++) {
        dt_optimizer_destroy(o[k]);
        dt_params_destroy(p[k]);
    }
}

static dt_status make_adagrad(int64_t n, dt_optimizer **o)
{
    return dt_adagrad_create(&(dt_adagrad_config){.lr_decay = 0.01f, .eps = 1e-10f}, n, o);
}
static dt_status make_adagrad_init(int64_t n, dt_optimizer **o)
{
    return dt_adagrad_create(&(dt_adagrad_config){.initial_accumulator_value = 0.1f, .eps = 1e-10f}, n, o);
}
static dt_status make_adagrad_decay(int64_t n, dt_optimizer **o)
{
    return dt_adagrad_create(&(dt_adagrad_config){.weight_decay = 0.01f, .eps = 1e-10f}, n, o);
}
static dt_status make_sgd(int64_t n, dt_optimizer **o)
{
    return dt_sgd_create(&(dt_sgd_config){0}, n, o);
}
static dt_status make_sgd_momentum(int64_t n, dt_optimizer **o)
{
    return dt_sgd_create(&(dt_sgd_config){.momentum = 0.9f}, n, o);
}
static dt_status make_adamw(int64_t n, dt_optimizer **o)
{
    return dt_adamw_create(&(dt_adamw_config){0.9f, 0.999f, 1e-8f, 0}, n, o);
}

static void test_sparse_updates(void)
{
    sparse_vs_dense("adagrad (lr_decay 0.01)", make_adagrad, true, 1, 0);
    sparse_vs_dense("adagrad (initial accumulator 0.1), grad scale 0.5", make_adagrad_init, true, 0.5f, 0);
    sparse_vs_dense("sgd", make_sgd, true, 1, 0);
    sparse_vs_dense("sgd, clipped to 1", make_sgd, true, 1, 1.0f);
    sparse_vs_dense("adagrad with weight decay", make_adagrad_decay, false, 1, 0);
    sparse_vs_dense("sgd with momentum", make_sgd_momentum, false, 1, 0);
    sparse_vs_dense("adamw", make_adamw, false, 1, 0);
    /* the row update refuses what is not exact */
    dt_optimizer *o;
    float pv[8] = {0}, gv[8] = {0};
    EXPECT_STATUS(make_adamw(8, &o), DT_OK);
    EXPECT_STATUS(dt_optimizer_update_rows(o, pv, gv, 0, 4, (int64_t[]){1}, 1, 2, 0.1f), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "Adagrad without weight decay");
    dt_optimizer_destroy(o);
    EXPECT_STATUS(make_adagrad(8, &o), DT_OK);
    EXPECT_STATUS(dt_optimizer_update_rows(o, pv, gv, 0, 4, (int64_t[]){2}, 1, 2, 0.1f), DT_ERR_INVALID);
    dt_optim_state st[2];
    EXPECT_EQ(dt_optimizer_state_buffers(o, st, 2), 1);
    EXPECT(!strcmp(st[0].name, "sum") && st[0].numel == 8);
    dt_optimizer_destroy(o);
    dt_adagrad_config bad = {.eps = 0};
    EXPECT_STATUS(dt_adagrad_create(&bad, 8, &o), DT_ERR_INVALID);
}

/* The .dat index's string count (a big-endian uint32 after the version). */
static long dat_count(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.dat", dir, name);
    FILE *f = fopen(path, "rb");
    unsigned char h[8];
    long n = -1;
    if (f && fread(h, 1, 8, f) == 8)
        n = (long)h[4] << 24 | (long)h[5] << 16 | (long)h[6] << 8 | h[7];
    if (f)
        fclose(f);
    return n;
}

static void test_fortunes(bool *skipped)
{
    /* features of a fixed text, computed independently (Python's FNV-1a) */
    const char *text = "Hello, World! hello_b\xc3\xa9";
    float out[10];
    EXPECT_EQ(dt_text_features(text, (int64_t)strlen(text), 1000, out, 10), 7);
    float want[10] = {491, 875, 743, 491, 151, 537, 693, -1, -1, -1};
    for (int i = 0; i < 10; i++)
        EXPECT(out[i] == want[i]);
    EXPECT_EQ(dt_text_features(text, (int64_t)strlen(text), 1000, out, 3), 7); /* cut after 3 */
    EXPECT(out[0] == 491 && out[1] == 875 && out[2] == 743);
    EXPECT_EQ(dt_text_features("  ,. ", 5, 1000, out, 2), 0);
    EXPECT(out[0] == -1 && out[1] == -1);

    dt_fortunes f, g;
    if (dt_fortunes_load(DT_FORTUNES_DIR, &f) != DT_OK) {
        printf("skipping the data set: %s\n", dt_last_error());
        *skipped = true;
        return;
    }
    EXPECT_EQ(f.classes, 43);
    EXPECT(!strcmp(f.names[0], "art") && !strcmp(f.names[2], "computers") && !strcmp(f.names[42], "zippy"));
    int64_t *per = calloc((size_t)f.classes, sizeof *per);
    for (int64_t i = 0; i < f.count; i++)
        per[f.label[i]]++;
    int mismatched = 0;
    for (int c = 0; c < f.classes; c++) {
        long want_n = dat_count(DT_FORTUNES_DIR, f.names[c]);
        if (want_n != per[c]) {
            mismatched++;
            fprintf(stderr, "category %s: %lld fortunes, its .dat index says %ld\n", f.names[c],
                    (long long)per[c], want_n);
        }
    }
    EXPECT_EQ(mismatched, 0);
    printf(
        "fortunes: %d categories, %lld examples (art %lld, computers %lld, people %lld), %lld training, %lld "
        "held out\n",
        f.classes, (long long)f.count, (long long)per[0], (long long)per[2], (long long)per[27],
        (long long)f.split_count[0], (long long)f.split_count[1]);
    EXPECT(!strcmp(f.names[27], "people"));
    free(per);
    EXPECT_EQ(f.split_count[0] + f.split_count[1], f.count);
    double held = (double)f.split_count[1] / (double)f.count;
    EXPECT(held > 0.08 && held < 0.12);
    /* deterministic: a second load splits the same way */
    EXPECT_STATUS(dt_fortunes_load(DT_FORTUNES_DIR, &g), DT_OK);
    EXPECT(g.count == f.count && g.split_count[1] == f.split_count[1] &&
           memcmp(g.split[1], f.split[1], (size_t)f.split_count[1] * sizeof(int64_t)) == 0);
    dt_fortunes_free(&g);
    /* the first fortune of art, as the file has it, and its features */
    int64_t e0 = f.start[0], len0 = f.start[1] - f.start[0];
    EXPECT(f.label[0] == 0 && len0 > 10 && f.text[e0 + len0 - 1] != '\n');
    int split = -1;
    int64_t at = -1;
    for (int k = 0; k < 2; k++)
        for (int64_t i = 0; i < f.split_count[k]; i++)
            if (f.split[k][i] == 0) {
                split = k;
                at = i;
            }
    EXPECT(split >= 0);
    float x[64], y_ref[64];
    int32_t y;
    dt_fortunes_batch(&f, split, &at, 1, 1 << 20, 64, x, &y);
    dt_text_features(f.text + e0, len0, 1 << 20, y_ref, 64);
    EXPECT(y == 0 && memcmp(x, y_ref, sizeof x) == 0 && x[0] >= 0);
    dt_fortunes_free(&f);
    EXPECT_STATUS(dt_fortunes_load("/nonexistent-fortunes", &f), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "/nonexistent-fortunes");
}

/* A few textclf steps through the single strategy: the loss falls, only
 * the batch's rows of the table change, and the rest keep their bits. */
typedef struct {
    float x[8 * 16];
    int32_t y[8];
} batch;

static dt_status next(void *user, dt_micro_batch *mb)
{
    batch *b = user;
    mb->x = dt_tensor_view(b->x, 2, (int64_t[]){8, 16});
    mb->targets = b->y;
    mb->ntargets = 8;
    return DT_OK;
}

static void test_textclf_steps(void)
{
    dt_textclf_config cfg = {4096, 8, 3};
    dt_model *m;
    EXPECT_STATUS(dt_textclf_create(&cfg, &m), DT_OK);
    dt_model_init(m, 3);
    dt_params *p = dt_model_params(m);
    EXPECT_EQ(dt_params_count(p), 3);
    EXPECT(!strcmp(dt_params_info(p, 0)->name, "embedding.weight") && dt_params_info(p, 0)->row_sparse);
    EXPECT(!strcmp(dt_params_info(p, 1)->name, "fc.weight") &&
           !strcmp(dt_params_info(p, 2)->name, "fc.bias"));
    int64_t n = dt_params_numel(p);
    float *before = malloc((size_t)n * sizeof *before);
    dt_vec_copy(before, dt_params_values(p), n);
    dt_optimizer *o;
    EXPECT_STATUS(dt_adagrad_create(&(dt_adagrad_config){.eps = 1e-10f}, n, &o), DT_OK);
    dt_strategy *s;
    EXPECT_STATUS(dt_strategy_single_create(m, o, &(dt_strategy_config){.micro_batches = 1}, &s), DT_OK);
    batch b;
    const char *texts[8] = {"the cat sat", "a cat ran",       "cats and cats", "the cat",
                            "stocks fell", "the market fell", "stocks rose",   "markets and stocks"};
    for (int i = 0; i < 8; i++) {
        dt_text_features(texts[i], (int64_t)strlen(texts[i]), 4096, b.x + i * 16, 16);
        b.y[i] = i < 4 ? 0 : 1;
    }
    float first = 0, last = 0;
    for (int step = 0; step < 20; step++) {
        dt_step_stats st;
        EXPECT_STATUS(dt_strategy_step(s, step, 0.5f, next, &b, &st), DT_OK);
        first = step == 0 ? st.loss : first;
        last = st.loss;
    }
    printf("textclf on 8 phrases: loss %.4f -> %.4f in 20 Adagrad steps\n", first, last);
    EXPECT(last < 0.5f * first);
    bool *used = calloc(4096, sizeof *used);
    for (int i = 0; i < 8 * 16; i++)
        if (b.x[i] >= 0)
            used[(int)b.x[i]] = true;
    int changed_unused = 0, changed_used = 0;
    for (int r = 0; r < 4096; r++) {
        bool diff = memcmp(before + r * 8, dt_params_values(p) + r * 8, 8 * sizeof(float)) != 0;
        changed_unused += diff && !used[r];
        changed_used += diff && used[r];
    }
    EXPECT_EQ(changed_unused, 0);
    EXPECT(changed_used > 10);
    free(used);
    free(before);
    dt_strategy_destroy(s);
    dt_optimizer_destroy(o);
    dt_model_destroy(m);
}

int main(void)
{
    dt_set_threads(2);
    bool skipped = false;
    test_bookkeeping();
    test_zeroing_cost();
    test_embedding_bag();
    test_embedding_bag_threads();
    test_sparse_updates();
    test_fortunes(&skipped);
    test_textclf_steps();
    return CHECK_DONE("test_textclf");
}
