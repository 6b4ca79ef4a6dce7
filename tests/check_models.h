/* The small models and keyed batches the strategy checks share
 * (zero_check.c, ps_check.c): a GPT (dropout 0.1, tied embedding), an MLP
 * and the text classifier, fed micro-batches drawn from (SEED, step,
 * micro-batch, rank) so that every strategy under comparison sees the same
 * data.  The including file defines SEED and MB and declares `static int
 * rank` (this process's rank in the job) first. */
#ifndef DT_TESTS_CHECK_MODELS_H
#define DT_TESTS_CHECK_MODELS_H

#include <math.h>

#include "dtrain/dtrain.h"

enum { MLP, GPT, TEXT };
#define BAG 6 /* ids per example of the text classifier, -1 padded */
#define BUCKETS 500
static const char *const kind_name[] = {"mlp", "gpt", "textclf"};

typedef struct {
    int kind;
    int64_t step;
    int next; /* the micro-batch the next call draws */
    float x[MB * 16];
    int32_t y[MB * 8];
} feed;

static const dt_gpt_config gcfg = {.vocab = 40, .context = 8, .layers = 2, .heads = 2, .dim = 16, .dropout = 0.1f};
static const int64_t sizes[] = {16, 24, 20, 6};

static dt_status next_batch(void *user, dt_micro_batch *mb)
{
    feed *f = user;
    dt_rng g;
    dt_rng_seed(&g, dt_rng_key_stream(&(dt_rng_key){SEED, (uint64_t)f->step, (uint32_t)f->next++, (uint32_t)rank}, 3));
    if (f->kind == TEXT) { /* bags of 1..BAG ids from BUCKETS, -1 after them */
        for (int b = 0; b < MB; b++) {
            int len = 1 + (int)(dt_rng_uniform(&g) * BAG) % BAG;
            for (int j = 0; j < BAG; j++)
                f->x[b * BAG + j] = j < len ? (float)((int)(dt_rng_uniform(&g) * BUCKETS) % BUCKETS) : -1.0f;
            f->y[b] = (int32_t)(dt_rng_uniform(&g) * 5) % 5;
        }
        mb->x = dt_tensor_view(f->x, 2, (int64_t[]){MB, BAG});
        mb->ntargets = MB;
    } else if (f->kind == GPT) {
        for (int j = 0; j < MB * 8; j++) {
            f->x[j] = (float)((int)(dt_rng_uniform(&g) * 40) % 40);
            f->y[j] = (int32_t)(dt_rng_uniform(&g) * 40) % 40;
        }
        mb->x = dt_tensor_view(f->x, 2, (int64_t[]){MB, 8});
        mb->ntargets = MB * 8;
    } else {
        for (int j = 0; j < MB * 16; j++)
            f->x[j] = (float)(dt_rng_uniform(&g) * 2 - 1);
        for (int j = 0; j < MB; j++)
            f->y[j] = (int32_t)(dt_rng_uniform(&g) * 6) % 6;
        mb->x = dt_tensor_view(f->x, 2, (int64_t[]){MB, 16});
        mb->ntargets = MB;
    }
    mb->targets = f->y;
    return DT_OK;
}

/* A model of `kind` (the GPT's width `dim`; the classifier's dim / 2),
 * initialised from SEED. */
static dt_status check_build(int kind, int dim, dt_model **out)
{
    dt_gpt_config g = gcfg;
    g.dim = dim;
    dt_status s = kind == GPT    ? dt_gpt_create(&g, out)
                  : kind == TEXT ? dt_textclf_create(&(dt_textclf_config){BUCKETS, dim / 2, 5}, out)
                                 : dt_mlp_create(sizes, 4, out);
    if (s == DT_OK)
        dt_model_init(*out, SEED);
    return s;
}

/* The largest magnitude of v (a floor of 1e-30): differences are given against it. */
static double largest(const float *v, int64_t n)
{
    double m = 1e-30;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)v[i]));
    return m;
}

#endif
