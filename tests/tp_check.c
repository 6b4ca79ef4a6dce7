/* Tensor-parallel linear layers against the unsplit ones, under dtrun: the
 * world is one tensor-parallel group of t ranks.  Each rank also builds the
 * unsplit model locally (the reference, t = 1) from the same seed, runs both
 * on the same batch and compares:
 *   - initial weights: every shard is bitwise its slice of the unsplit one;
 *   - step 0: the loss and every gradient (each shard against its slice) to
 *     relative 1e-5;
 *   - STEPS steps of SGD on both: losses to relative 1e-4 at every step.
 * The model is an MLP made of column-then-row pairs, Megatron's MLP split:
 * fc1 column (IN -> H), relu, fc2 row (H -> H2), relu, fc3 column (H2 -> H),
 * relu, fc4 row (H -> OUT), with H and H2 divisible by 2, 3, 4 and 6.
 * Also checks the refusal of a size the group does not divide, attention
 * split by heads, the vocabulary-parallel cross-entropy and a whole GPT
 * (check_gpt), and that sequence parallelism on and off give the same 50
 * losses to relative 1e-5 (check_sequence_parallel), and clipping over
 * the group (check_clip_group).
 *
 * usage: tp_check   (exit 0: every check held on every rank) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/dtrain.h"

#define IN 20
#define H 48
#define H2 36
#define OUT 10
#define BATCH 16
#define STEPS 20
#define SEED 1234

static int failures, rank;

#define CALL(x)                                                                                        \
    do {                                                                                               \
        if ((x) != DT_OK) {                                                                            \
            fprintf(stderr, "tp_check: %s failed: %s\n", #x, dt_last_error());                        \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

typedef struct {
    dt_params *p;
    dt_layer *net;
    dt_arena *arena;
} model;

static const struct {
    const char *name;
    int in, out;
    dt_tp_split split;
} linears[] = {{"fc1", IN, H, DT_TP_COLUMN}, {"fc2", H, H2, DT_TP_ROW}, {"fc3", H2, H, DT_TP_COLUMN}, {"fc4", H, OUT, DT_TP_ROW}};
enum { NLIN = sizeof linears / sizeof linears[0] };

static void build(model *m, const dt_tp_group *tp)
{
    CALL(dt_params_create(&m->p));
    CALL(dt_sequential_create("mlp", &m->net));
    for (int i = 0; i < NLIN; i++) {
        dt_layer *l;
        if (tp)
            CALL(dt_linear_parallel_create(m->p, linears[i].name, linears[i].in, linears[i].out, true, linears[i].split,
                                           tp, &l));
        else
            CALL(dt_linear_create(m->p, linears[i].name, linears[i].in, linears[i].out, true, &l));
        CALL(dt_sequential_append(m->net, l));
        if (i + 1 < NLIN) {
            char n[16];
            snprintf(n, sizeof n, "relu%d", i + 1);
            CALL(dt_relu_create(n, &l));
            CALL(dt_sequential_append(m->net, l));
        }
    }
    CALL(dt_params_finalize(m->p));
    m->net->ops->init(m->net, m->p, SEED);
    CALL(dt_arena_create(&m->arena));
}

static float step(model *m, const float *xdata, const int32_t *y)
{
    dt_arena_reset(m->arena);
    dt_params_zero_grads(m->p);
    dt_ctx ctx = {.arena = m->arena, .params = m->p, .training = true};
    dt_tensor x = dt_tensor_view((float *)xdata, 2, (int64_t[]){BATCH, IN}), out, g, dx;
    CALL(m->net->ops->forward(m->net, &ctx, &x, &out));
    g = out;
    g.data = dt_arena_alloc(m->arena, dt_tensor_numel(&out));
    float loss;
    CALL(dt_softmax_cross_entropy(&out, y, &loss, &g));
    CALL(m->net->ops->backward(m->net, &ctx, &g, &dx, false));
    return loss;
}

static void sgd(model *m, float lr)
{
    float *w = dt_params_values(m->p), *g = dt_params_grads(m->p);
    for (int64_t i = 0; i < dt_params_numel(m->p); i++)
        w[i] -= lr * g[i];
}

/* Every parameter of the tp model against its slice of the reference's
 * parameter of the same name (the shard layout from dt_param_info):
 * values (bitwise when exact) or gradients; the largest difference relative
 * to the reference tensor's largest magnitude. */
static double compare(dt_params *refp, dt_params *tpp, int t, bool grads, bool exact)
{
    double worst = 0;
    for (int k = 0; k < dt_params_count(tpp); k++) {
        const dt_param_info *si = dt_params_info(tpp, k);
        int rk = dt_params_find(refp, si->name);
        if (rk < 0) {
            fprintf(stderr, "tp_check rank %d: %s has no unsplit counterpart\n", rank, si->name);
            failures++;
            continue;
        }
        const dt_param_info *ri = dt_params_info(refp, rk);
        const float *sv = grads ? dt_param_grad(tpp, k) : dt_param_value(tpp, k);
        const float *fv = grads ? dt_param_grad(refp, rk) : dt_param_value(refp, rk);
        double scale = 0;
        for (int64_t i = 0; i < ri->numel; i++)
            scale = fmax(scale, fabs(fv[i]));
        int64_t seen = 0;
        for (int64_t i = 0; i < ri->numel; i++) {
            int64_t at = dt_param_shard_index(si, i);
            if (at < 0)
                continue;
            seen++;
            if (exact && sv[at] != fv[i] && failures < 20) {
                fprintf(stderr, "tp_check rank %d (t=%d): %s element %lld is %.9g, the unsplit one's %.9g\n", rank, t,
                        si->name, (long long)i, sv[at], fv[i]);
                failures++;
            }
            worst = fmax(worst, fabs((double)sv[at] - fv[i]) / (scale > 0 ? scale : 1));
        }
        if (seen != si->numel) {
            fprintf(stderr, "tp_check rank %d: %s: %lld of its %lld elements map into the whole tensor\n", rank,
                    si->name, (long long)seen, (long long)si->numel);
            failures++;
        }
    }
    return worst;
}

/* Attention with its heads split over the group against the unsplit one:
 * output, input gradient and every parameter gradient, to 1e-5. */
static void check_attention(const dt_tp_group *tp, int t)
{
    enum { B = 2, T = 5, D = 24, HEADS = 12 };
    model ref = {0}, par = {0};
    dt_layer *a;
    CALL(dt_params_create(&ref.p));
    CALL(dt_attention_create(ref.p, "h.0.attn", D, HEADS, &a));
    ref.net = a;
    CALL(dt_params_create(&par.p));
    CALL(dt_attention_parallel_create(par.p, "h.0.attn", D, HEADS, tp, &a));
    par.net = a;
    model *ms[2] = {&ref, &par};
    float *x = malloc(sizeof(float) * B * T * D), *w = malloc(sizeof(float) * B * T * D);
    dt_rng g;
    dt_rng_seed(&g, 5);
    for (int i = 0; i < B * T * D; i++) {
        x[i] = 2.0f * dt_rng_uniform(&g) - 1.0f;
        w[i] = 2.0f * dt_rng_uniform(&g) - 1.0f;
    }
    float *y[2], *dx[2];
    for (int k = 0; k < 2; k++) {
        model *m = ms[k];
        CALL(dt_params_finalize(m->p));
        m->net->ops->init(m->net, m->p, SEED);
        CALL(dt_arena_create(&m->arena));
        dt_ctx ctx = {.arena = m->arena, .params = m->p, .training = true};
        dt_tensor xt = dt_tensor_view(x, 3, (int64_t[]){B, T, D}), out, gy, gx;
        CALL(m->net->ops->forward(m->net, &ctx, &xt, &out));
        y[k] = out.data;
        gy = dt_tensor_view(w, 3, (int64_t[]){B, T, D}); /* loss = sum(y * w) */
        CALL(m->net->ops->backward(m->net, &ctx, &gy, &gx, true));
        dx[k] = gx.data;
    }
    double worst = compare(ref.p, par.p, t, false, true);
    double dy = 0, ddx = 0, scale_y = 0, scale_x = 0;
    for (int i = 0; i < B * T * D; i++) {
        dy = fmax(dy, fabs((double)y[0][i] - y[1][i]));
        ddx = fmax(ddx, fabs((double)dx[0][i] - dx[1][i]));
        scale_y = fmax(scale_y, fabs(y[0][i]));
        scale_x = fmax(scale_x, fabs(dx[0][i]));
    }
    worst = compare(ref.p, par.p, t, true, false);
    dy /= scale_y;
    ddx /= scale_x;
    if (dy > 1e-5 || ddx > 1e-5 || worst > 1e-5) {
        fprintf(stderr, "tp_check rank %d (t=%d): attention differs: output %.2g, input gradient %.2g, parameter "
                        "gradients %.2g\n", rank, t, dy, ddx, worst);
        failures++;
    }
    printf("tp_check rank %d: t=%d: attention, %d of %d heads here: output within %.2g, input gradient %.2g, "
           "parameter gradients %.2g\n", rank, t, HEADS / t, HEADS, dy, ddx, worst);
    for (int k = 0; k < 2; k++) {
        dt_layer_destroy(ms[k]->net);
        dt_params_destroy(ms[k]->p);
        dt_arena_destroy(ms[k]->arena);
    }
    free(x);
    free(w);
}

/* The vocabulary-parallel cross-entropy against the ordinary one on the
 * whole logits, with ignored targets (-1) among them: loss and this rank's
 * slice of the gradient to 1e-6; an out-of-range target refused. */
static void check_cross_entropy(const dt_tp_group *tp, int t)
{
    enum { N = 13, V = 24 };
    float z[N * V], g[N * V], gl[N * V];
    int32_t y[N];
    dt_rng r;
    dt_rng_seed(&r, 9);
    for (int i = 0; i < N * V; i++)
        z[i] = 8.0f * dt_rng_uniform(&r) - 4.0f;
    for (int i = 0; i < N; i++)
        y[i] = i % 5 == 2 ? -1 : (int32_t)(dt_rng_uniform(&r) * V) % V;
    dt_tensor zt = dt_tensor_view(z, 2, (int64_t[]){N, V}), gt = dt_tensor_view(g, 2, (int64_t[]){N, V});
    float want;
    CALL(dt_softmax_cross_entropy(&zt, y, &want, &gt));
    int64_t c = V / t, start = c * rank;
    float zl[N * V];
    for (int i = 0; i < N; i++)
        for (int64_t k = 0; k < c; k++)
            zl[i * c + k] = z[i * V + start + k];
    dt_tensor zlt = dt_tensor_view(zl, 2, (int64_t[]){N, c}), glt = dt_tensor_view(gl, 2, (int64_t[]){N, c});
    float got;
    CALL(dt_softmax_cross_entropy_parallel(&zlt, y, V, start, tp, &got, &glt));
    double dl = fabs((double)got - want) / want, dg = 0;
    for (int i = 0; i < N; i++)
        for (int64_t k = 0; k < c; k++)
            dg = fmax(dg, fabs((double)gl[i * c + k] - g[i * V + start + k]));
    if (dl > 1e-6 || dg > 1e-6) {
        fprintf(stderr, "tp_check rank %d (t=%d): vocabulary-parallel cross-entropy %.9g against %.9g, gradient %.2g\n",
                rank, t, got, want, dg);
        failures++;
    }
    printf("tp_check rank %d: t=%d: vocabulary-parallel cross-entropy, %lld of %d classes here, %d of %d rows ignored: "
           "loss within %.2g, gradient within %.2g\n",
           rank, t, (long long)c, V, (N + 2) / 5, N, dl, dg);
    y[3] = V; /* a class outside the vocabulary: refused on every rank, before any message */
    if (dt_softmax_cross_entropy_parallel(&zlt, y, V, start, tp, &got, &glt) != DT_ERR_INVALID ||
        !strstr(dt_last_error(), "outside 0..23")) {
        fprintf(stderr, "tp_check rank %d: target %d accepted (%s)\n", rank, V, dt_last_error());
        failures++;
    }
}

/* A GPT with tensor parallelism (vocabulary-parallel embedding and tied
 * output layer with the vocabulary-parallel loss, attention by heads, MLP
 * column then row) against the unsplit GPT from the same seed, with
 * dropout: step-0 loss and every gradient to 1e-5, then GPT_STEPS SGD steps
 * with losses to 1e-4. */
#define GPT_STEPS 50
static void check_gpt(dt_comm *tp, int t, float dropout, bool sp, float *losses)
{
    dt_gpt_config c = {.vocab = 48, .context = 12, .layers = 2, .heads = 12, .dim = 24, .dropout = dropout};
    dt_model *m[2];
    CALL(dt_gpt_create(&c, &m[0]));
    c.tp = dt_tp_group_of_comm(tp);
    c.sequence_parallel = sp;
    CALL(dt_gpt_create(&c, &m[1]));
    dt_arena *arena;
    CALL(dt_arena_create(&arena));
    enum { B = 3, T = 12 };
    float ids[B * T];
    int32_t y[B * T];
    dt_rng g;
    dt_rng_seed(&g, 11);
    for (int i = 0; i < B * T; i++) {
        ids[i] = (float)((int)(dt_rng_uniform(&g) * 48) % 48);
        y[i] = i % 7 == 3 ? -1 : (int32_t)(dt_rng_uniform(&g) * 48) % 48;
    }
    for (int k = 0; k < 2; k++)
        dt_model_init(m[k], SEED);
    compare(dt_model_params(m[0]), dt_model_params(m[1]), t, false, true);
    double worst_loss = 0, worst_grad = 0;
    for (int step = 0; step < GPT_STEPS; step++) {
        float loss[2];
        for (int k = 0; k < 2; k++) {
            dt_arena_reset(arena);
            dt_params_zero_grads(dt_model_params(m[k]));
            dt_ctx ctx = {.arena = arena, .key = {SEED, (uint64_t)step, 0, 0}, .training = true};
            dt_tensor x = dt_tensor_view(ids, 2, (int64_t[]){B, T}), out, dout;
            CALL(dt_model_forward(m[k], &ctx, &x, &out));
            dout = out;
            dout.data = dt_arena_alloc(arena, dt_tensor_numel(&out));
            CALL(dt_model_loss(m[k], &out, y, &loss[k], &dout));
            CALL(dt_model_backward(m[k], &ctx, &dout));
            if (k == 1) /* sequence parallel: the LayerNorms' and biases' parts summed */
                CALL(dt_params_reduce_tp_partial(dt_model_params(m[1]), tp));
        }
        losses[step] = loss[1];
        double rel = fabs((double)loss[0] - loss[1]) / loss[0];
        worst_loss = fmax(worst_loss, rel);
        if (step == 0)
            worst_grad = compare(dt_model_params(m[0]), dt_model_params(m[1]), t, true, false);
        if (rel > (step ? 1e-4 : 1e-5) || worst_grad > 1e-5) {
            fprintf(stderr, "tp_check rank %d (t=%d, dropout %g%s): gpt step %d: loss %.9g against %.9g, step-0 "
                            "gradients within %.2g\n", rank, t, dropout, sp ? ", sequence parallel" : "", step,
                    loss[1], loss[0], worst_grad);
            failures++;
            break;
        }
        for (int k = 0; k < 2; k++) {
            dt_params *p = dt_model_params(m[k]);
            float *w = dt_params_values(p), *gr = dt_params_grads(p);
            for (int64_t i = 0; i < dt_params_numel(p); i++)
                w[i] -= 0.1f * gr[i];
        }
    }
    printf("tp_check rank %d: t=%d: gpt (dropout %g%s), %lld of %lld parameters here: step-0 gradients within %.2g, "
           "%d-step losses within %.2g\n",
           rank, t, dropout, sp ? ", sequence parallel" : "", (long long)dt_params_numel(dt_model_params(m[1])),
           (long long)dt_params_numel(dt_model_params(m[0])), worst_grad, GPT_STEPS, worst_loss);
    dt_model_destroy(m[0]);
    dt_model_destroy(m[1]);
    dt_arena_destroy(arena);
}

/* Clipping over a group (dt_clip_grad_norm_group, issue 30): each rank
 * holds 1/t of a gradient vector; the norm is the whole vector's and each
 * slice is scaled as the whole one is, to relative 1e-6. */
static void check_clip_group(dt_comm *tp, int t)
{
    enum { N = 120 };
    float whole[N], mine[N];
    dt_rng r;
    dt_rng_seed(&r, 3);
    for (int i = 0; i < N; i++)
        whole[i] = 2.0f * dt_rng_uniform(&r) - 1.0f;
    int64_t c = N / t;
    memcpy(mine, whole + c * rank, (size_t)c * sizeof(float));
    float want_norm = dt_clip_grad_norm(whole, N, 1.0f), norm = -1;
    CALL(dt_clip_grad_norm_group(mine, c, 1.0f, tp, &norm));
    double dn = fabs((double)norm - want_norm) / want_norm, dv = 0;
    for (int64_t i = 0; i < c; i++)
        dv = fmax(dv, fabs((double)mine[i] - whole[c * rank + i]) / fabs((double)whole[c * rank + i]));
    if (dn > 1e-6 || dv > 1e-6 || !(want_norm > 1.0f)) {
        fprintf(stderr,
                "tp_check rank %d (t=%d): group clipping: norm %.9g against %.9g, slice within %.2g\n", rank,
                t, norm, want_norm, dv);
        failures++;
    }
    printf("tp_check rank %d: t=%d: clipping over the group: norm %.7g (whole vector %.7g), clipped slice "
           "within %.2g\n",
           rank, t, norm, want_norm, dv);
}

/* Sequence parallelism on against off, both tp = t with dropout 0.1 from
 * the same seed: every step's loss to relative 1e-5 (issue 31). */
static void check_sequence_parallel(int t, const float *off, const float *on)
{
    double worst = 0;
    for (int step = 0; step < GPT_STEPS; step++)
        worst = fmax(worst, fabs((double)on[step] - off[step]) / fabs((double)off[step]));
    if (worst > 1e-5) {
        fprintf(stderr, "tp_check rank %d (t=%d): sequence parallel on against off: losses differ by %.2g\n",
                rank, t, worst);
        failures++;
    }
    printf("tp_check rank %d: t=%d: gpt (dropout 0.1), sequence parallel on against off: %d-step losses "
           "within %.2g\n",
           rank, t, GPT_STEPS, worst);
}

int main(void)
{
    dt_comm *world;
    CALL(dt_comm_init_env(&world));
    rank = dt_comm_rank(world);
    int t = dt_comm_size(world);
    dt_tp_group group = dt_tp_group_of_comm(world); /* the layers' view of it */

    /* A size the group does not divide is refused, naming the numbers. */
    dt_params *bad;
    dt_layer *l = NULL;
    CALL(dt_params_create(&bad));
    if (t > 1) {
        dt_status s = dt_linear_parallel_create(bad, "odd", IN, H + 1, true, DT_TP_COLUMN, &group, &l);
        if (s != DT_ERR_INVALID || !strstr(dt_last_error(), "not divisible by")) {
            fprintf(stderr, "tp_check: a 49-wide column split over %d ranks: %s (%s)\n", t, dt_status_name(s),
                    dt_last_error());
            failures++;
        }
    }
    dt_params_destroy(bad);

    if (t > 1) { /* heads the group does not divide */
        dt_params *q;
        CALL(dt_params_create(&q));
        dt_status s = dt_attention_parallel_create(q, "a", 35, 5 + (t % 5 == 0), &group, &l);
        if (s != DT_ERR_INVALID || !strstr(dt_last_error(), "cannot be split")) {
            fprintf(stderr, "tp_check: heads not divisible by %d: %s (%s)\n", t, dt_status_name(s), dt_last_error());
            failures++;
        }
        dt_params_destroy(q);
    }
    check_attention(&group, t);
    check_cross_entropy(&group, t);
    float off[GPT_STEPS] = {0}, on[GPT_STEPS] = {0};
    check_gpt(world, t, 0.0f, false, off);
    check_gpt(world, t, 0.1f, false, off);
    check_gpt(world, t, 0.1f, true, on);
    check_sequence_parallel(t, off, on);
    check_clip_group(world, t);

    model ref, tp;
    build(&ref, NULL);
    build(&tp, &group);
    compare(ref.p, tp.p, t, false, true); /* initial weights: bitwise */

    float *x = malloc(sizeof(float) * BATCH * IN);
    int32_t y[BATCH];
    dt_rng g;
    dt_rng_seed(&g, 77);
    for (int i = 0; i < BATCH * IN; i++)
        x[i] = 2.0f * dt_rng_uniform(&g) - 1.0f;
    for (int i = 0; i < BATCH; i++)
        y[i] = (int32_t)(dt_rng_uniform(&g) * OUT) % OUT;

    double worst_grad = 0, worst_loss = 0;
    for (int s = 0; s < STEPS; s++) {
        float a = step(&ref, x, y), b = step(&tp, x, y);
        double rel = fabs((double)a - b) / fabs((double)a);
        worst_loss = fmax(worst_loss, rel);
        if (s == 0) {
            worst_grad = compare(ref.p, tp.p, t, true, false);
            if (rel > 1e-5 || worst_grad > 1e-5) {
                fprintf(stderr, "tp_check rank %d (t=%d): step 0: loss %.9g against %.9g, gradients differ by %.2g\n",
                        rank, t, b, a, worst_grad);
                failures++;
            }
        } else if (rel > 1e-4) {
            fprintf(stderr, "tp_check rank %d (t=%d): step %d: loss %.9g against %.9g\n", rank, t, s, b, a);
            failures++;
        }
        sgd(&ref, 0.2f);
        sgd(&tp, 0.2f);
    }
    printf("tp_check rank %d: t=%d: %lld of %lld parameters here; step 0 gradients within %.2g, %d-step losses within "
           "%.2g\n",
           rank, t, (long long)dt_params_numel(tp.p), (long long)dt_params_numel(ref.p), worst_grad, STEPS, worst_loss);
    int all = 0;
    CALL(dt_allreduce(&failures, &all, 1, DT_I32, DT_SUM, world));
    if (rank == 0)
        printf("tp_check: t=%d: %s\n", t, all ? "FAILED" : "ok");
    model *ms[2] = {&ref, &tp};
    for (int k = 0; k < 2; k++) {
        dt_layer_destroy(ms[k]->net);
        dt_params_destroy(ms[k]->p);
        dt_arena_destroy(ms[k]->arena);
    }
    free(x);
    CALL(dt_comm_destroy(world));
    return all ? 1 : 0;
}
