#include <string.h>

#include "base/hash.h"
#include "nn/init.h"

static void seed_for(dt_rng *r, dt_params *p, int index, uint64_t seed)
{
    const char *name = dt_params_info(p, index)->name;
    dt_rng_seed(r, dt__fnv1a64(dt__mix64(seed), name, strlen(name)));
}

/* Every initialiser draws the whole tensor's values in order and keeps
 * this shard's (all of them for a whole parameter): a tensor-parallel shard
 * holds exactly its slice of what the unsplit layer gets. */
static int64_t whole_numel(const dt_param_info *in)
{
    int64_t n = 1;
    for (int d = 0; d < in->ndim; d++)
        n *= in->whole[d];
    return n;
}

void dt__init_uniform(dt_params *p, int index, uint64_t seed, float bound)
{
    dt_rng r;
    seed_for(&r, p, index, seed);
    const dt_param_info *in = dt_params_info(p, index);
    float *w = dt_param_value(p, index);
    for (int64_t i = 0, n = whole_numel(in); i < n; i++) {
        float v = (2.0f * dt_rng_uniform(&r) - 1.0f) * bound;
        int64_t at = in->parts > 1 ? dt_param_shard_index(in, i) : i;
        if (at >= 0)
            w[at] = v;
    }
}

void dt__init_normal(dt_params *p, int index, uint64_t seed, float std)
{
    dt_rng r;
    seed_for(&r, p, index, seed);
    const dt_param_info *in = dt_params_info(p, index);
    float *w = dt_param_value(p, index);
    for (int64_t i = 0, n = whole_numel(in); i < n; i++) {
        float v = std * dt_rng_normal(&r);
        int64_t at = in->parts > 1 ? dt_param_shard_index(in, i) : i;
        if (at >= 0)
            w[at] = v;
    }
}

void dt__init_const(dt_params *p, int index, float value)
{
    float *w = dt_param_value(p, index);
    for (int64_t i = 0; i < dt_params_info(p, index)->numel; i++)
        w[i] = value;
}
