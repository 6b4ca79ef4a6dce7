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
 *    compressor with an f16 wire;
 *  - PowerSGD's fast kernels (DT_POWERSGD_KERNELS=fast, powersgd_fast.h)
 *    against the reference: the Gram-Schmidt bitwise for ranks below, at
 *    and above its window width (zero and dependent columns too); through
 *    dt_ddp, the gradients returned and the error held within 1e-5 of the
 *    largest magnitude over 6 steps, and bitwise the same on 1 and 3 compute
 *    threads.
 * Alone it is one rank; tests/run_tests.sh runs it under dtrun -n 2 too. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "dtrain/dtrain.h"
#include "parallel/ddp/powersgd_fast.h"

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

/* The fast Gram-Schmidt is the reference's arithmetic, bitwise (NaN: the
 * same positions). */
static void test_orthogonalise(void)
{
    const int ranks[] = {1, 3, 16, 31, 32, 33, 40, 64, 70};
    const int64_t rows[] = {1, 7, 64, 300};
    dt_rng x;
    dt_rng_seed(&x, 5);
    int checked = 0;
    for (size_t a = 0; a < sizeof ranks / sizeof ranks[0]; a++)
        for (size_t b = 0; b < sizeof rows / sizeof rows[0]; b++)
            for (int special = 0; special < 2; special++) {
                int r = ranks[a];
                int64_t n = rows[b] * r;
                float *p = malloc((size_t)n * sizeof *p), *q = malloc((size_t)n * sizeof *q);
                double *dot = malloc((size_t)r * sizeof *dot);
                for (int64_t i = 0; i < n; i++)
                    p[i] = dt_rng_normal(&x);
                /* special: a zero column, a dependent one, an inf */
                for (int64_t j = 0; special && j < rows[b]; j++) {
                    if (r > 1)
                        p[j * r + 1] = 0;
                    if (r > 2)
                        p[j * r + r - 1] = 2 * p[j * r];
                    if (j == rows[b] / 2 && r > 3)
                        p[j * r + 2] = INFINITY;
                }
                memcpy(q, p, (size_t)n * sizeof *p);
                dt__psgd_orthogonalise_ref(p, rows[b], r);
                dt__psgd_orthogonalise(q, rows[b], r, dot);
                int64_t differ = 0;
                for (int64_t i = 0; i < n; i++)
                    differ += memcmp(&p[i], &q[i], sizeof *p) != 0 && !(isnan(p[i]) && isnan(q[i]));
                if (differ)
                    printf("orthogonalise %lld x %d (special %d): %lld of %lld differ\n", (long long)rows[b],
                           r, special, (long long)differ, (long long)n);
                EXPECT(differ == 0);
                checked++;
                free(p);
                free(q);
                free(dot);
            }
    printf("orthogonalise: fast == reference bitwise in %d shapes\n", checked);
}

/* A registry whose matrices reach several of the fast kernels' blocks. */
static dt_params *make_big_params(void)
{
    dt_params *p = NULL;
    EXPECT_STATUS(dt_params_create(&p), DT_OK);
    const int64_t shapes[][2] = {{300, 200}, {40, 0}, {160, 130}, {70, 90}, {1100, 40}};
    for (int i = 0; i < 5; i++) {
        char name[16];
        snprintf(name, sizeof name, "b%d", i);
        int idx;
        EXPECT_STATUS(dt_params_add(p, name, shapes[i][1] ? 2 : 1, shapes[i], &idx), DT_OK);
    }
    EXPECT_STATUS(dt_params_finalize(p), DT_OK);
    return p;
}

static dt_ddp *psgd_ddp(dt_comm *c, dt_params *p, int rank, const char *kernels)
{
    dt_ddp_config cfg = {.bucket_bytes = 70000 * sizeof(float), .wire = DT_F32, .compressor = DT_DDP_POWERSGD,
                         .powersgd_rank = rank};
    dt_ddp *d = NULL;
    setenv("DT_POWERSGD_KERNELS", kernels, 1);
    EXPECT_STATUS(dt_ddp_create(c, p, &cfg, &d), DT_OK);
    unsetenv("DT_POWERSGD_KERNELS");
    return d;
}

/* The fast kernels against the reference through dt_ddp, step after step
 * (Q carries each step's rounding into the next). */
static void test_fast_matches_reference(dt_comm *c, int psgd_rank)
{
    int rank = dt_comm_rank(c);
    dt_params *p = make_big_params();
    int64_t n = dt_params_numel(p);
    dt_ddp *ref = psgd_ddp(c, p, psgd_rank, "reference"), *fast = psgd_ddp(c, p, psgd_rank, "fast"),
           *fast3 = psgd_ddp(c, p, psgd_rank, "fast");
    EXPECT(dt_ddp_buckets(ref) >= 2);
    float *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * sizeof *got);
    double worst = 0, worst_err = 0;
    for (int s = 1; s <= 6; s++) {
        step(ref, p, rank, s);
        memcpy(want, dt_params_grads(p), (size_t)n * sizeof *want);
        step(fast, p, rank, s);
        memcpy(got, dt_params_grads(p), (size_t)n * sizeof *got);
        EXPECT_STATUS(dt_set_threads(3), DT_OK);
        step(fast3, p, rank, s);
        EXPECT_STATUS(dt_set_threads(1), DT_OK);
        EXPECT(memcmp(got, dt_params_grads(p), (size_t)n * sizeof *got) == 0); /* whatever the threads */
        EXPECT(memcmp(dt_ddp_error(fast), dt_ddp_error(fast3), (size_t)n * sizeof(float)) == 0);
        double big = 0, big_err = 0, d = 0, d_err = 0;
        const float *ew = dt_ddp_error(ref), *eg = dt_ddp_error(fast);
        for (int64_t i = 0; i < n; i++) {
            big = fmax(big, fabs(want[i]));
            big_err = fmax(big_err, fabs(ew[i]));
            d = fmax(d, fabs((double)want[i] - got[i]));
            d_err = fmax(d_err, fabs((double)ew[i] - eg[i]));
        }
        worst = fmax(worst, d / big);
        worst_err = fmax(worst_err, d_err / big_err);
    }
    printf("powersgd r%d fast against reference, 6 steps: gradients within %.2e, error within %.2e of the "
           "largest magnitude (tolerance 1e-5)\n", psgd_rank, worst, worst_err);
    EXPECT(worst < 1e-5);
    EXPECT(worst_err < 1e-5);
    dt_ddp_destroy(ref);
    dt_ddp_destroy(fast);
    dt_ddp_destroy(fast3);
    free(want);
    free(got);
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
    test_orthogonalise();
    test_fast_matches_reference(c, 32);
    test_fast_matches_reference(c, 7);
    dt_comm_destroy(c);
    return CHECK_DONE("test_compress");
}
