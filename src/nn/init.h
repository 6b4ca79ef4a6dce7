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
/* The slice of a U(-bound, bound) parameter drawn whole: the whole tensor is
 * [rows, cols] with cols = `cols`, parameter `index` holds its block of
 * info->shape rows from row0 and info->numel / rows columns from col0
 * (tensor-parallel shards: the same values as the unsplit layer's). */
void dt__init_uniform_slice(dt_params *p, int index, uint64_t seed, float bound, int64_t cols, int64_t row0,
                            int64_t col0);
/* N(0, std) */
void dt__init_normal(dt_params *p, int index, uint64_t seed, float std);
void dt__init_const(dt_params *p, int index, float value);

#endif
