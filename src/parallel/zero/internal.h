/* ZeRO's shard layout (shard.c), shared by the strategy
 * (strategy.c): units are blocks' parameter ranges, each padded to a
 * multiple of the ranks and cut into one slice per rank. */
#ifndef DT_PARALLEL_ZERO_INTERNAL_H
#define DT_PARALLEL_ZERO_INTERNAL_H

#include "dtrain/parallel.h"

typedef struct {
    int block;                 /* the model's local block that registered it */
    int first_param, nparams;  /* its parameters in the registry */
    int64_t flat_offset, numel; /* its range of the flat buffer */
    int64_t slice;             /* ceil(numel / ranks): each rank's part, the last ones padded */
    int64_t shard_offset;      /* where this rank's slice sits in its shard */
} dt__zero_unit;

typedef struct {
    int nranks, rank;
    dt__zero_unit *unit;
    int nunits;
    int *unit_of_block; /* -1: a block without parameters */
    int *unit_of_param;
    int64_t shard_numel; /* the sum of the slices */
    int64_t max_padded;  /* the largest unit, padded: slice x ranks */
} dt__zero_layout;

dt_status dt__zero_layout_make(dt_model *m, int nranks, int rank, dt__zero_layout *L);
void dt__zero_layout_free(dt__zero_layout *L);

/* ZeRO over c for m, a whole model or a mesh rank's part of one (stages 1
 * and 2 there; see strategy.c): cfg->tp the tensor-parallel group and
 * `stages` the pipeline's (the norm; NULL: none); deferred: a pipeline's
 * (common/dp_sync.h), whose gradients are reduce-scattered after the schedule. */
dt_status dt__strategy_zero_make(dt_model *m, dt_optimizer *o, dt_comm *c, int stage, const dt_strategy_config *cfg,
                                 dt_comm *stages, bool deferred, dt_strategy **out);

#endif
