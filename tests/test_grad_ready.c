/* The gradient-ready events and the block hooks with several subscribers
 * (issue 44; include/dtrain/nn.h):
 *  - two subscribers on one registry both hear every parameter once per
 *    backward, in backward order (an MLP's exact order; a GPT with a tied
 *    embedding: the same order for both, every parameter once), over two
 *    backwards; unsubscribing one leaves the other, a stale token removes
 *    nothing, and the single callback of old is one subscriber among them;
 *  - a subscriber that fails stops the backward after its block with its
 *    status, the other subscriber still hearing the event;
 *  - block hooks: two of them, before a block in the order added, after it
 *    in reverse; removing one leaves the other;
 *  - DDP, ZeRO 2 and ZeRO 3 with a counting subscriber attached to the
 *    model's registry before the strategy: the same losses and weights to
 *    the bit as without it, and the counter heard every parameter once per
 *    micro-batch (before, DDP's callback displaced whatever was set).
 * Alone it is one rank; tests/run_tests.sh runs it under dtrun -n 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtrain/dtrain.h"

#define MAX_EVENTS 256

typedef struct {
    int order[MAX_EVENTS];
    int n;
    int fail_at; /* return DT_ERR_INVALID for this parameter (-1: never) */
} recorder;

static dt_status record(void *user, int param)
{
    recorder *r = user;
    if (r->n < MAX_EVENTS)
        r->order[r->n] = param;
    r->n++;
    return param == r->fail_at ? DT_ERR_INVALID : DT_OK;
}

static int legacy_events;
static void legacy(int param, void *user)
{
    (void)param;
    (void)user;
    legacy_events++;
}

/* Forward, loss and backward of one batch; returns backward's status. */
static dt_status one_backward(dt_model *m, dt_arena *arena, const float *xs, const int64_t *shape, int ndim,
                              const int32_t *t)
{
    dt_arena_reset(arena);
    dt_ctx ctx = {.arena = arena, .training = true};
    dt_tensor x = dt_tensor_view((float *)xs, ndim, shape), y;
    dt_params_zero_grads(dt_model_params(m));
    EXPECT_STATUS(dt_model_forward(m, &ctx, &x, &y), DT_OK);
    dt_tensor g = y;
    g.data = dt_arena_alloc(arena, dt_tensor_numel(&y));
    float loss;
    EXPECT_STATUS(dt_model_loss(m, &y, t, &loss, &g), DT_OK);
    return dt_model_backward(m, &ctx, &g);
}

static void test_two_subscribers(void)
{
    dt_model *m;
    EXPECT_STATUS(dt_mlp_create((int64_t[]){6, 5, 4, 3}, 4, &m), DT_OK);
    dt_model_init(m, 12);
    dt_params *p = dt_model_params(m);
    dt_arena *arena;
    dt_arena_create(&arena);
    float xs[2 * 6] = {0.5f, -1, 2, 0.25f, -0.5f, 1, 1, 0.5f, -2, 0, 1.5f, -1};
    int32_t t[2] = {2, 0};
    recorder a = {.fail_at = -1}, b = {.fail_at = -1};
    dt_subscription ta = 0, tb = 0;
    EXPECT_STATUS(dt_params_subscribe_grad_ready(p, record, &a, &ta), DT_OK);
    EXPECT_STATUS(dt_params_subscribe_grad_ready(p, record, &b, &tb), DT_OK);
    EXPECT(ta > 0 && tb > 0 && ta != tb);
    const int want[6] = {4, 5, 2, 3, 0, 1}; /* fc3, fc2, fc1 (weight, then bias) */
    for (int pass = 0; pass < 2; pass++) {
        EXPECT_STATUS(one_backward(m, arena, xs, (int64_t[]){2, 6}, 2, t), DT_OK);
        EXPECT_EQ(a.n, 6 * (pass + 1));
        EXPECT_EQ(b.n, 6 * (pass + 1));
        for (int i = 0; i < 6; i++) {
            EXPECT_EQ(a.order[6 * pass + i], want[i]);
            EXPECT_EQ(b.order[6 * pass + i], want[i]);
        }
    }
    /* the single callback of old sits beside them, and replaces only itself */
    legacy_events = 0;
    dt_params_on_grad_ready(p, legacy, NULL);
    dt_params_on_grad_ready(p, legacy, NULL);
    dt_params_unsubscribe(p, ta); /* a leaves; b stays */
    dt_params_unsubscribe(p, ta); /* again: nothing */
    dt_params_unsubscribe(p, 0);
    dt_params_unsubscribe(p, 9999);
    EXPECT_STATUS(one_backward(m, arena, xs, (int64_t[]){2, 6}, 2, t), DT_OK);
    EXPECT_EQ(a.n, 12);
    EXPECT_EQ(b.n, 18);
    EXPECT_EQ(legacy_events, 6);
    for (int i = 0; i < 6; i++)
        EXPECT_EQ(b.order[12 + i], want[i]);
    dt_params_on_grad_ready(p, NULL, NULL);
    /* a failing subscriber: the backward stops after fc2's block with its status; b heard fc2.weight too */
    recorder f = {.fail_at = 2};
    dt_subscription tf;
    EXPECT_STATUS(dt_params_subscribe_grad_ready(p, record, &f, &tf), DT_OK);
    EXPECT_STATUS(one_backward(m, arena, xs, (int64_t[]){2, 6}, 2, t), DT_ERR_INVALID);
    EXPECT_EQ(f.n, 4); /* fc3's two, fc2's two: then the model stopped */
    EXPECT_EQ(b.n, 22);
    EXPECT_EQ(b.order[20], 2);
    EXPECT_STATUS(dt_params_grad_ready_status(p), DT_OK); /* the model took it */
    dt_params_unsubscribe(p, tf);
    dt_params_unsubscribe(p, tb);
    EXPECT_STATUS(one_backward(m, arena, xs, (int64_t[]){2, 6}, 2, t), DT_OK);
    EXPECT_EQ(b.n, 22);
    EXPECT_STATUS(dt_params_subscribe_grad_ready(p, NULL, NULL, NULL), DT_ERR_INVALID);
    EXPECT_STATUS(dt_params_subscribe_grad_ready(NULL, record, &a, NULL), DT_ERR_INVALID);
    dt_arena_destroy(arena);
    dt_model_destroy(m);
}

/* A GPT with its tied embedding: both subscribers the same order, each
 * parameter once per backward, ln_f first and wte last. */
static void test_gpt_order(void)
{
    dt_gpt_config cfg = {.vocab = 11, .context = 6, .layers = 2, .heads = 2, .dim = 8};
    dt_model *m;
    EXPECT_STATUS(dt_gpt_create(&cfg, &m), DT_OK);
    dt_model_init(m, 4);
    dt_params *p = dt_model_params(m);
    int np = dt_params_count(p);
    EXPECT(np * 2 <= MAX_EVENTS);
    dt_arena *arena;
    dt_arena_create(&arena);
    float ids[10] = {1, 4, 7, 10, 2, 3, 5, 8, 0, 9};
    int32_t t[10] = {4, 7, 10, 2, 3, 5, 8, 0, 9, 1};
    recorder a = {.fail_at = -1}, b = {.fail_at = -1};
    EXPECT_STATUS(dt_params_subscribe_grad_ready(p, record, &a, NULL), DT_OK);
    EXPECT_STATUS(dt_params_subscribe_grad_ready(p, record, &b, NULL), DT_OK);
    for (int pass = 0; pass < 2; pass++)
        EXPECT_STATUS(one_backward(m, arena, ids, (int64_t[]){2, 5}, 2, t), DT_OK);
    EXPECT_EQ(a.n, 2 * np);
    EXPECT_EQ(b.n, 2 * np);
    EXPECT(memcmp(a.order, b.order, (size_t)(2 * np) * sizeof(int)) == 0);
    for (int pass = 0; pass < 2; pass++) {
        int *seen = calloc((size_t)np, sizeof *seen);
        for (int i = 0; i < np; i++)
            seen[a.order[pass * np + i]]++;
        for (int k = 0; k < np; k++)
            EXPECT_EQ(seen[k], 1);
        free(seen);
        EXPECT_EQ(a.order[pass * np], dt_params_find(p, "transformer.ln_f.weight"));
        EXPECT_EQ(a.order[pass * np + np - 1], dt_params_find(p, "transformer.wte.weight"));
    }
    dt_arena_destroy(arena);
    dt_model_destroy(m);
}

/* Block hooks: "A" added first, "B" second. */
typedef struct {
    char log[512];
    char name;
} hook_log;

static char *shared_log;

static dt_status log_hook(void *user, dt_hook_point at, int block, dt_ctx *ctx)
{
    (void)ctx;
    const hook_log *h = user;
    static const char points[] = "FfBb"; /* before/after forward, before/after backward */
    size_t n = strlen(shared_log);
    snprintf(shared_log + n, 512 - n, "%c%c%d ", h->name, points[at], block);
    return DT_OK;
}

static void test_block_hooks(void)
{
    dt_model *m;
    EXPECT_STATUS(dt_mlp_create((int64_t[]){6, 5, 3}, 3, &m), DT_OK); /* blocks fc1, relu1, fc2 */
    dt_model_init(m, 12);
    dt_arena *arena;
    dt_arena_create(&arena);
    char log[512] = "";
    shared_log = log;
    hook_log A = {.name = 'A'}, Bh = {.name = 'B'};
    dt_subscription ta, tb;
    EXPECT_STATUS(dt_model_add_hook(m, log_hook, &A, &ta), DT_OK);
    EXPECT_STATUS(dt_model_add_hook(m, log_hook, &Bh, &tb), DT_OK);
    float xs[6] = {0.5f, -1, 2, 0.25f, -0.5f, 1};
    int32_t t[1] = {2};
    EXPECT_STATUS(one_backward(m, arena, xs, (int64_t[]){1, 6}, 2, t), DT_OK);
    const char *both = "AF0 BF0 Bf0 Af0 AF1 BF1 Bf1 Af1 AF2 BF2 Bf2 Af2 "
                       "AB2 BB2 Bb2 Ab2 AB1 BB1 Bb1 Ab1 AB0 BB0 Bb0 Ab0 ";
    EXPECT(strcmp(log, both) == 0);
    if (strcmp(log, both) != 0)
        printf("hooks: %s\n", log);
    log[0] = 0;
    dt_model_remove_hook(m, ta);
    dt_model_set_hooks(m, NULL, NULL); /* the single hook of old: none set, nothing removed */
    EXPECT_STATUS(one_backward(m, arena, xs, (int64_t[]){1, 6}, 2, t), DT_OK);
    EXPECT(strcmp(log, "BF0 Bf0 BF1 Bf1 BF2 Bf2 BB2 Bb2 BB1 Bb1 BB0 Bb0 ") == 0);
    dt_model_remove_hook(m, tb);
    dt_arena_destroy(arena);
    dt_model_destroy(m);
}

/* ---- strategies with a second subscriber ---- */

enum { B = 2, T = 5, STEPS = 3, MICRO = 2 };

typedef struct {
    float ids[B * T];
    int32_t t[B * T];
    int calls, rank;
} feeder;

static dt_status feed(void *user, dt_micro_batch *mb)
{
    feeder *f = user;
    dt_rng rng;
    dt_rng_seed(&rng, 1000 + (uint64_t)f->calls++ * 7 + (uint64_t)f->rank);
    for (int i = 0; i < B * T; i++) {
        f->ids[i] = (float)(dt_rng_next(&rng) % 11);
        f->t[i] = (int32_t)(dt_rng_next(&rng) % 11);
    }
    mb->x = dt_tensor_view(f->ids, 2, (int64_t[]){B, T});
    mb->targets = f->t;
    mb->ntargets = B * T;
    return DT_OK;
}

static dt_status count(void *user, int param)
{
    (void)param;
    (*(int *)user)++;
    return DT_OK;
}

/* kind 0: DDP; 2, 3: ZeRO stage.  losses[STEPS]; weights: this rank's
 * parameters after the steps (ZeRO-3: its shard), *n floats. */
static void train(dt_comm *world, int kind, bool counter, float *losses, float **weights, int64_t *n)
{
    dt_gpt_config gc = {.vocab = 11, .context = 6, .layers = 2, .heads = 2, .dim = 8, .dropout = 0.1f};
    dt_model *m;
    EXPECT_STATUS(dt_gpt_create(&gc, &m), DT_OK);
    dt_model_init(m, 8);
    dt_params *p = dt_model_params(m);
    int events = 0, np = dt_params_count(p);
    dt_subscription tok = 0;
    if (counter) /* before the strategy: it must not displace this one */
        EXPECT_STATUS(dt_params_subscribe_grad_ready(p, count, &events, &tok), DT_OK);
    dt_optimizer *o;
    dt_strategy_config cfg = {.micro_batches = MICRO, .grad_clip = 1.0f, .seed = 3};
    dt_strategy *s = NULL;
    int N = dt_comm_size(world);
    int64_t shard = dt_params_numel(p);
    if (kind == 0) {
        EXPECT_STATUS(dt_adamw_create(&(dt_adamw_config){0.9f, 0.95f, 1e-8f, 0.1f}, shard, &o), DT_OK);
        EXPECT_STATUS(dt_strategy_ddp_create(m, o, world, &cfg, &s), DT_OK);
    } else {
        shard = dt_zero_shard_numel(m, N);
        EXPECT_STATUS(dt_adamw_create(&(dt_adamw_config){0.9f, 0.95f, 1e-8f, 0.1f}, shard, &o), DT_OK);
        EXPECT_STATUS(dt_strategy_zero_create(m, o, world, kind, &cfg, &s), DT_OK);
    }
    feeder f = {.rank = dt_comm_rank(world)};
    size_t buffers_after_first = 0;
    for (int step = 0; s && step < STEPS; step++) {
        dt_step_stats st;
        EXPECT_STATUS(dt_strategy_step(s, step, 1e-2f, feed, &f, &st), DT_OK);
        losses[step] = st.loss;
        size_t buffers;
        dt_strategy_memory_bytes(s, &buffers);
        if (step == 0)
            buffers_after_first = buffers;
        else if (kind) /* the pool settled in the first step */
            EXPECT_EQ((long long)buffers, (long long)buffers_after_first);
    }
    EXPECT_STATUS(dt_strategy_sync(s), DT_OK);
    const float *w = kind == 3 ? dt_strategy_zero_shard(s, &shard) : dt_params_values(p);
    *n = kind == 3 ? shard : dt_params_numel(p);
    *weights = malloc((size_t)*n * sizeof(float));
    memcpy(*weights, w, (size_t)*n * sizeof(float));
    if (counter)
        EXPECT_EQ(events, STEPS * MICRO * np);
    dt_strategy_destroy(s);
    if (counter) { /* the strategy let go of its own subscription, not this one */
        int before = events;
        dt_params_grad_ready(p, 0);
        EXPECT_EQ(events, before + 1);
        dt_params_unsubscribe(p, tok);
    }
    dt_optimizer_destroy(o);
    dt_model_destroy(m);
}

static void test_strategies(dt_comm *world)
{
    const int kinds[3] = {0, 2, 3};
    const char *names[3] = {"ddp", "zero-2", "zero-3"};
    for (int k = 0; k < 3; k++) {
        float la[STEPS], lb[STEPS], *wa, *wb;
        int64_t na, nb;
        train(world, kinds[k], false, la, &wa, &na);
        train(world, kinds[k], true, lb, &wb, &nb);
        EXPECT(memcmp(la, lb, sizeof la) == 0);
        EXPECT_EQ(na, nb);
        bool same = na == nb && memcmp(wa, wb, (size_t)na * sizeof(float)) == 0;
        EXPECT(same);
        printf("%s with a counting subscriber: losses %.6f %.6f %.6f, weights %s\n", names[k], lb[0], lb[1], lb[2],
               same ? "bitwise equal" : "DIFFER");
        free(wa);
        free(wb);
    }
}

/* DDP starts every rank from rank 0's values: ranks initialised with
 * different seeds get them by a broadcast; ranks that hold them already (the
 * same seed, a checkpoint every rank loaded) keep theirs, which the strategy
 * no longer broadcasts. */
static void test_ddp_start_values(dt_comm *world)
{
    int rank = dt_comm_rank(world);
    for (int same_seed = 0; same_seed < 2; same_seed++) {
        dt_model *m, *ref;
        EXPECT_STATUS(dt_mlp_create((int64_t[]){6, 5, 3}, 3, &m), DT_OK);
        EXPECT_STATUS(dt_mlp_create((int64_t[]){6, 5, 3}, 3, &ref), DT_OK);
        dt_model_init(m, same_seed ? 11 : 11 + (uint64_t)rank);
        dt_model_init(ref, 11); /* rank 0's */
        dt_params *p = dt_model_params(m);
        dt_optimizer *o;
        dt_strategy *s = NULL;
        dt_strategy_config cfg = {.micro_batches = 1, .seed = 3};
        EXPECT_STATUS(dt_adamw_create(&(dt_adamw_config){0.9f, 0.95f, 1e-8f, 0.1f}, dt_params_numel(p), &o), DT_OK);
        EXPECT_STATUS(dt_strategy_ddp_create(m, o, world, &cfg, &s), DT_OK);
        size_t bytes = (size_t)dt_params_numel(p) * sizeof(float);
        bool equal = memcmp(dt_params_values(p), dt_params_values(dt_model_params(ref)), bytes) == 0;
        EXPECT(equal);
        printf("ddp start, %s seeds: rank %d holds rank 0's values: %s\n", same_seed ? "equal" : "different", rank,
               equal ? "yes" : "NO");
        dt_strategy_destroy(s);
        dt_optimizer_destroy(o);
        dt_model_destroy(m);
        dt_model_destroy(ref);
    }
}

int main(void)
{
    test_two_subscribers();
    test_gpt_order();
    test_block_hooks();
    dt_comm *world = NULL;
    EXPECT_STATUS(dt_comm_init_env(&world), DT_OK);
    if (world) {
        test_strategies(world);
        test_ddp_start_values(world);
    }
    dt_comm_destroy(world);
    return CHECK_DONE("test_grad_ready");
}
