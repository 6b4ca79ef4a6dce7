/* What the model builders (mlp, cnn, gpt) share: a description is a list of
 * blocks, each with a function that creates it and registers its parameters
 * in a registry; instantiating a range of blocks makes a model or a stage. */
#ifndef DT_NN_MODEL_INTERNAL_H
#define DT_NN_MODEL_INTERNAL_H

#include <stddef.h>

#include "dtrain/nn.h"

/* Create block `index` of d, registering (or, for a shared parameter,
 * finding) its parameters in p. */
typedef dt_status (*dt__block_make)(const dt_model_desc *d, int index, dt_params *p, dt_layer **out);

/* An empty description holding a copy of the builder's configuration. */
dt_status dt__desc_new(const void *config, size_t config_bytes, dt_model_desc **out);
const void *dt__desc_config(const dt_model_desc *d);
/* Append a block; flops and act_bytes are per sample (see dt_block_info). */
dt_status dt__desc_add(dt_model_desc *d, const char *name, const char *kind, dt__block_make make, int64_t params,
                       double flops, double act_bytes);
/* Parameter `name` is used by blocks first..last (a tied weight). */
dt_status dt__desc_share(dt_model_desc *d, const char *name, int first, int last);
/* The last block's output is this rank's slice of `vocab` classes, from
 * `start`, over the tensor-parallel group tp (dt_model_loss takes the
 * vocabulary-parallel loss; tp is copied). */
void dt__desc_set_output_split(dt_model_desc *d, int64_t vocab, int64_t start, const dt_tp_group *tp);
/* The input of one sample (dt_model_desc_input): ndim < DT_MAX_DIMS
 * dimensions, ids > 0 for ids stored as floats. */
void dt__desc_set_input(dt_model_desc *d, int ndim, const int64_t *shape, int64_t ids);
/* Describe, then instantiate every block. */
dt_status dt__build_whole(dt_status describe_status, dt_model_desc **d, dt_model **out);

/* The index of parameter `name` in p, registering it when absent (a block
 * that uses a shared parameter its stage may or may not already hold). */
dt_status dt__params_use(dt_params *p, const char *name, int ndim, const int64_t *shape, int *index);

#endif
