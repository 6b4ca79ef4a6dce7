/* The tensor-parallel group interface (dt_tp_group, dtrain/nn.h) on its own:
 * the layers get their group from this test, not from a communicator.  The
 * t ranks are t threads of this process, exchanging through shared buffers
 * between barriers (each sum taken in rank order, so every rank gets the
 * same bits).  Over it, for t = 2 and 3:
 *  - a column-parallel then row-parallel linear pair against the unsplit
 *    pair from the same seed: shards bitwise their slices of its weights,
 *    output, input gradient and every parameter gradient within 1e-5;
 *  - a GPT with sequence parallelism and dropout (every entry of the group:
 *    allreduce, allgather, reduce-scatter, and the loss's sum and maximum
 *    over doubles) against the unsplit GPT: step-0 loss and the gradients
 *    of its split tensors within 1e-5;
 *  - the vocabulary-parallel loss on logits up to 1650 (which overflow
 *    unless the maximum is the group's) against the ordinary
 *    loss: loss and gradient slices within 1e-5;
 * and a group that breaks the contract (a missing entry, a rank outside
 * it) refused naming the fault. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtrain/dtrain.h"

enum { MAX_RANKS = 4, SEED = 5 };

/* ---- a group of threads ---- */
typedef struct {
    int size;
    pthread_barrier_t barrier;
    const void *slot[MAX_RANKS]; /* each rank's published buffer */
    long calls[5];               /* per entry, summed over ranks */
    pthread_mutex_t mu;
} bus;

typedef struct {
    bus *b;
    int rank;
} member;

static void count(bus *b, int entry)
{
    pthread_mutex_lock(&b->mu);
    b->calls[entry]++;
    pthread_mutex_unlock(&b->mu);
}

/* Publish buf, wait for every rank's. */
static void publish(member *m, const void *buf)
{
    m->b->slot[m->rank] = buf;
    pthread_barrier_wait(&m->b->barrier);
}

static dt_status sum_f32(void *user, float *buf, int64_t n)
{
    member *m = user;
    count(m->b, 0);
    float *acc = malloc((size_t)(n ? n : 1) * sizeof *acc);
    publish(m, buf);
    for (int64_t i = 0; i < n; i++) {
        float s = 0;
        for (int r = 0; r < m->b->size; r++)
            s += ((const float *)m->b->slot[r])[i];
        acc[i] = s;
    }
    pthread_barrier_wait(&m->b->barrier); /* every rank has read every buffer */
    memcpy(buf, acc, (size_t)n * sizeof *buf);
    free(acc);
    return DT_OK;
}

static dt_status reduce_f64(member *m, double *buf, int64_t n, bool max)
{
    double *acc = malloc((size_t)(n ? n : 1) * sizeof *acc);
    publish(m, buf);
    for (int64_t i = 0; i < n; i++) {
        double s = ((const double *)m->b->slot[0])[i];
        for (int r = 1; r < m->b->size; r++) {
            double v = ((const double *)m->b->slot[r])[i];
            s = max ? fmax(s, v) : s + v;
        }
        acc[i] = s;
    }
    pthread_barrier_wait(&m->b->barrier);
    memcpy(buf, acc, (size_t)n * sizeof *buf);
    free(acc);
    return DT_OK;
}

static dt_status sum_f64(void *user, double *buf, int64_t n)
{
    count(((member *)user)->b, 1);
    return reduce_f64(user, buf, n, false);
}

static dt_status max_f64(void *user, double *buf, int64_t n)
{
    count(((member *)user)->b, 2);
    return reduce_f64(user, buf, n, true);
}

static dt_status gather(void *user, const float *mine, float *all, int64_t n_each)
{
    member *m = user;
    count(m->b, 3);
    publish(m, mine);
    for (int r = 0; r < m->b->size; r++)
        memcpy(all + r * n_each, m->b->slot[r], (size_t)n_each * sizeof *all);
    pthread_barrier_wait(&m->b->barrier);
    return DT_OK;
}

static dt_status scatter_sum(void *user, const float *all, float *mine, int64_t n_each)
{
    member *m = user;
    count(m->b, 4);
    publish(m, all);
    for (int64_t i = 0; i < n_each; i++) {
        float s = 0;
        for (int r = 0; r < m->b->size; r++)
            s += ((const float *)m->b->slot[r])[m->rank * n_each + i];
        mine[i] = s;
    }
    pthread_barrier_wait(&m->b->barrier);
    return DT_OK;
}

static dt_tp_group group_of(member *m)
{
    return (dt_tp_group){.rank = m->rank,
                         .size = m->b->size,
                         .user = m,
                         .allreduce_sum = sum_f32,
                         .allreduce_sum_f64 = sum_f64,
                         .allreduce_max_f64 = max_f64,
                         .allgather = gather,
                         .reduce_scatter_sum = scatter_sum};
}

/* ---- each rank's checks (counted under a lock: check.h's counters are shared) ---- */
static pthread_mutex_t check_mu = PTHREAD_MUTEX_INITIALIZER;

#define CALL(x)                                                                                        \
    do {                                                                                               \
        dt_status s_ = (x);                                                                            \
        if (s_ != DT_OK) {                                                                             \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, dt_last_error());              \
            return -1;                                                                                 \
        }                                                                                              \
    } while (0)

/* The largest difference of every parameter of tpp (values or gradients)
 * against its slice of the same-named parameter of refp, relative to that
 * tensor's largest magnitude; tp_partial ones skipped (their gradients are
 * parts, summed by a strategy). */
static double compare(dt_params *refp, dt_params *tpp, bool grads)
{
    double worst = 0;
    for (int k = 0; k < dt_params_count(tpp); k++) {
        const dt_param_info *si = dt_params_info(tpp, k);
        int rk = dt_params_find(refp, si->name);
        if (rk < 0)
            return INFINITY;
        if (grads && si->tp_partial)
            continue;
        const dt_param_info *ri = dt_params_info(refp, rk);
        const float *sv = grads ? dt_param_grad(tpp, k) : dt_param_value(tpp, k);
        const float *fv = grads ? dt_param_grad(refp, rk) : dt_param_value(refp, rk);
        double scale = 0;
        for (int64_t i = 0; i < ri->numel; i++)
            scale = fmax(scale, fabs(fv[i]));
        for (int64_t i = 0; i < ri->numel; i++) {
            int64_t at = dt_param_shard_index(si, i);
            if (at >= 0)
                worst = fmax(worst, fabs((double)sv[at] - fv[i]) / (scale > 0 ? scale : 1));
        }
    }
    return worst;
}

typedef struct {
    dt_params *p;
    dt_layer *net;
} pair;

enum { BATCH = 5, IN = 12, HID = 24, OUT = 6 };

/* fc1 (IN -> HID) then fc2 (HID -> OUT), split column then row over g when given. */
static int build_pair(pair *m, const dt_tp_group *g)
{
    dt_layer *l;
    CALL(dt_params_create(&m->p));
    CALL(dt_sequential_create("mlp", &m->net));
    CALL(g ? dt_linear_parallel_create(m->p, "fc1", IN, HID, true, DT_TP_COLUMN, g, &l)
           : dt_linear_create(m->p, "fc1", IN, HID, true, &l));
    CALL(dt_sequential_append(m->net, l));
    CALL(dt_relu_create("relu1", &l));
    CALL(dt_sequential_append(m->net, l));
    CALL(g ? dt_linear_parallel_create(m->p, "fc2", HID, OUT, true, DT_TP_ROW, g, &l)
           : dt_linear_create(m->p, "fc2", HID, OUT, true, &l));
    CALL(dt_sequential_append(m->net, l));
    CALL(dt_params_finalize(m->p));
    m->net->ops->init(m->net, m->p, SEED);
    return 0;
}

/* Forward x, backward of loss = sum(y * w): the output and the input gradient. */
static int run_pair(pair *m, dt_arena *a, const float *x, const float *w, float *y, float *dx)
{
    dt_arena_reset(a);
    dt_params_zero_grads(m->p);
    dt_ctx ctx = {.arena = a, .params = m->p, .training = true};
    dt_tensor xt = dt_tensor_view((float *)x, 2, (int64_t[]){BATCH, IN}), out, dxt;
    CALL(m->net->ops->forward(m->net, &ctx, &xt, &out));
    memcpy(y, out.data, sizeof(float) * BATCH * OUT);
    dt_tensor dy = dt_tensor_view((float *)w, 2, (int64_t[]){BATCH, OUT});
    CALL(m->net->ops->backward(m->net, &ctx, &dy, &dxt, true));
    memcpy(dx, dxt.data, sizeof(float) * BATCH * IN);
    return 0;
}

static double max_diff(const float *a, const float *b, int64_t n)
{
    double d = 0;
    for (int64_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static int check_pair(const dt_tp_group *g, double *worst)
{
    float x[BATCH * IN], w[BATCH * OUT], y[2][BATCH * OUT], dx[2][BATCH * IN];
    dt_rng r;
    dt_rng_seed(&r, 3);
    for (int i = 0; i < BATCH * IN; i++)
        x[i] = 2 * dt_rng_uniform(&r) - 1;
    for (int i = 0; i < BATCH * OUT; i++)
        w[i] = 2 * dt_rng_uniform(&r) - 1;
    pair m[2] = {0};
    dt_arena *a;
    CALL(dt_arena_create(&a));
    if (build_pair(&m[0], NULL) || build_pair(&m[1], g))
        return -1;
    worst[0] = compare(m[0].p, m[1].p, false); /* the shards: bitwise slices */
    for (int k = 0; k < 2; k++)
        if (run_pair(&m[k], a, x, w, y[k], dx[k]))
            return -1;
    worst[1] = fmax(max_diff(y[0], y[1], BATCH * OUT), max_diff(dx[0], dx[1], BATCH * IN));
    worst[2] = compare(m[0].p, m[1].p, true);
    for (int k = 0; k < 2; k++) {
        dt_layer_destroy(m[k].net);
        dt_params_destroy(m[k].p);
    }
    dt_arena_destroy(a);
    return 0;
}

/* A GPT with sequence parallelism and dropout over g against the unsplit one: step-0 loss and gradients. */
static int check_gpt(const dt_tp_group *g, double *worst)
{
    dt_gpt_config c = {.vocab = 48, .context = 12, .layers = 1, .heads = 6, .dim = 24, .dropout = 0.1f};
    dt_model *m[2];
    CALL(dt_gpt_create(&c, &m[0]));
    c.tp = *g;
    c.sequence_parallel = true;
    CALL(dt_gpt_create(&c, &m[1]));
    dt_arena *a;
    CALL(dt_arena_create(&a));
    enum { B = 2, T = 12 };
    float ids[B * T];
    int32_t y[B * T];
    dt_rng r;
    dt_rng_seed(&r, 11);
    for (int i = 0; i < B * T; i++) {
        ids[i] = (float)((int)(dt_rng_uniform(&r) * 48) % 48);
        y[i] = i % 7 == 3 ? -1 : (int32_t)(dt_rng_uniform(&r) * 48) % 48;
    }
    float loss[2];
    for (int k = 0; k < 2; k++) {
        dt_model_init(m[k], SEED);
        dt_arena_reset(a);
        dt_params_zero_grads(dt_model_params(m[k]));
        dt_ctx ctx = {.arena = a, .key = {SEED, 0, 0, 0}, .training = true};
        dt_tensor x = dt_tensor_view(ids, 2, (int64_t[]){B, T}), out, dout;
        CALL(dt_model_forward(m[k], &ctx, &x, &out));
        dout = out;
        dout.data = dt_arena_alloc(a, dt_tensor_numel(&out));
        CALL(dt_model_loss(m[k], &out, y, &loss[k], &dout));
        CALL(dt_model_backward(m[k], &ctx, &dout));
    }
    worst[3] = fabs((double)loss[0] - loss[1]) / loss[0];
    worst[4] = compare(dt_model_params(m[0]), dt_model_params(m[1]), true);
    dt_model_destroy(m[0]);
    dt_model_destroy(m[1]);
    dt_arena_destroy(a);
    return 0;
}

/* The vocabulary-parallel loss over g against the ordinary one, on logits
 * that grow by 150 a class: each rank's maximum is over 709 below the
 * next's, so exp overflows unless the shift is the maximum over the group. */
static int check_loss(const dt_tp_group *g, double *worst)
{
    enum { N = 6, V = 12 };
    float z[N * V], dz[N * V], zl[N * V], dzl[N * V];
    int32_t y[N];
    dt_rng r;
    dt_rng_seed(&r, 7);
    for (int i = 0; i < N * V; i++)
        z[i] = 150.0f * (float)(i % V) + 20 * dt_rng_uniform(&r) - 10;
    for (int i = 0; i < N; i++)
        y[i] = i == 4 ? -1 : (int32_t)(dt_rng_uniform(&r) * V) % V;
    int64_t c = V / g->size, start = c * g->rank;
    for (int i = 0; i < N; i++)
        memcpy(zl + i * c, z + i * V + start, sizeof(float) * (size_t)c);
    dt_tensor zt = dt_tensor_view(z, 2, (int64_t[]){N, V}), dzt = dt_tensor_view(dz, 2, (int64_t[]){N, V});
    dt_tensor zlt = dt_tensor_view(zl, 2, (int64_t[]){N, c});
    dt_tensor dzlt = dt_tensor_view(dzl, 2, (int64_t[]){N, c});
    float want, got;
    CALL(dt_softmax_cross_entropy(&zt, y, &want, &dzt));
    CALL(dt_softmax_cross_entropy_parallel(&zlt, y, V, start, g, &got, &dzlt));
    worst[5] = fabs((double)got - want) / fabs((double)want);
    for (int i = 0; i < N; i++)
        for (int64_t k = 0; k < c; k++)
            worst[5] = fmax(worst[5], fabs((double)dzl[i * c + k] - dz[i * V + start + k]));
    return 0;
}

typedef struct {
    member m;
    /* shards, pair output and dx, pair gradients, gpt loss, gpt gradients, the loss on wide logits */
    double worst[6];
    int failed;
} rank_job;

static void *rank_main(void *arg)
{
    rank_job *j = arg;
    dt_tp_group g = group_of(&j->m);
    j->failed = check_pair(&g, j->worst) || check_gpt(&g, j->worst) || check_loss(&g, j->worst);
    return NULL;
}

static void run_group(int t)
{
    bus b = {.size = t, .mu = PTHREAD_MUTEX_INITIALIZER};
    pthread_barrier_init(&b.barrier, NULL, (unsigned)t);
    rank_job jobs[MAX_RANKS];
    pthread_t th[MAX_RANKS];
    for (int r = 0; r < t; r++) {
        jobs[r] = (rank_job){.m = {&b, r}};
        pthread_create(&th[r], NULL, rank_main, &jobs[r]);
    }
    for (int r = 0; r < t; r++)
        pthread_join(th[r], NULL);
    pthread_barrier_destroy(&b.barrier);
    pthread_mutex_lock(&check_mu);
    for (int r = 0; r < t; r++) {
        EXPECT_EQ(jobs[r].failed, 0);
        EXPECT(jobs[r].worst[0] == 0); /* the shards bitwise */
        for (int k = 1; k < 6; k++)
            if (!(jobs[r].worst[k] <= 1e-5)) {
                fprintf(stderr, "t=%d rank %d: check %d differs by %.3g from the unsplit model\n", t, r, k,
                        jobs[r].worst[k]);
                EXPECT(jobs[r].worst[k] <= 1e-5);
            }
        printf("t=%d rank %d: pair output/dx within %.2g, gradients %.2g; gpt (sequence parallel) loss within "
               "%.2g, gradients %.2g; vocabulary-parallel loss on logits up to 1650 within %.2g\n",
               t, r, jobs[r].worst[1], jobs[r].worst[2], jobs[r].worst[3], jobs[r].worst[4], jobs[r].worst[5]);
    }
    for (int e = 0; e < 5; e++) /* every entry was used, and by every rank alike */
        EXPECT(b.calls[e] > 0 && b.calls[e] % t == 0);
    pthread_mutex_unlock(&check_mu);
    pthread_mutex_destroy(&b.mu);
}

/* A group that breaks its contract is refused where it is given, naming the fault. */
static void test_refusals(void)
{
    bus b = {.size = 2};
    member m = {&b, 0};
    dt_tp_group g = group_of(&m);
    dt_params *p;
    dt_layer *l = NULL;
    EXPECT_STATUS(dt_params_create(&p), DT_OK);
    g.allgather = NULL;
    EXPECT_STATUS(dt_linear_parallel_create(p, "fc", 4, 4, true, DT_TP_COLUMN, &g, &l), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "linear fc: the tensor-parallel group has no allgather");
    g = group_of(&m);
    g.rank = 2;
    EXPECT_STATUS(dt_attention_parallel_create(p, "attn", 8, 2, &g, &l), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "attention attn: tensor-parallel rank 2 of 2 ranks");
    EXPECT_STATUS(dt_linear_parallel_create(p, "fc", 4, 4, true, DT_TP_ROW, NULL, &l), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "the tensor-parallel group is NULL");
    dt_model_desc *d = NULL;
    dt_gpt_config c = {.vocab = 8, .context = 4, .layers = 1, .heads = 2, .dim = 8, .tp = g};
    EXPECT_STATUS(dt_gpt_describe(&c, &d), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "gpt: tensor-parallel rank 2 of 2 ranks");
    dt_params_destroy(p);
}

int main(void)
{
    dt_set_threads(1); /* the ranks are the threads */
    run_group(2);
    run_group(3);
    test_refusals();
    return CHECK_DONE("test_tp_group");
}
