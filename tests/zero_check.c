/* ZeRO stages 1, 2 and 3 against data parallelism, under dtrun (N ranks):
 * from the same weights, the same micro-batches on each rank (keyed by rank,
 * step and micro-batch), AdamW with weight-decay groups, gradient
 * accumulation (2 micro-batches) and clipping, STEPS steps of each stage
 * beside a DDP run; at every step the losses and gradient norms within
 * 1e-5, and after the last step every rank's shard (and for stages 1 and
 * 2 the whole parameters) against the DDP model's values at the same
 * places, within 1e-4 of the largest parameter.  A GPT (dropout 0.1, tied embedding) and an
 * MLP.  Also: the shard layout covers every element once over the ranks,
 * and the refusals.
 *
 * usage: zero_check [--steps N]   (exit 0: every check held on every rank) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/dtrain.h"

#define SEED 777
#define MB 2
#define MICRO 2

static int failures, rank;

#include "check_models.h"

#define CALL(x)                                                                                        \
    do {                                                                                               \
        if ((x) != DT_OK) {                                                                            \
            fprintf(stderr, "zero_check rank %d: %s failed: %s\n", rank, #x, dt_last_error());         \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

static dt_model *build(bool gpt)
{
    dt_model *m;
    CALL(check_build(gpt ? GPT : MLP, 16, &m));
    return m;
}

static dt_optimizer *adamw(int64_t n, const dt_optim_group *g, int ng)
{
    dt_optimizer *o;
    CALL(dt_adamw_create(&(dt_adamw_config){0.9f, 0.95f, 1e-8f, 0.1f}, n, &o));
    CALL(dt_optimizer_set_groups(o, g, ng));
    return o;
}

/* The shard's elements against the whole model's values: slice `r` of each
 * block's range (the layout dt_zero_shard_numel describes). */
static double compare_shard(dt_model *whole, const float *shard, int N, int r)
{
    dt_params *p = dt_model_params(whole);
    const float *v = dt_params_values(p);
    double worst = 0;
    int64_t at = 0;
    for (int b = 0; b < dt_model_num_layers(whole); b++) {
        int first, count;
        dt_model_block_params(whole, b, &first, &count);
        if (!count)
            continue;
        int64_t lo = dt_params_info(p, first)->offset;
        int64_t n = dt_params_info(p, first + count - 1)->offset + dt_params_info(p, first + count - 1)->numel - lo;
        int64_t slice = (n + N - 1) / N;
        for (int64_t e = 0; e < slice; e++) {
            int64_t i = (int64_t)r * slice + e;
            if (i < n)
                worst = fmax(worst, fabs((double)shard[at + e] - v[lo + i]));
        }
        at += slice;
    }
    return worst / largest(v, dt_params_numel(p));
}

static void run(dt_comm *world, bool gpt, int stage, bool offload, int steps)
{
    int N = dt_comm_size(world);
    dt_comm *ca, *cb;
    CALL(dt_comm_split(world, 0, rank, &ca));
    CALL(dt_comm_split(world, 0, rank, &cb));
    dt_model *ma = build(gpt), *mb = build(gpt);
    dt_optim_group *g = NULL;
    int ng = 0;
    CALL(dt_decay_groups(dt_model_params(ma), NULL, 0.1f, 0, dt_params_numel(dt_model_params(ma)), &g, &ng));
    dt_optimizer *oa = adamw(dt_params_numel(dt_model_params(ma)), g, ng);
    free(g);
    int64_t S = dt_zero_shard_numel(mb, N);
    CALL(dt_zero_decay_groups(mb, N, rank, NULL, 0.1f, &g, &ng));
    dt_optimizer *ob = adamw(S, g, ng);
    free(g);
    dt_strategy_config cfg = {.micro_batches = MICRO, .grad_clip = 0.5f, .seed = SEED};
    dt_strategy *sa, *sb;
    CALL(dt_strategy_ddp_create(ma, oa, ca, &cfg, &sa));
    CALL(dt_strategy_zero_create(mb, ob, cb, stage, &cfg, &sb));
    if (offload) { /* the optimizer state and the parameter shard in files */
        CALL(dt_optimizer_offload(ob, NULL));
        CALL(dt_strategy_zero_offload(sb, NULL));
    }
    double worst_loss = 0, worst_norm = 0;
    for (int step = 0; step < steps; step++) {
        float lr = 3e-3f;
        feed fa = {gpt ? GPT : MLP, step, 0, {0}, {0}}, fb = fa;
        dt_step_stats a, b;
        CALL(dt_strategy_step(sa, step, lr, next_batch, &fa, &a));
        CALL(dt_strategy_step(sb, step, lr, next_batch, &fb, &b));
        worst_loss = fmax(worst_loss, fabs((double)a.loss - b.loss) / fabs((double)a.loss));
        worst_norm = fmax(worst_norm, fabs((double)a.grad_norm - b.grad_norm) / fabs((double)a.grad_norm));
    }
    CALL(dt_strategy_sync(sb)); /* stages 1 and 2: the last update's gathers land */
    int64_t n = 0;
    const float *shard = dt_strategy_zero_shard(sb, &n);
    if (stage == 3 && shard && n == S) { /* a range read for a checkpoint (from the file when offloaded) */
        float *part = malloc((size_t)(S - S / 3 + 1) * sizeof *part);
        if (!part || dt_strategy_zero_shard_read(sb, S / 3, S - S / 3, part) != DT_OK ||
            memcmp(part, shard + S / 3, (size_t)(S - S / 3) * sizeof *part) != 0) {
            fprintf(stderr, "zero_check rank %d: dt_strategy_zero_shard_read differs from the shard: %s\n", rank,
                    dt_last_error());
            failures++;
        }
        free(part);
    }
    double params = stage < 3 ? (shard ? 1 : 0) : n == S && shard ? compare_shard(ma, shard, N, rank) : 1;
    double whole = 0;
    if (stage < 3) { /* stages 1 and 2 keep the whole parameters, gathered after each update */
        const float *va = dt_params_values(dt_model_params(ma)), *vb = dt_params_values(dt_model_params(mb));
        for (int64_t i = 0; i < dt_params_numel(dt_model_params(ma)); i++)
            whole = fmax(whole, fabs((double)va[i] - vb[i]));
        whole /= largest(va, dt_params_numel(dt_model_params(ma)));
    }
    /* Parameters: the largest difference against the largest parameter.  Not
     * per element: an element whose true gradient is 0 (attention's key
     * bias) takes AdamW steps of pure rounding noise, different in any two
     * summation orders (two data-parallel algorithms differ the same way). */
    bool bad = worst_loss > 1e-5 || worst_norm > 1e-5 || params > 1e-4 || whole > 1e-4;
    failures += bad;
    char kept[96] = "";
    if (stage < 3)
        snprintf(kept, sizeof kept, "whole parameters within %.2g", whole);
    else
        snprintf(kept, sizeof kept, "shard (%lld of %lld elements) within %.2g", (long long)S,
                 (long long)dt_params_numel(dt_model_params(ma)), params);
    fprintf(bad ? stderr : stdout,
            "zero_check rank %d: N=%d %s stage %d%s against ddp, %d steps: losses within %.2g, norms within %.2g, the "
            "%s of the largest parameter%s\n",
            rank, N, gpt ? "gpt" : "mlp", stage, offload ? " offloaded" : "", steps, worst_loss, worst_norm, kept, bad ? " (FAILED)" : "");
    dt_strategy_destroy(sa);
    dt_strategy_destroy(sb);
    dt_optimizer_destroy(oa);
    dt_optimizer_destroy(ob);
    dt_model_destroy(ma);
    dt_model_destroy(mb);
    CALL(dt_comm_destroy(ca));
    CALL(dt_comm_destroy(cb));
}

int main(int argc, char **argv)
{
    int steps = 50;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--steps"))
            steps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: zero_check [--steps N]\n");
            return 2;
        }
    }
    dt_comm *world;
    CALL(dt_comm_init_env(&world));
    rank = dt_comm_rank(world);
    int N = dt_comm_size(world);
    /* the layout: every element of the whole buffer in exactly one rank's shard */
    dt_model *m = build(true);
    int64_t S = dt_zero_shard_numel(m, N), whole = dt_params_numel(dt_model_params(m));
    if (S * N < whole || S * N >= whole + (int64_t)N * dt_model_num_layers(m)) {
        fprintf(stderr, "zero_check rank %d: shards of %lld x %d ranks for %lld elements\n", rank, (long long)S, N,
                (long long)whole);
        failures++;
    }
    dt_strategy *s = NULL;
    dt_strategy_config cfg = {.micro_batches = 1};
    dt_optimizer *o = adamw(S, NULL, 0);
    if (dt_strategy_zero_create(m, o, world, 4, &cfg, &s) != DT_ERR_INVALID || !strstr(dt_last_error(), "stage 4")) {
        fprintf(stderr, "zero_check rank %d: stage 4 not refused (%s)\n", rank, dt_last_error());
        failures++;
    }
    dt_optimizer_destroy(o);
    o = adamw(S, NULL, 0); /* stage 1 holds whole parameters: no parameter offload */
    CALL(dt_strategy_zero_create(m, o, world, 1, &cfg, &s));
    if (dt_strategy_zero_offload(s, NULL) != DT_ERR_INVALID || !strstr(dt_last_error(), "only stage 3")) {
        fprintf(stderr, "zero_check rank %d: parameter offload at stage 1 not refused (%s)\n", rank, dt_last_error());
        failures++;
    }
    dt_strategy_destroy(s);
    dt_optimizer_destroy(o);
    dt_model_destroy(m);
    for (int stage = 1; stage <= 3; stage++) {
        run(world, true, stage, false, steps);
        run(world, false, stage, false, steps);
    }
    run(world, true, 3, true, steps);
    int all = 0;
    CALL(dt_allreduce(&failures, &all, 1, DT_I32, DT_SUM, world));
    CALL(dt_comm_destroy(world));
    if (rank == 0)
        printf("zero_check: N=%d: %s\n", N, all ? "FAILED" : "ok");
    return all ? 1 : 0;
}
