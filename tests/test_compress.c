/* Data parallelism's gradient compressors (issue 51; dt_ddp_config's
 * compressor), through dt_ddp on a registry with matrices worth
 * compressing, a vector and a small matrix sent as it is, cut into several
 * buckets:
 *  - error feedback accounted: after T steps of random gradients, the
 *    average over ranks of (the gradients given - the error held) equals
 *    the sum of what the steps returned (within f32 tolerance), for
 *    PowerSGD and top-k; the first compress_start steps are exact;
 *  - compression happened (an error is held) and every rank got the same
 *    bits each step;
 *  - the state saved after step 5 and loaded into a fresh dt_ddp gives
 *    steps 6.. bitwise the same as the uninterrupted run; a state of the
 *    other compressor is refused naming it;
 *  - top-k with fraction 1 returns the average exactly, with no error;
 *  - refusals: a fraction outside (0, 1], a rank outside [1, 1024], a
 *    compressor with an f16 wire.
 * Alone it is one rank; tests/run_tests.sh runs it under dtrun -n 2 too. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "dtrain/dtrain.h"

#define STEPS 8
#define START 2

static dt_params *make_params(void)
{
    dt_params *p = NULL;
    EXPECT_STATUS(dt_params_create(&p), DT_OK);
    const int64_t shapes[][2] = {{48, 40}, {48, 0}, {16, 30}, {4, 3}, {64, 24}};
    for (int i = 0; i < 5; i++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        int idx;
        EXPECT_STATUS(dt_params_add(p, name, shapes[i][1] ? 2 : 1, shapes[i], &idx), DT_OK);
    }
    EXPECT_STATUS(dt_params_finalize(p), DT_OK);
    return p;
}

/* Step s's gradients on rank r: normals with a rank-2 structure plus noise. */
static void fill(float *g, int64_t n, int rank, int step)
{
    dt_rng x;
    dt_rng_seed(&x, 1000u * (uint64_t)step + (uint64_t)rank + 1);
    for (int64_t i = 0; i < n; i++)
        g[i] = 0.5f * sinf((float)i * 0.01f * (float)(1 + step % 3)) + dt_rng_normal(&x);
}

static uint64_t hash(const float *v, int64_t n)
{
    uint64_t h = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)v;
    for (size_t i = 0; i < (size_t)n * sizeof *v; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static bool same_on_every_rank(dt_comm *c, uint64_t h)
{
    int64_t mine[2] = {(int64_t)h, -(int64_t)h}, ext[2];
    EXPECT_STATUS(dt_allreduce(mine, ext, 2, DT_I64, DT_MAX, c), DT_OK);
    return ext[0] == -ext[1];
}

/* One synchronised step of given gradients; the result's hash. */
static uint64_t step(dt_ddp *d, dt_params *p, int rank, int s)
{
    int64_t n = dt_params_numel(p);
    fill(dt_params_grads(p), n, rank, s);
    EXPECT_STATUS(dt_ddp_finish(d), DT_OK);
    return hash(dt_params_grads(p), n);
}

static void test_accounting(dt_comm *c, dt_ddp_compressor kind, const char *name)
{
    int rank = dt_comm_rank(c);
    dt_params *p = make_params();
    int64_t n = dt_params_numel(p);
    dt_ddp_config cfg = {.bucket_bytes = 1500 * sizeof(float), .wire = DT_F32, .compressor = kind,
                         .powersgd_rank = 2, .compress_start = START, .topk_fraction = 0.1};
    dt_ddp *d = NULL;
    EXPECT_STATUS(dt_ddp_create(c, p, &cfg, &d), DT_OK);
    EXPECT(dt_ddp_buckets(d) >= 3);
    double *given = calloc((size_t)n, sizeof *given), *sent = calloc((size_t)n, sizeof *sent);
    float *g = malloc((size_t)n * sizeof *g);
    uint64_t after[STEPS + 1] = {0};
    char path[256];
    snprintf(path, sizeof path, "/tmp/dtrain-test-compress-%d-%s-%d.bin", (int)getpid(), name, rank);
    for (int s = 1; s <= STEPS; s++) {
        fill(g, n, rank, s);
        for (int64_t i = 0; i < n; i++)
            given[i] += g[i];
        after[s] = step(d, p, rank, s);
        EXPECT(same_on_every_rank(c, after[s]));
        const float *out = dt_params_grads(p), *err = dt_ddp_error(d);
        double held = 0;
        for (int64_t i = 0; i < n; i++) {
            sent[i] += out[i];
            held += fabs(err[i]);
        }
        if (s <= START)
            EXPECT(held == 0); /* uncompressed steps */
        else
            EXPECT(held > 0);
        if (s == 5)
            EXPECT_STATUS(dt_ddp_state_save(d, path), DT_OK);
    }
    EXPECT_EQ(dt_ddp_steps(d), (int64_t)STEPS);
    /* average over ranks of (given - held) == sum of what was returned */
    const float *err = dt_ddp_error(d);
    double *v = malloc((size_t)n * sizeof *v), *avg = malloc((size_t)n * sizeof *avg);
    for (int64_t i = 0; i < n; i++)
        v[i] = given[i] - err[i];
    EXPECT_STATUS(dt_allreduce(v, avg, (size_t)n, DT_F64, DT_AVG, c), DT_OK);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(avg[i] - sent[i]) / (1 + fabs(sent[i]));
        worst = e > worst ? e : worst;
    }
    printf("%s: %d ranks, %lld elements, %d buckets, worst accounting error %.2e\n", name, dt_comm_size(c),
           (long long)n, dt_ddp_buckets(d), worst);
    EXPECT(worst < 1e-5);
    dt_ddp_destroy(d);

    /* resume: the state after step 5 gives steps 6.. bitwise again */
    EXPECT_STATUS(dt_ddp_create(c, p, &cfg, &d), DT_OK);
    EXPECT_STATUS(dt_ddp_state_load(d, path, true), DT_OK);
    EXPECT_EQ(dt_ddp_steps(d), (int64_t)5);
    for (int s = 6; s <= STEPS; s++)
        EXPECT_EQ(step(d, p, rank, s), after[s]);
    dt_ddp_destroy(d);

    /* the other compressor's file is refused, naming this one */
    dt_ddp_config other = cfg;
    other.compressor = kind == DT_DDP_TOPK ? DT_DDP_POWERSGD : DT_DDP_TOPK;
    EXPECT_STATUS(dt_ddp_create(c, p, &other, &d), DT_OK);
    EXPECT_STATUS(dt_ddp_state_load(d, path, true), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "written by compressor");
    dt_ddp_destroy(d);
    unlink(path);
    free(given);
    free(sent);
    free(g);
    free(v);
    free(avg);
    dt_params_destroy(p);
}

/* Top-k with fraction 1 sends everything: the plain average, no error. */
static void test_topk_all(dt_comm *c)
{
    int rank = dt_comm_rank(c), world = dt_comm_size(c);
    dt_params *p = make_params();
    int64_t n = dt_params_numel(p);
    dt_ddp_config cfg = {.bucket_bytes = 1500 * sizeof(float), .wire = DT_F32, .compressor = DT_DDP_TOPK,
                         .topk_fraction = 1.0};
    dt_ddp *d = NULL;
    EXPECT_STATUS(dt_ddp_create(c, p, &cfg, &d), DT_OK);
    float *want = calloc((size_t)n, sizeof *want), *g = malloc((size_t)n * sizeof *g);
    for (int r = 0; r < world; r++) { /* the same sums in the same order */
        fill(g, n, r, 1);
        for (int64_t i = 0; i < n; i++)
            want[i] += g[i];
    }
    for (int64_t i = 0; i < n; i++)
        want[i] /= (float)world;
    step(d, p, rank, 1);
    EXPECT(memcmp(dt_params_grads(p), want, (size_t)n * sizeof *want) == 0);
    for (int64_t i = 0; i < n; i++)
        EXPECT(dt_ddp_error(d)[i] == 0);
    dt_ddp_destroy(d);
    free(want);
    free(g);
    dt_params_destroy(p);
}

static void test_refusals(dt_comm *c)
{
    dt_params *p = make_params();
    dt_ddp *d = NULL;
    dt_ddp_config cfg = {.wire = DT_F32, .compressor = DT_DDP_TOPK, .topk_fraction = 1.5};
    EXPECT_STATUS(dt_ddp_create(c, p, &cfg, &d), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "topk fraction 1.5 is outside (0, 1]");
    cfg.topk_fraction = -0.1;
    EXPECT_STATUS(dt_ddp_create(c, p, &cfg, &d), DT_ERR_INVALID);
    cfg = (dt_ddp_config){.wire = DT_F32, .compressor = DT_DDP_POWERSGD, .powersgd_rank = 2000};
    EXPECT_STATUS(dt_ddp_create(c, p, &cfg, &d), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "powersgd rank 2000 is outside [1, 1024]");
    cfg = (dt_ddp_config){.wire = DT_F16, .compressor = DT_DDP_POWERSGD};
    EXPECT_STATUS(dt_ddp_create(c, p, &cfg, &d), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "compressor powersgd with wire f16");
    EXPECT(d == NULL);
    EXPECT(dt_ddp_error(NULL) == NULL);
    dt_params_destroy(p);
}

int main(void)
{
    dt_comm *c = NULL;
    EXPECT_STATUS(dt_comm_init_env(&c), DT_OK);
    test_accounting(c, DT_DDP_POWERSGD, "powersgd");
    test_accounting(c, DT_DDP_TOPK, "topk");
    test_topk_all(c);
    test_refusals(c);
    dt_comm_destroy(c);
    return CHECK_DONE("test_compress");
}
