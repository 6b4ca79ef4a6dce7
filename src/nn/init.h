/* Parameter initialisation keyed by name: each parameter draws from its own
 * generator, seeded by (model seed, parameter name).  The values therefore do
 * not depend on which other parameters exist or in which order they are
 * initialised: a pipeline stage holding blocks [lo, hi), or a tied weight
 * initialised by both blocks that use it, gets exactly the bits of the whole
 * model. */
#ifndef DT_NN_INIT_H
#define DT_NN_INIT_H

#include "dtrain/nn.h"

/* U(-bound, bound).  A tensor-parallel shard (dt_param_set_shard) gets its
 * slice of the whole tensor's values: every initialiser draws the whole
 * sequence and keeps this shard's elements. */
void dt__init_uniform(dt_params *p, int index, uint64_t seed, float bound);
/* N(0, std) */
void dt__init_normal(dt_params *p, int index, uint64_t seed, float std);
void dt__init_const(dt_params *p, int index, float value);

#endif
