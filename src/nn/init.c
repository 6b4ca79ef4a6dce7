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

void dt__init_seed(dt_rng *r, dt_params *p, int index, uint64_t seed) { seed_for(r, p, index, seed); }

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
