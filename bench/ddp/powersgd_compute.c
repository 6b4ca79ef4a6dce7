/* The compute a compressor adds to a data-parallel step (issue 51): gpt-mini's
 * gradients (or another size) through dt_ddp with one rank, so the
 * collectives cost nothing and dt_ddp_finish is the compressor's work alone
 * (PowerSGD: error add, P = M Q, Gram-Schmidt, Q = M^T P, P Q^T, error
 * update; the buckets as the trainer cuts them).
 *
 *     powersgd_compute [STEPS=30] [RANK=32] [DIM=256] [LAYERS=4] [COMPRESSOR=powersgd|topk|none|ab]
 * [THREADS=1]
 *
 * Prints the median and the minimum ms per step (wall, and the calling
 * thread's CPU time) of STEPS after 3 warm-up steps.  "ab": PowerSGD with
 * DT_POWERSGD_KERNELS=reference and =fast in the same process, their steps
 * alternating (a shared machine disturbs both alike), and the ratios of
 * their medians. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrain/dtrain.h"

static double now(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp);
    return t[n / 2];
}

static dt_status make(dt_comm *c, dt_params *p, const char *kind, int rank, const char *kernels, dt_ddp **d)
{
    dt_ddp_config cfg = {.wire = DT_F32,
                         .powersgd_rank = rank,
                         .topk_fraction = 0.3,
                         .compressor = !strcmp(kind, "topk")   ? DT_DDP_TOPK
                                       : !strcmp(kind, "none") ? DT_DDP_UNCOMPRESSED
                                                               : DT_DDP_POWERSGD};
    if (kernels)
        setenv("DT_POWERSGD_KERNELS", kernels, 1);
    return dt_ddp_create(c, p, &cfg, d);
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 30, rank = argc > 2 ? atoi(argv[2]) : 32;
    int64_t dim = argc > 3 ? atoll(argv[3]) : 256, layers = argc > 4 ? atoll(argv[4]) : 4;
    const char *kind = argc > 5 ? argv[5] : "powersgd";
    int threads = argc > 6 ? atoi(argv[6]) : 1;
    bool ab = !strcmp(kind, "ab");
    if (steps < 1 || steps > 100000 || rank < 1 || rank > 1024 || dim < 8 || layers < 1 || threads < 1) {
        fprintf(stderr, "usage: powersgd_compute [STEPS=30] [RANK=32] [DIM=256] [LAYERS=4] "
                        "[powersgd|topk|none|ab] [THREADS=1]\n");
        return 2;
    }
    dt_gpt_config g = {.vocab = 256, .context = 128, .layers = layers, .heads = 4, .dim = dim};
    dt_model_desc *desc = NULL;
    dt_model *m = NULL;
    dt_comm *c = NULL;
    dt_ddp *d[2] = {NULL, NULL};
    if (dt_set_threads(threads) || dt_gpt_describe(&g, &desc) ||
        dt_model_instantiate(desc, 0, dt_model_desc_blocks(desc), &m) || dt_comm_init_env(&c) ||
        make(c, dt_model_params(m), ab ? "powersgd" : kind, rank, ab ? "reference" : NULL, &d[0]) ||
        (ab && make(c, dt_model_params(m), "powersgd", rank, "fast", &d[1]))) {
        fprintf(stderr, "powersgd_compute: %s\n", dt_last_error());
        return 1;
    }
    dt_params *p = dt_model_params(m);
    int64_t n = dt_params_numel(p);
    int nd = ab ? 2 : 1;
    float *src = malloc((size_t)n * sizeof *src);
    double *t = malloc((size_t)steps * 4 * sizeof *t); /* wall, cpu per instance */
    dt_rng r;
    dt_rng_seed(&r, 7);
    for (int64_t i = 0; i < n; i++)
        src[i] = 1e-3f * dt_rng_normal(&r);
    for (int s = -3; s < steps; s++)
        for (int k = 0; k < nd; k++) {
            int which = (s & 1) ? nd - 1 - k : k; /* ABBA: neither always runs first */
            memcpy(dt_params_grads(p), src, (size_t)n * sizeof *src);
            double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
            if (dt_ddp_finish(d[which])) {
                fprintf(stderr, "powersgd_compute: %s\n", dt_last_error());
                return 1;
            }
            if (s >= 0) {
                t[(2 * which) * steps + s] = now(CLOCK_MONOTONIC) - w0;
                t[(2 * which + 1) * steps + s] = now(CLOCK_THREAD_CPUTIME_ID) - c0;
            }
        }
    double med[4];
    for (int k = 0; k < 2 * nd; k++)
        med[k] = median(t + k * steps, steps) * 1e3;
    printf("gpt dim %lld layers %lld (%lld parameters, %d buckets), rank %d, %d threads, %d steps:\n",
           (long long)dim, (long long)layers, (long long)n, dt_ddp_buckets(d[0]), rank, threads, steps);
    for (int k = 0; k < nd; k++)
        printf("  %-18s median %.2f ms wall, %.2f ms cpu per step\n",
               ab ? (k ? "powersgd fast" : "powersgd reference") : kind, med[2 * k], med[2 * k + 1]);
    if (ab)
        printf("  fast / reference: %.3f wall, %.3f cpu\n", med[2] / med[0], med[3] / med[1]);
    for (int k = 0; k < nd; k++)
        dt_ddp_destroy(d[k]);
    dt_comm_destroy(c);
    dt_model_destroy(m);
    dt_model_desc_destroy(desc);
    free(src);
    free(t);
    return 0;
}
