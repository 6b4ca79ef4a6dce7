/* Parameter initialisation keyed by name: each parameter draws from its own
 * generator, seeded by (model seed, parameter name).  The values therefore do
 * not depend on which other parameters exist or in which order they are
 * initialised: a pipeline stage holding blocks [lo, hi), or a tied weight
 * initialised by both blocks that use it, gets exactly the bits of the whole
 * model. */
#ifndef DT_NN_INIT_H
#define DT_NN_INIT_H

#include "dtrain/nn.h"

/* U(-bound, bound) */
void dt__init_uniform(dt_params *p, int index, uint64_t seed, float bound);
/* The generator parameter `index` draws its values from, in order over the
 * whole tensor (dt__init_uniform takes (2 u - 1) bound per element).  A
 * tensor-parallel shard draws the whole tensor's sequence and keeps its
 * slice: the same values as the unsplit layer's. */
void dt__init_seed(dt_rng *r, dt_params *p, int index, uint64_t seed);
static inline float dt__init_draw_uniform(dt_rng *r, float bound) { return (2.0f * dt_rng_uniform(r) - 1.0f) * bound; }
/* N(0, std) */
void dt__init_normal(dt_params *p, int index, uint64_t seed, float std);
void dt__init_const(dt_params *p, int index, float value);

#endif
