#include <string.h>

#include "base/hash.h"
#include "nn/init.h"

static void seed_for(dt_rng *r, dt_params *p, int index, uint64_t seed)
{
    const char *name = dt_params_info(p, index)->name;
    dt_rng_seed(r, dt__fnv1a64(dt__mix64(seed), name, strlen(name)));
}

void dt__init_uniform(dt_params *p, int index, uint64_t seed, float bound)
{
    dt_rng r;
    seed_for(&r, p, index, seed);
    float *w = dt_param_value(p, index);
    for (int64_t i = 0; i < dt_params_info(p, index)->numel; i++)
        w[i] = (2.0f * dt_rng_uniform(&r) - 1.0f) * bound;
}

void dt__init_uniform_slice(dt_params *p, int index, uint64_t seed, float bound, int64_t cols, int64_t row0,
                            int64_t col0)
{
    const dt_param_info *info = dt_params_info(p, index);
    int64_t cols_l = info->ndim >= 2 ? info->shape[info->ndim - 1] : 1;
    int64_t rows_l = info->numel / cols_l;
    dt_rng r;
    seed_for(&r, p, index, seed);
    float *w = dt_param_value(p, index);
    /* The whole tensor's draws in order, up to the slice's last element. */
    int64_t last = (row0 + rows_l - 1) * cols + col0 + cols_l - 1;
    for (int64_t i = 0; i <= last; i++) {
        float v = (2.0f * dt_rng_uniform(&r) - 1.0f) * bound;
        int64_t row = i / cols - row0, col = i % cols - col0;
        if (row >= 0 && row < rows_l && col >= 0 && col < cols_l)
            w[row * cols_l + col] = v;
    }
}

void dt__init_normal(dt_params *p, int index, uint64_t seed, float std)
{
    dt_rng r;
    seed_for(&r, p, index, seed);
    float *w = dt_param_value(p, index);
    for (int64_t i = 0; i < dt_params_info(p, index)->numel; i++)
        w[i] = std * dt_rng_normal(&r);
}

void dt__init_const(dt_params *p, int index, float value)
{
    float *w = dt_param_value(p, index);
    for (int64_t i = 0; i < dt_params_info(p, index)->numel; i++)
        w[i] = value;
}
