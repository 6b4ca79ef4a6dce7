/* The execution runtime the parallel strategies build on: several
 * micro-batches in flight on their own contexts, recomputation, keyed
 * dropout, models instantiated as stages, cost hints and arena marks.
 * Every comparison is to the bit unless it says otherwise. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtrain/nn.h"
#include "dtrain/optim.h"
#include "dtrain/comm.h"
#include "dtrain/data.h"
#include "dtrain/parallel.h"

static const dt_gpt_config tiny = {.vocab = 13, .context = 8, .layers = 3, .heads = 2, .dim = 16, .dropout = 0.1f};
enum { B = 3, T = 8 };

static void make_batch(uint64_t seed, float *ids, int32_t *targets)
{
    dt_rng r;
    dt_rng_seed(&r, seed);
    for (int i = 0; i < B * T; i++) {
        ids[i] = (float)(dt_rng_next(&r) % 13);
        targets[i] = (int32_t)(dt_rng_next(&r) % 13);
    }
}

static int bits_differ(const float *a, const float *b, int64_t n)
{
    return memcmp(a, b, (size_t)n * sizeof *a) != 0;
}

/* Forward and loss on ctx; the loss gradient is left in *g (in ctx's arena). */
static float forward_loss(dt_model *m, dt_ctx *ctx, const float *ids, const int32_t *t, dt_tensor *g)
{
    dt_tensor x = dt_tensor_view((float *)ids, 2, (int64_t[]){B, T}), y;
    EXPECT_STATUS(dt_model_forward(m, ctx, &x, &y), DT_OK);
    *g = y;
    g->data = dt_arena_alloc(ctx->arena, dt_tensor_numel(&y));
    float loss = NAN;
    EXPECT_STATUS(dt_softmax_cross_entropy(&y, t, &loss, g), DT_OK);
    return loss;
}

/* Forward A, forward B, backward B, backward A on two contexts sharing an
 * arena, against B then A one after the other. */
static void test_two_in_flight(void)
{
    dt_model *m;
    EXPECT_STATUS(dt_gpt_create(&tiny, &m), DT_OK);
    dt_model_init(m, 7);
    dt_params *p = dt_model_params(m);
    int64_t n = dt_params_numel(p);
    float ids[2][B * T];
    int32_t t[2][B * T];
    make_batch(1, ids[0], t[0]);
    make_batch(2, ids[1], t[1]);
    dt_arena *arena;
    dt_arena_create(&arena);

    dt_params_zero_grads(p);
    dt_ctx a = {.arena = arena, .key = {.seed = 5, .micro = 0}, .training = true};
    dt_ctx b = {.arena = arena, .key = {.seed = 5, .micro = 1}, .training = true};
    dt_tensor ga, gb;
    float la = forward_loss(m, &a, ids[0], t[0], &ga);
    float lb = forward_loss(m, &b, ids[1], t[1], &gb);
    EXPECT(dt_ctx_saved_depth(&a) > 0 && dt_ctx_saved_depth(&a) == dt_ctx_saved_depth(&b));
    EXPECT_STATUS(dt_model_backward(m, &b, &gb), DT_OK);
    EXPECT_STATUS(dt_model_backward(m, &a, &ga), DT_OK);
    EXPECT_EQ(dt_ctx_saved_depth(&a) + dt_ctx_saved_depth(&b), 0);
    float *interleaved = malloc((size_t)n * sizeof(float));
    memcpy(interleaved, dt_params_grads(p), (size_t)n * sizeof(float));

    dt_params_zero_grads(p);
    float l2[2];
    for (int k = 1; k >= 0; k--) {
        dt_arena_reset(arena);
        dt_ctx c = {.arena = arena, .key = {.seed = 5, .micro = (uint32_t)k}, .training = true};
        dt_tensor g;
        l2[k] = forward_loss(m, &c, ids[k], t[k], &g);
        EXPECT_STATUS(dt_model_backward(m, &c, &g), DT_OK);
    }
    EXPECT(la == l2[0] && lb == l2[1]);
    EXPECT(!bits_differ(interleaved, dt_params_grads(p), n));

    /* a backward run on the wrong context is refused, naming both layers */
    dt_ctx c = {.arena = arena, .key = {.seed = 5}, .training = true};
    dt_tensor g;
    forward_loss(m, &c, ids[0], t[0], &g);
    dt_ctx empty = {.arena = arena, .training = true};
    EXPECT_STATUS(dt_model_backward(m, &empty, &g), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "lm_head");
    free(interleaved);
    dt_arena_destroy(arena);
    dt_model_destroy(m);
}

/* 20 AdamW steps with dropout 0.1, with and without recomputing every
 * transformer block: the same losses, every step's gradients and the final
 * weights to the bit, a lower peak.  grads holds 20 x n floats. */
/* Gradient-ready events heard per parameter (copies: each once per backward). */
static dt_status count_ready(void *user, int index)
{
    ((int *)user)[index]++;
    return DT_OK;
}

static void run_steps_copies(bool recompute, int copies, float *losses, float *grads, float *final, size_t *peak)
{
    dt_model *m;
    EXPECT_STATUS(dt_gpt_create(&tiny, &m), DT_OK);
    dt_model_init(m, 3);
    for (int i = 1; recompute && i <= tiny.layers; i++)
        EXPECT_STATUS(dt_model_set_recompute(m, i, true), DT_OK);
    for (int i = 1; copies > 1 && i <= tiny.layers; i++)
        EXPECT_STATUS(dt_model_set_copies(m, i, copies), DT_OK);
    dt_params *p = dt_model_params(m);
    int heard[64] = {0};
    EXPECT(dt_params_count(p) <= 64);
    dt_subscription sub = 0;
    EXPECT_STATUS(dt_params_subscribe_grad_ready(p, count_ready, heard, &sub), DT_OK);
    int64_t n = dt_params_numel(p);
    dt_optimizer *o;
    EXPECT_STATUS(dt_adamw_create(&(dt_adamw_config){0.9f, 0.95f, 1e-8f, 0.1f}, n, &o), DT_OK);
    dt_arena *arena;
    dt_arena_create(&arena);
    *peak = 0;
    for (int step = 0; step < 20; step++) {
        float ids[B * T];
        int32_t t[B * T];
        make_batch(100 + (uint64_t)step, ids, t);
        dt_params_zero_grads(p);
        dt_arena_reset(arena);
        dt_ctx c = {.arena = arena, .key = {.seed = 9, .step = (uint64_t)step}, .training = true};
        dt_tensor g;
        dt_arena_reset_peak(arena);
        losses[step] = forward_loss(m, &c, ids, t, &g);
        EXPECT_STATUS(dt_model_backward(m, &c, &g), DT_OK);
        for (int i = 0; i < dt_params_count(p); i++, check_count++)
            if (heard[i] != step + 1) {
                check_failures++;
                fprintf(stderr, "copies %d: parameter %d heard %d times in %d backwards\n", copies, i, heard[i], step + 1);
            }
        memcpy(grads + step * n, dt_params_grads(p), (size_t)n * sizeof(float));
        *peak = dt_arena_peak_bytes(arena) > *peak ? dt_arena_peak_bytes(arena) : *peak;
        EXPECT_STATUS(dt_optimizer_step(o, dt_params_values(p), dt_params_grads(p), n, 1e-2f), DT_OK);
    }
    memcpy(final, dt_params_values(p), (size_t)n * sizeof(float));
    dt_params_unsubscribe(p, sub);
    dt_optimizer_destroy(o);
    dt_arena_destroy(arena);
    dt_model_destroy(m);
}

static void test_recompute(void)
{
    dt_model *m;
    dt_gpt_create(&tiny, &m);
    int64_t n = dt_params_numel(dt_model_params(m));
    dt_model_destroy(m);
    float l0[20], l1[20];
    float *w0 = malloc((size_t)n * sizeof(float)), *w1 = malloc((size_t)n * sizeof(float));
    float *g0 = malloc((size_t)(20 * n) * sizeof(float)), *g1 = malloc((size_t)(20 * n) * sizeof(float));
    size_t peak0, peak1;
    run_steps_copies(false, 1, l0, g0, w0, &peak0);
    run_steps_copies(true, 1, l1, g1, w1, &peak1);
    EXPECT(!bits_differ(l0, l1, 20));
    for (int step = 0; step < 20; step++, check_count++)
        if (bits_differ(g0 + step * n, g1 + step * n, n)) {
            check_failures++;
            fprintf(stderr, "recompute: step %d's gradients differ from those without recomputation\n", step);
        }
    EXPECT(!bits_differ(w0, w1, n));
    EXPECT(l1[19] < l1[0]); /* it trains */
    /* the step's peak: the blocks' outputs and one block's activations at a
     * time instead of every block's */
    EXPECT(peak1 * 10 < peak0 * 7);
    printf("recompute: a step's activation peak is %zu bytes instead of %zu\n", peak1, peak0);
    free(w0);
    free(w1);
    free(g0);
    free(g1);
}

/* Issue 50: the transformer blocks run as copies of their rows (B = 3: 2
 * copies of 1 and 2 rows, 3 of one each), alone and with recomputation,
 * against the whole blocks over 20 AdamW steps with dropout 0.1: the same
 * losses to 1e-6 relative (dropout's masks are the whole batch's: else they
 * differ at once), every step's gradients within 1e-5 of the largest, each
 * parameter's gradient-ready event heard once per backward. */
static void test_copies(void)
{
    dt_model *m;
    dt_gpt_create(&tiny, &m);
    int64_t n = dt_params_numel(dt_model_params(m));
    dt_model_destroy(m);
    float l0[20], l1[20];
    float *w0 = malloc((size_t)n * sizeof(float)), *w1 = malloc((size_t)n * sizeof(float));
    float *g0 = malloc((size_t)(20 * n) * sizeof(float)), *g1 = malloc((size_t)(20 * n) * sizeof(float));
    size_t peak0, peak1;
    run_steps_copies(false, 1, l0, g0, w0, &peak0);
    const struct {
        bool recompute;
        int copies;
    } runs[] = {{false, 2}, {false, 3}, {true, 2}};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        run_steps_copies(runs[r].recompute, runs[r].copies, l1, g1, w1, &peak1);
        double worst = 0, gworst = 0;
        for (int step = 0; step < 20; step++) {
            double d = fabs((double)l1[step] - l0[step]) / fabs((double)l0[step]);
            worst = d > worst ? d : worst;
            float big = 0;
            for (int64_t i = 0; i < n; i++)
                big = fabsf(g0[step * n + i]) > big ? fabsf(g0[step * n + i]) : big;
            for (int64_t i = 0; i < n; i++) {
                double e = fabs((double)g1[step * n + i] - g0[step * n + i]) / big;
                gworst = e > gworst ? e : gworst;
            }
        }
        EXPECT(worst <= 1e-6);
        EXPECT(gworst <= 1e-5);
        printf("copies %d%s: 20 losses within %.2g relative, gradients within %.2g of the largest%s\n", runs[r].copies,
               runs[r].recompute ? " with recompute" : "", worst, gworst,
               bits_differ(l0, l1, 20) ? "" : " (the losses bitwise)");
    }
    free(w0);
    free(w1);
    free(g0);
    free(g1);
}

/* Stages [0, k) and [k, n) one after the other against the whole model. */
static void test_stages(void)
{
    dt_model_desc *d;
    EXPECT_STATUS(dt_gpt_describe(&tiny, &d), DT_OK);
    int nb = dt_model_desc_blocks(d);
    EXPECT_EQ(nb, tiny.layers + 2);
    dt_model *whole, *s0, *s1;
    int k = 2;
    EXPECT_STATUS(dt_model_instantiate(d, 0, nb, &whole), DT_OK);
    EXPECT_STATUS(dt_model_instantiate(d, 0, k, &s0), DT_OK);
    EXPECT_STATUS(dt_model_instantiate(d, k, nb, &s1), DT_OK);
    EXPECT_STATUS(dt_model_instantiate(d, 3, 3, &s1), DT_ERR_INVALID);
    EXPECT_STATUS(dt_model_instantiate(d, 0, nb + 1, &s1), DT_ERR_INVALID);
    dt_model_desc_destroy(d);
    dt_model_init(whole, 4);
    dt_model_init(s0, 4);
    dt_model_init(s1, 4);
    dt_params *pw = dt_model_params(whole), *p0 = dt_model_params(s0), *p1 = dt_model_params(s1);
    EXPECT_EQ(dt_params_numel(p0) + dt_params_numel(p1),
              dt_params_numel(pw) + tiny.vocab * tiny.dim); /* wte is held by both stages */
    int lo, hi;
    dt_model_block_range(s1, &lo, &hi);
    EXPECT(lo == k && hi == nb && dt_model_num_layers(s1) == nb - k);
    EXPECT(strcmp(dt_model_block(s1, hi - lo - 1)->name, "lm_head") == 0);
    const dt_shared_param *sh;
    EXPECT_EQ(dt_model_shared_params(s1, &sh), 1);
    EXPECT(sh[0].first_block == 0 && sh[0].last_block == nb - 1);
    EXPECT(strcmp(dt_params_info(p1, sh[0].param)->name, "transformer.wte.weight") == 0);
    /* the block parameter ranges cover each stage's registry once */
    int covered = 0;
    for (int i = 0; i < dt_model_num_layers(s0); i++) {
        int first, count;
        dt_model_block_params(s0, i, &first, &count);
        EXPECT_EQ(first, covered);
        covered += count;
    }
    EXPECT_EQ(covered, dt_params_count(p0));
    /* every parameter starts with the whole model's bits */
    for (int s = 0; s < 2; s++) {
        dt_params *ps = s ? p1 : p0;
        for (int i = 0; i < dt_params_count(ps); i++) {
            const dt_param_info *pi = dt_params_info(ps, i);
            int j = dt_params_find(pw, pi->name);
            EXPECT(j >= 0 && !bits_differ(dt_param_value(ps, i), dt_param_value(pw, j), pi->numel));
        }
    }
    float ids[B * T];
    int32_t t[B * T];
    make_batch(11, ids, t);
    dt_arena *arena;
    dt_arena_create(&arena);
    dt_rng_key key = {.seed = 2, .step = 1};
    dt_params_zero_grads(pw);
    dt_ctx cw = {.arena = arena, .key = key, .training = true};
    dt_tensor gw;
    float lw = forward_loss(whole, &cw, ids, t, &gw);
    EXPECT_STATUS(dt_model_backward(whole, &cw, &gw), DT_OK);

    dt_arena *a0, *a1;
    dt_arena_create(&a0);
    dt_arena_create(&a1);
    dt_params_zero_grads(p0);
    dt_params_zero_grads(p1);
    dt_ctx c0 = {.arena = a0, .key = key, .training = true}, c1 = {.arena = a1, .key = key, .training = true};
    dt_tensor x = dt_tensor_view(ids, 2, (int64_t[]){B, T}), h, y, dh;
    EXPECT_STATUS(dt_model_forward(s0, &c0, &x, &h), DT_OK);
    EXPECT_STATUS(dt_model_forward(s1, &c1, &h, &y), DT_OK);
    dt_tensor g1 = y;
    g1.data = dt_arena_alloc(a1, dt_tensor_numel(&y));
    float l1 = NAN;
    dt_softmax_cross_entropy(&y, t, &l1, &g1);
    EXPECT(l1 == lw);
    EXPECT_STATUS(dt_model_backward_dx(s1, &c1, &g1, &dh), DT_OK);
    EXPECT_STATUS(dt_model_backward(s0, &c0, &dh), DT_OK);
    for (int s = 0; s < 2; s++) {
        dt_params *ps = s ? p1 : p0;
        for (int i = 0; i < dt_params_count(ps); i++) {
            const dt_param_info *pi = dt_params_info(ps, i);
            if (!strcmp(pi->name, "transformer.wte.weight"))
                continue;
            int j = dt_params_find(pw, pi->name);
            if (bits_differ(dt_param_grad(ps, i), dt_param_grad(pw, j), pi->numel)) {
                check_failures++;
                fprintf(stderr, "stage %d: gradient of %s differs from the whole model's\n", s, pi->name);
            }
            check_count++;
        }
    }
    /* The tied wte: the two stages' copies sum to the whole model's gradient
     * (the order of the additions differs, so to rounding). */
    int w0 = dt_params_find(p0, "transformer.wte.weight"), w1 = dt_params_find(p1, "transformer.wte.weight"),
        ww = dt_params_find(pw, "transformer.wte.weight");
    double worst = 0;
    for (int64_t i = 0; i < tiny.vocab * tiny.dim; i++) {
        double sum = (double)dt_param_grad(p0, w0)[i] + dt_param_grad(p1, w1)[i], want = dt_param_grad(pw, ww)[i];
        worst = fmax(worst, fabs(sum - want) / fmax(1e-3, fabs(want)));
    }
    EXPECT(worst < 1e-5);
    dt_arena_destroy(arena);
    dt_arena_destroy(a0);
    dt_arena_destroy(a1);
    dt_model_destroy(whole);
    dt_model_destroy(s0);
    dt_model_destroy(s1);
}

/* The cost hints of a GPT block against what its forward really keeps. */
static void test_cost_hints(void)
{
    dt_gpt_config c = tiny;
    c.context = 32;
    c.dim = 64;
    c.heads = 4;
    dt_model_desc *d;
    EXPECT_STATUS(dt_gpt_describe(&c, &d), DT_OK);
    const dt_block_info *bi = dt_model_desc_block(d, 1);
    EXPECT(strcmp(bi->kind, "gpt-block") == 0);
    EXPECT_EQ(bi->params, 12 * 64 * 64 + 13 * 64);
    dt_model *blk;
    EXPECT_STATUS(dt_model_instantiate(d, 1, 2, &blk), DT_OK);
    EXPECT_EQ(dt_params_numel(dt_model_params(blk)), bi->params);
    dt_model_init(blk, 1);
    dt_arena *arena;
    dt_arena_create(&arena);
    float *xs = calloc(32 * 64, sizeof(float));
    dt_tensor x = dt_tensor_view(xs, 3, (int64_t[]){1, 32, 64}), y;
    dt_ctx ctx = {.arena = arena, .training = true};
    EXPECT_STATUS(dt_model_forward(blk, &ctx, &x, &y), DT_OK);
    double used = (double)dt_arena_bytes_in_use(arena);
    printf("gpt block: forward keeps %.0f bytes per sample, the hint says %.0f\n", used, bi->act_bytes);
    EXPECT(fabs(used - bi->act_bytes) < 0.1 * bi->act_bytes);
    free(xs);
    dt_arena_destroy(arena);
    dt_model_destroy(blk);
    dt_model_desc_destroy(d);
}

/* Marks nest; a rewind frees exactly what came after; dt_arena_since knows. */
static void test_arena_marks(void)
{
    dt_arena *a;
    dt_arena_create(&a);
    float *first = dt_arena_alloc(a, 100);
    dt_arena_mark m = dt_arena_get_mark(a);
    size_t at_mark = dt_arena_bytes_in_use(a);
    float *second = dt_arena_alloc(a, 1000);
    float *big = dt_arena_alloc(a, 20 << 20); /* a new chunk */
    EXPECT(dt_arena_since(a, m, second) && dt_arena_since(a, m, big) && !dt_arena_since(a, m, first));
    dt_arena_rewind(a, m);
    EXPECT_EQ(dt_arena_bytes_in_use(a), at_mark);
    EXPECT(dt_arena_alloc(a, 1000) == second); /* the same place again */
    dt_arena_destroy(a);
}

/* Companion arenas (issue 50): they count in their owner's bytes and peak,
 * a rewind of the owner to a mark at or below a link rewinds the companion
 * to where it stood at the link (not below a link made before the mark),
 * and a reset of the owner empties them. */
static void test_arena_links(void)
{
    dt_arena *a;
    dt_arena_create(&a);
    dt_arena *c0 = dt_arena_link(a, 0); /* at a's start */
    float *kept = dt_arena_alloc(c0, 1000);
    dt_arena_alloc(a, 10);
    dt_arena_mark m = dt_arena_get_mark(a);
    size_t owner_at_mark = dt_arena_bytes_in_use(a), c0_at_mark = dt_arena_bytes_in_use(c0);
    dt_arena *again = dt_arena_link(a, 0), *c1 = dt_arena_link(a, 1); /* at the mark's position */
    EXPECT(again == c0 && c1 && c1 != c0);
    float *freed = dt_arena_alloc(c0, 5000);
    dt_arena_alloc(c1, 7000);
    EXPECT_EQ(dt_arena_bytes_in_use(a), owner_at_mark + dt_arena_bytes_in_use(c0) - c0_at_mark + dt_arena_bytes_in_use(c1));
    size_t peak = dt_arena_peak_bytes(a);
    EXPECT(peak >= dt_arena_bytes_in_use(a));
    dt_arena_rewind(a, m);
    EXPECT_EQ(dt_arena_bytes_in_use(c0), c0_at_mark); /* back to the link, the first allocation kept */
    EXPECT_EQ(dt_arena_bytes_in_use(c1), 0);
    EXPECT_EQ(dt_arena_bytes_in_use(a), owner_at_mark);
    EXPECT(dt_arena_alloc(c0, 5000) == freed && kept != freed);
    EXPECT_EQ(dt_arena_peak_bytes(a), peak);
    EXPECT(!dt_arena_link(c0, 0) && !dt_arena_link(a, DT_ARENA_COMPANIONS)); /* refused: a companion's, a bad k */
    dt_arena_reset(a);
    EXPECT_EQ(dt_arena_bytes_in_use(c0), 0);
    EXPECT_EQ(dt_arena_bytes_in_use(a), 0);
    dt_arena_destroy(a); /* and its companions */
}

/* Keyed numbers: a pure function of the key, different across fields. */
static void test_keyed_rng(void)
{
    dt_rng_key k = {.seed = 1, .step = 2, .micro = 3, .group = 4};
    uint64_t s = dt_rng_key_stream(&k, 77);
    EXPECT(dt_rng_key_bits(s, 5) == dt_rng_key_bits(dt_rng_key_stream(&k, 77), 5));
    dt_rng_key other[4] = {k, k, k, k};
    other[0].seed++;
    other[1].step++;
    other[2].micro++;
    other[3].group++;
    for (int i = 0; i < 4; i++)
        EXPECT(dt_rng_key_stream(&other[i], 77) != s);
    double mean = 0;
    for (int i = 0; i < 100000; i++)
        mean += dt_rng_key_uniform(s, (uint64_t)i);
    mean /= 100000;
    EXPECT(fabs(mean - 0.5) < 0.01);
}

/* Decay groups from names; the optimizer refuses bad groups; group clipping
 * on one rank is torch's clip_grad_norm_. */
static void test_param_groups(void)
{
    dt_model *m;
    dt_gpt_create(&tiny, &m);
    dt_params *p = dt_model_params(m);
    int64_t n = dt_params_numel(p);
    dt_optim_group *g;
    int count;
    EXPECT_STATUS(dt_decay_groups(p, NULL, 0.1f, 0, n, &g, &count), DT_OK);
    int64_t covered = 0, decayed = 0;
    for (int i = 0; i < count; i++) {
        EXPECT_EQ(g[i].offset, covered);
        covered += g[i].numel;
        decayed += g[i].weight_decay > 0 ? g[i].numel : 0;
        EXPECT(i == 0 || g[i].weight_decay != g[i - 1].weight_decay); /* neighbours merged */
    }
    EXPECT_EQ(covered, n);
    EXPECT_EQ(decayed, tiny.layers * 12 * tiny.dim * tiny.dim); /* the matrices of the blocks only */
    const dt_param_info *wte = dt_params_info(p, dt_params_find(p, "transformer.wte.weight"));
    EXPECT(dt_param_no_decay(wte, NULL) && !dt_param_no_decay(wte, "none"));
    free(g);
    /* a shard in the middle of a parameter */
    EXPECT_STATUS(dt_decay_groups(p, NULL, 0.1f, 5, 10, &g, &count), DT_OK);
    EXPECT(count == 1 && g[0].offset == 0 && g[0].numel == 10 && g[0].weight_decay == 0);
    free(g);
    EXPECT_STATUS(dt_decay_groups(p, NULL, 0.1f, n - 1, 2, &g, &count), DT_ERR_INVALID);
    dt_optimizer *o;
    dt_adamw_create(&(dt_adamw_config){0.9f, 0.95f, 1e-8f, 0.1f}, 100, &o);
    EXPECT_STATUS(dt_optimizer_set_groups(o, (dt_optim_group[]){{0, 60, 0}, {50, 10, 0}}, 2), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "overlaps");
    EXPECT_STATUS(dt_optimizer_set_groups(o, (dt_optim_group[]){{90, 20, 0}}, 1), DT_ERR_INVALID);
    EXPECT_STATUS(dt_optimizer_set_groups(o, (dt_optim_group[]){{0, 10, -1}}, 1), DT_ERR_INVALID);
    dt_optim_state st[4];
    EXPECT_EQ(dt_optimizer_state_buffers(o, st, 4), 2);
    EXPECT(!strcmp(st[0].name, "exp_avg") && !strcmp(st[1].name, "exp_avg_sq") && st[1].numel == 100);
    dt_optimizer_destroy(o);
    float a[3] = {3, 4, 0}, b[3] = {3, 4, 0}, norm;
    EXPECT_STATUS(dt_clip_grad_norm_group(a, 3, 2.0f, NULL, &norm), DT_OK);
    EXPECT(norm == dt_clip_grad_norm(b, 3, 2.0f) && !bits_differ(a, b, 3));
    dt_model_destroy(m);
}

/* ZeRO-3's shape on the hooks: a shard-only model whose hooks gather each
 * block's parameters from a master copy before the block runs and free
 * them after, with recomputation on one block: the hooks fire in order and
 * the gradients equal the ordinary model's to the bit. */
typedef struct {
    dt_model *m;
    const float *master;
    float *grads;
    int keep; /* a parameter gathered for the whole step (the tied wte) */
    char order[64];
    int n;
} gather_state;

static void bind_range(gather_state *g, int first, int count, bool on)
{
    dt_params *p = dt_model_params(g->m);
    for (int k = first; k < first + count; k++) {
        const dt_param_info *pi = dt_params_info(p, k);
        if (k == g->keep && count > 1)
            continue;
        if (!on) {
            free(dt_param_value(p, k));
            dt_param_bind(p, k, NULL, NULL);
            continue;
        }
        float *v = malloc((size_t)pi->numel * sizeof(float));
        memcpy(v, g->master + pi->offset, (size_t)pi->numel * sizeof(float));
        dt_param_bind(p, k, v, g->grads + pi->offset);
    }
}

static dt_status gather_hook(void *user, dt_hook_point at, int block, dt_ctx *ctx)
{
    (void)ctx;
    gather_state *g = user;
    if (g->n < 62)
        g->order[g->n++] = (char)("FfBb"[at]), g->order[g->n++] = (char)('0' + block);
    int first, count;
    dt_model_block_params(g->m, block, &first, &count);
    bind_range(g, first, count, at == DT_BEFORE_FORWARD || at == DT_BEFORE_BACKWARD);
    return DT_OK;
}

static void test_hooks_shard_only(void)
{
    dt_model_desc *d;
    dt_gpt_describe(&tiny, &d);
    int nb = dt_model_desc_blocks(d);
    dt_model *ref, *sharded;
    EXPECT_STATUS(dt_model_instantiate(d, 0, nb, &ref), DT_OK);
    EXPECT_STATUS(dt_model_instantiate_external(d, 0, nb, NULL, NULL, &sharded), DT_OK);
    dt_model_desc_destroy(d);
    dt_model_init(ref, 6);
    dt_params *pr = dt_model_params(ref), *ps = dt_model_params(sharded);
    int64_t n = dt_params_numel(pr);
    EXPECT(dt_params_values(ps) == NULL && dt_params_numel(ps) == n);
    float ids[B * T];
    int32_t t[B * T];
    make_batch(21, ids, t);
    dt_arena *arena;
    dt_arena_create(&arena);
    dt_params_zero_grads(pr);
    dt_ctx c = {.arena = arena, .key = {.seed = 1}, .training = true};
    dt_tensor g;
    float lr = forward_loss(ref, &c, ids, t, &g);
    EXPECT_STATUS(dt_model_backward(ref, &c, &g), DT_OK);

    /* without hooks the first block is refused, naming the parameter */
    dt_arena_reset(arena);
    dt_ctx c0 = {.arena = arena, .training = true};
    dt_tensor x = dt_tensor_view(ids, 2, (int64_t[]){B, T}), y;
    EXPECT_STATUS(dt_model_forward(sharded, &c0, &x, &y), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "transformer.wte.weight has no storage");

    gather_state gs = {.m = sharded, .master = dt_params_values(pr), .grads = calloc((size_t)n, sizeof(float))};
    /* the tied wte is used by the head too: it stays gathered for the step */
    int wte = dt_params_find(ps, "transformer.wte.weight");
    gs.keep = wte;
    dt_model_set_hooks(sharded, gather_hook, &gs);
    EXPECT_STATUS(dt_model_set_recompute(sharded, 2, true), DT_OK);
    dt_arena_reset(arena);
    dt_ctx c1 = {.arena = arena, .key = {.seed = 1}, .training = true};
    bind_range(&gs, wte, 1, true);
    float ls = forward_loss(sharded, &c1, ids, t, &g);
    EXPECT_STATUS(dt_model_backward(sharded, &c1, &g), DT_OK);
    bind_range(&gs, wte, 1, false);
    EXPECT(ls == lr);
    EXPECT(!bits_differ(gs.grads, dt_params_grads(pr), n));
    gs.order[gs.n] = 0;
    EXPECT(strcmp(gs.order, "F0f0F1f1F2f2F3f3F4f4B4b4B3b3B2b2B1b1B0b0") == 0);
    printf("hooks: %s\n", gs.order);
    free(gs.grads);
    dt_arena_destroy(arena);
    dt_model_destroy(ref);
    dt_model_destroy(sharded);
}

/* The strategies own the step: single-process and data parallel on one
 * rank, both with two micro-batches, give the same weights to the bit, with
 * and without clipping, and the hand-written loop's. */
typedef struct {
    float ids[B * T];
    int32_t t[B * T];
    int calls;
} feeder;

static dt_status feed(void *user, dt_micro_batch *mb)
{
    feeder *f = user;
    make_batch(500 + (uint64_t)f->calls++, f->ids, f->t);
    mb->x = dt_tensor_view(f->ids, 2, (int64_t[]){B, T});
    mb->targets = f->t;
    return DT_OK;
}

static void train_with(int which, float clip, float *final, int64_t n)
{
    dt_model *m;
    dt_gpt_create(&tiny, &m);
    dt_model_init(m, 8);
    dt_params *p = dt_model_params(m);
    dt_optimizer *o;
    dt_adamw_create(&(dt_adamw_config){0.9f, 0.95f, 1e-8f, 0.1f}, n, &o);
    dt_strategy_config cfg = {.micro_batches = 2, .grad_clip = clip, .seed = 3};
    feeder f = {.calls = 0};
    dt_comm *world = NULL;
    dt_strategy *s = NULL;
    if (which == 0) {
        EXPECT_STATUS(dt_strategy_single_create(m, o, &cfg, &s), DT_OK);
        EXPECT(strcmp(dt_strategy_name(s), "single") == 0);
    } else if (which == 1) {
        EXPECT_STATUS(dt_comm_init_env(&world), DT_OK);
        EXPECT_STATUS(dt_strategy_ddp_create(m, o, world, &cfg, &s), DT_OK);
        EXPECT(strcmp(dt_strategy_name(s), "ddp") == 0);
    }
    dt_arena *arena;
    dt_arena_create(&arena);
    for (int step = 0; step < 3; step++) {
        if (s) {
            dt_step_stats st;
            EXPECT_STATUS(dt_strategy_step(s, step, 1e-2f, feed, &f, &st), DT_OK);
            EXPECT(st.loss > 0 && st.grad_norm > 0);
            continue;
        }
        dt_params_zero_grads(p); /* the loop a trainer wrote before strategies */
        for (int micro = 0; micro < 2; micro++) {
            dt_micro_batch mb;
            feed(&f, &mb);
            dt_arena_reset(arena);
            dt_ctx c = {.arena = arena, .key = {3, (uint64_t)step, (uint32_t)micro, 0}, .training = true};
            dt_tensor g;
            forward_loss(m, &c, f.ids, f.t, &g);
            dt_model_backward(m, &c, &g);
        }
        dt_vec_scale(dt_params_grads(p), 0.5f, n);
        dt_clip_grad_norm(dt_params_grads(p), n, clip);
        dt_optimizer_step(o, dt_params_values(p), dt_params_grads(p), n, 1e-2f);
    }
    memcpy(final, dt_params_values(p), (size_t)n * sizeof(float));
    dt_strategy_destroy(s);
    if (world)
        dt_comm_destroy(world);
    dt_arena_destroy(arena);
    dt_optimizer_destroy(o);
    dt_model_destroy(m);
}

static void test_strategies(void)
{
    dt_model *m;
    dt_gpt_create(&tiny, &m);
    int64_t n = dt_params_numel(dt_model_params(m));
    dt_model_destroy(m);
    float *w[3];
    for (int i = 0; i < 3; i++)
        w[i] = malloc((size_t)n * sizeof(float));
    for (int clip = 0; clip < 2; clip++) {
        for (int i = 0; i < 3; i++)
            train_with(i, clip ? 0.5f : 0.0f, w[i], n);
        EXPECT(!bits_differ(w[0], w[1], n));
        EXPECT(!bits_differ(w[0], w[2], n));
    }
    for (int i = 0; i < 3; i++)
        free(w[i]);
    dt_strategy *s;
    dt_optimizer *o;
    dt_gpt_create(&tiny, &m);
    dt_sgd_create(&(dt_sgd_config){0}, n, &o);
    EXPECT_STATUS(dt_strategy_single_create(m, o, &(dt_strategy_config){.micro_batches = 0}, &s), DT_ERR_INVALID);
    dt_optimizer_destroy(o);
    dt_model_destroy(m);
}

/* The library's prefetcher hands out the sampler's order, across epochs,
 * with the (epoch, position) after each batch. */
static void fill_ids(void *user, const int64_t *idx, int64_t n, float *x, int32_t *y)
{
    (void)user;
    for (int64_t i = 0; i < n; i++) {
        x[2 * i] = (float)idx[i];
        x[2 * i + 1] = -1;
        y[i] = (int32_t)idx[i];
    }
}

static void test_prefetch(void)
{
    dt_sampler a, b;
    EXPECT_STATUS(dt_sampler_init(&a, 10, 4, 0, 1, true, false), DT_OK);
    EXPECT_STATUS(dt_sampler_init(&b, 10, 4, 0, 1, true, false), DT_OK);
    dt_prefetcher *p;
    EXPECT_STATUS(dt_prefetch_start(&a, 4, 2, 1, fill_ids, NULL, &p), DT_OK);
    for (int k = 0; k < 7; k++) { /* 10 samples in batches of 4: 4, 4, 2, then the next epoch */
        const dt_batch *got = dt_prefetch_next(p);
        int64_t want[4];
        int64_t n = dt_sampler_next(&b, 4, want);
        if (n == 0)
            n = dt_sampler_next(&b, 4, want);
        EXPECT_EQ(got->n, n);
        for (int64_t i = 0; i < n && i < got->n; i++)
            EXPECT(got->x[2 * i] == (float)want[i] && got->y[i] == want[i]);
        EXPECT(got->epoch == b.epoch && got->position == b.position);
    }
    dt_prefetch_stop(p);
    EXPECT_STATUS(dt_prefetch_start(&a, 0, 2, 1, fill_ids, NULL, &p), DT_ERR_INVALID);
    dt_sampler_free(&a);
    dt_sampler_free(&b);
}

int main(void)
{
    test_prefetch();
    test_strategies();
    test_hooks_shard_only();
    test_param_groups();
    test_keyed_rng();
    test_arena_marks();
    test_arena_links();
    test_two_in_flight();
    test_recompute();
    test_copies();
    test_stages();
    test_cost_hints();
    return CHECK_DONE("test_runtime");
}
