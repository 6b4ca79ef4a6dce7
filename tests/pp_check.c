/* Pipeline parallelism against one process, under dtrun: the world is a
 * dp x pp x tp mesh (tp innermost).  Every rank also builds the whole
 * model locally (the reference) from the same seed and trains it on the
 * global batch, every micro-batch of every data-parallel replica with the
 * dropout key the pipeline gives it; then, for each schedule (GPipe, 1F1B,
 * interleaved with v = 2 where the blocks allow), STEPS steps of SGD with
 * momentum on both, comparing at every step:
 *   - the loss (the pipeline's, averaged over dp) to relative 1e-5;
 *   - every gradient (each stage's tensors, each tensor-parallel shard
 *     against its slice of the whole) to relative 1e-5 of the tensor's
 *     largest element;
 *   - the global gradient norm to 1e-5;
 * and the parameters after the last step.  Also: the refusals (more stages
 * than blocks, an interleaved schedule whose micro-batches are not a
 * multiple of the stages).
 *
 * usage: pp_check --pp P [--tp T] [--model gpt|mlp] [--micro M] [--steps N]
 * (exit 0: every check held on every rank) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/dtrain.h"

#define SEED 4321
#define MB 2 /* samples per micro-batch */

static int failures, rank;

#define CALL(x)                                                                                        \
    do {                                                                                               \
        if ((x) != DT_OK) {                                                                            \
            fprintf(stderr, "pp_check rank %d: %s failed: %s\n", rank, #x, dt_last_error());           \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

typedef struct {
    bool gpt;
    dt_gpt_config g;
    int64_t sizes[5];
} model_kind;

static dt_status describe(const model_kind *k, dt_comm *tp, dt_model_desc **d)
{
    if (k->gpt) {
        dt_gpt_config c = k->g;
        c.tp = dt_tp_group_of_comm(tp);
        return dt_gpt_describe(&c, d);
    }
    dt_tp_group g = dt_tp_group_of_comm(tp);
    return tp ? dt_mlp_describe_tp(k->sizes, 5, &g, d) : dt_mlp_describe(k->sizes, 5, d);
}

/* Micro-batch i of data-parallel replica r at `step`: inputs and targets
 * from a generator keyed by all three. */
typedef struct {
    const model_kind *k;
    int64_t step;
    int replica, next;
    float x[MB * 20];
    int32_t y[MB * 8];
} feed;

static void make_batch(const model_kind *k, int64_t step, int replica, int i, float *x, int32_t *y, dt_tensor *xt,
                       int64_t *ny)
{
    dt_rng g;
    dt_rng_seed(&g, dt_rng_key_stream(&(dt_rng_key){SEED, (uint64_t)step, (uint32_t)i, (uint32_t)replica}, 7));
    if (k->gpt) {
        int64_t T = k->g.context, V = k->g.vocab;
        for (int64_t j = 0; j < MB * T; j++) {
            x[j] = (float)((int64_t)(dt_rng_uniform(&g) * (double)V) % V);
            y[j] = j % 5 == 2 ? -1 : (int32_t)((int64_t)(dt_rng_uniform(&g) * (double)V) % V);
        }
        *xt = dt_tensor_view(x, 2, (int64_t[]){MB, T});
        *ny = MB * T;
    } else {
        for (int64_t j = 0; j < MB * k->sizes[0]; j++)
            x[j] = (float)(dt_rng_uniform(&g) * 2 - 1);
        for (int j = 0; j < MB; j++)
            y[j] = (int32_t)(dt_rng_uniform(&g) * (double)k->sizes[4]) % (int32_t)k->sizes[4];
        *xt = dt_tensor_view(x, 2, (int64_t[]){MB, k->sizes[0]});
        *ny = MB;
    }
}

static dt_status next_batch(void *user, dt_micro_batch *mb)
{
    feed *f = user;
    make_batch(f->k, f->step, f->replica, f->next++, f->x, f->y, &mb->x, &mb->ntargets);
    mb->targets = f->y;
    return DT_OK;
}

/* One reference step on the whole model: every replica's micro-batches, the
 * mean of their gradients, SGD.  Returns the mean loss. */
static float reference_step(dt_model *whole, dt_optimizer *o, const model_kind *k, int64_t step, int dp, int M,
                            dt_arena *arena, float lr)
{
    dt_params *p = dt_model_params(whole);
    dt_params_zero_grads(p);
    double loss = 0;
    for (int r = 0; r < dp; r++)
        for (int i = 0; i < M; i++) {
            float x[MB * 20];
            int32_t y[MB * 8];
            dt_tensor xt, out, dout;
            int64_t ny;
            make_batch(k, step, r, i, x, y, &xt, &ny);
            dt_arena_reset(arena);
            dt_ctx ctx = {.arena = arena, .key = {SEED, (uint64_t)step, (uint32_t)i, (uint32_t)r}, .training = true};
            CALL(dt_model_forward(whole, &ctx, &xt, &out));
            dout = out;
            dout.data = dt_arena_alloc(arena, dt_tensor_numel(&out));
            float l;
            CALL(dt_model_loss(whole, &out, y, &l, &dout));
            CALL(dt_model_backward(whole, &ctx, &dout));
            loss += l;
        }
    dt_vec_scale(dt_params_grads(p), 1.0f / (float)(dp * M), dt_params_numel(p));
    CALL(dt_optimizer_step(o, dt_params_values(p), dt_params_grads(p), dt_params_numel(p), lr));
    return (float)(loss / (dp * M));
}

/* Worst relative difference of p's tensors (values or gradients) against
 * their places in the whole model's. */
static double compare(dt_params *whole, dt_params *p, bool grads)
{
    double worst = 0;
    for (int i = 0; i < dt_params_count(p); i++) {
        const dt_param_info *in = dt_params_info(p, i);
        int w = dt_params_find(whole, in->name);
        if (w < 0) {
            fprintf(stderr, "pp_check rank %d: %s is not in the whole model\n", rank, in->name);
            failures++;
            continue;
        }
        const float *a = grads ? dt_param_grad(p, i) : dt_param_value(p, i);
        const float *b = grads ? dt_param_grad(whole, w) : dt_param_value(whole, w);
        double diff = 0, scale = 1e-12;
        for (int64_t e = 0; e < dt_params_info(whole, w)->numel; e++) {
            int64_t at = in->parts > 1 ? dt_param_shard_index(in, e) : e;
            if (at < 0)
                continue;
            diff = fmax(diff, fabs((double)a[at] - b[e]));
            scale = fmax(scale, fabs((double)b[e]));
        }
        worst = fmax(worst, diff / scale);
    }
    return worst;
}

static void run(const model_kind *k, dt_mesh *mesh, dt_pipe_schedule sched, int v, int M, int steps)
{
    dt_comm *pp = dt_mesh_comm(mesh, "pp"), *tp = dt_mesh_comm(mesh, "tp"), *dp = dt_mesh_comm(mesh, "dp");
    int p = dt_comm_size(pp), t = dt_comm_size(tp), ndp = dt_comm_size(dp);
    dt_model_desc *whole_d, *d;
    CALL(describe(k, NULL, &whole_d));
    CALL(describe(k, t > 1 ? tp : NULL, &d));
    dt_model *whole, *stage;
    CALL(dt_model_instantiate(whole_d, 0, dt_model_desc_blocks(whole_d), &whole));
    CALL(dt_pipeline_stage_create(d, p, v, dt_comm_rank(pp), &stage));
    dt_model_init(whole, SEED);
    dt_model_init(stage, SEED);
    double init = compare(dt_model_params(whole), dt_model_params(stage), false);
    if (init != 0) {
        fprintf(stderr, "pp_check rank %d: the stage's initial weights differ from the whole model's by %.3g\n", rank,
                init);
        failures++;
    }
    dt_sgd_config sc = {0.9f, 0.0f, false};
    dt_optimizer *ow, *os;
    CALL(dt_sgd_create(&sc, dt_params_numel(dt_model_params(whole)), &ow));
    CALL(dt_sgd_create(&sc, dt_params_numel(dt_model_params(stage)), &os));
    dt_strategy_config cfg = {.micro_batches = M, .seed = SEED, .tp = t > 1 ? tp : NULL};
    dt_pipeline_config pc = {sched, v, pp, dp, 0};
    dt_strategy *s;
    CALL(dt_strategy_pipeline_create(stage, os, &pc, &cfg, &s));
    dt_arena *arena;
    CALL(dt_arena_create(&arena));
    double worst_loss = 0, worst_grad = 0, worst_norm = 0;
    int peak = 0;
    const float lr = 0.05f;
    for (int step = 0; step < steps; step++) {
        feed f = {k, step, dt_comm_rank(dp), 0, {0}, {0}};
        dt_step_stats st;
        CALL(dt_strategy_step(s, step, lr, next_batch, &f, &st));
        float loss = st.loss;
        CALL(dt_allreduce(&loss, &loss, 1, DT_F32, DT_AVG, dp));
        float ref = reference_step(whole, ow, k, step, ndp, M, arena, lr);
        float ref_norm = sqrtf((float)dt_vec_sumsq(dt_params_grads(dt_model_params(whole)),
                                                   dt_params_numel(dt_model_params(whole))));
        worst_loss = fmax(worst_loss, fabs((double)loss - ref) / fabs((double)ref));
        worst_norm = fmax(worst_norm, fabs((double)st.grad_norm - ref_norm) / ref_norm);
        worst_grad = fmax(worst_grad, compare(dt_model_params(whole), dt_model_params(stage), true));
        peak = st.micro_in_flight > peak ? st.micro_in_flight : peak;
        if (f.next != M) {
            fprintf(stderr, "pp_check rank %d: the strategy took %d micro-batches, not %d\n", rank, f.next, M);
            failures++;
        }
    }
    double final = compare(dt_model_params(whole), dt_model_params(stage), false);
    bool bad = worst_loss > 1e-5 || worst_grad > 1e-5 || worst_norm > 1e-5 || final > 1e-5;
    /* The most micro-batches a stage held: all of them (GPipe) or p - stage (1F1B). */
    int want_peak = sched == DT_PIPE_GPIPE ? M : sched == DT_PIPE_1F1B ? (p - dt_comm_rank(pp) < M ? p - dt_comm_rank(pp) : M) : 0;
    if (want_peak && peak != want_peak) {
        fprintf(stderr, "pp_check rank %d: %s held %d micro-batches at once, expected %d\n", rank,
                dt_pipe_schedule_name(sched), peak, want_peak);
        failures++;
    }
    if (bad)
        failures++;
    fprintf(bad ? stderr : stdout,
            "pp_check rank %d: %s %s v=%d, dp=%d pp=%d tp=%d, %d micro-batches, %d steps: losses within %.2g, gradients "
            "within %.2g, norms within %.2g, final parameters within %.2g; at most %d micro-batches held%s\n",
            rank, k->gpt ? "gpt" : "mlp", dt_pipe_schedule_name(sched), v, ndp, p, t, M, steps, worst_loss,
            worst_grad, worst_norm, final, peak, bad ? " (tolerance 1e-5: FAILED)" : "");
    dt_strategy_destroy(s);
    dt_optimizer_destroy(ow);
    dt_optimizer_destroy(os);
    dt_model_destroy(whole);
    dt_model_destroy(stage);
    dt_model_desc_destroy(whole_d);
    dt_model_desc_destroy(d);
    dt_arena_destroy(arena);
}

static void expect_refusal(dt_status s, const char *want, const char *what)
{
    if (s != DT_ERR_INVALID || !strstr(dt_last_error(), want)) {
        fprintf(stderr, "pp_check rank %d: %s: %s ('%s'), expected a refusal naming '%s'\n", rank, what,
                dt_status_name(s), dt_last_error(), want);
        failures++;
    }
}

int main(int argc, char **argv)
{
    int pp = 1, tp = 1, M = 4, steps = 20;
    const char *which = "gpt";
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--pp"))
            pp = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--tp"))
            tp = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--micro"))
            M = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--steps"))
            steps = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--model"))
            which = argv[++i];
        else {
            fprintf(stderr, "usage: pp_check --pp P [--tp T] [--model gpt|mlp] [--micro M] [--steps N]\n");
            return 2;
        }
    }
    dt_comm *world;
    CALL(dt_comm_init_env(&world));
    rank = dt_comm_rank(world);
    dt_mesh *mesh;
    CALL(dt_mesh_create(world, (dt_mesh_dim[]){{"dp", 0}, {"pp", pp}, {"tp", tp}}, 3, &mesh));
    model_kind k = {.gpt = !strcmp(which, "gpt"),
                    .g = {.vocab = 32, .context = 8, .layers = 6, .heads = 4, .dim = 16, .dropout = 0.1f},
                    .sizes = {20, 24, 16, 24, 10}};
    int blocks = k.gpt ? (int)k.g.layers + 2 : 7;

    /* refusals */
    dt_model_desc *d;
    dt_model *m = NULL;
    CALL(describe(&k, NULL, &d));
    char want[64];
    snprintf(want, sizeof want, "%d stages but the model has %d blocks", blocks + 1, blocks);
    expect_refusal(dt_pipeline_stage_create(d, blocks + 1, 1, 0, &m), want, "more stages than blocks");
    expect_refusal(dt_pipeline_stage_create(d, blocks, 2, 0, &m), "virtual stages", "more chunks than blocks");
    dt_model_desc_destroy(d);
    dt_pipe_action *plan = NULL;
    int n = 0;
    expect_refusal(dt_pipe_schedule_build(DT_PIPE_INTERLEAVED, 2, 2, 0, 3, &plan, &n), "not a multiple of the 2 stages",
                   "interleaved with 3 micro-batches on 2 stages");
    dt_pipe_schedule sc;
    expect_refusal(dt_pipe_schedule_parse("zigzag", &sc), "'zigzag' is not one of", "an unknown schedule");

    run(&k, mesh, DT_PIPE_GPIPE, 1, M, steps);
    run(&k, mesh, DT_PIPE_1F1B, 1, M, steps);
    if (2 * pp <= blocks && M % pp == 0)
        run(&k, mesh, DT_PIPE_INTERLEAVED, 2, M, steps);
    int all = 0;
    CALL(dt_allreduce(&failures, &all, 1, DT_I32, DT_SUM, world));
    dt_mesh_destroy(mesh);
    CALL(dt_comm_destroy(world));
    if (rank == 0)
        printf("pp_check: %s dp x pp=%d x tp=%d: %s\n", which, pp, tp, all ? "FAILED" : "ok");
    return all ? 1 : 0;
}
