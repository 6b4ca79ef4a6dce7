/* The pipeline's cut of a model's blocks into stages, over bare costs:
 * dt_pipeline_partition (plan.c) runs it over the blocks' cost hints, the
 * planner (parallel/plan) over its blocks' same hints, so both cut alike. */
#ifndef DT_PARALLEL_PIPE_PARTITION_H
#define DT_PARALLEL_PIPE_PARTITION_H

#include "dtrain/base.h"

/* Blocks [0, n) with cost[i] cut into `parts` contiguous parts (1 <= parts
 * <= n, checked by the caller) minimising the most costly one; part k is
 * [bounds[k], bounds[k + 1]).  bounds holds parts + 1 entries.  The least
 * most costly cut is found by dynamic programming, O(parts x n^2). */
dt_status dt__partition_costs(const double *cost, int n, int parts, int *bounds);

#endif
