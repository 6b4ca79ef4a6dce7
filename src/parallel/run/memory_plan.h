/* dt_layout_memory_plan's formulas (layout.h) over bare counts, written
 * once: the trainer applies them to its instantiated model (memory_plan.c),
 * the planner (parallel/plan/cost.c) to its blocks' parameter counts. */
#ifndef DT_PARALLEL_RUN_MEMORY_PLAN_H
#define DT_PARALLEL_RUN_MEMORY_PLAN_H

#include "dtrain/layout.h"

/* P: this rank's parameters (elements), S: its ZeRO shard (a slice of every
 * block, each rounded up: sum of ceil(block / n)), unit: the largest
 * block's parameters padded to a multiple of n, n: the data-parallel ranks,
 * state_floats: the optimizer's per element.  l gives zero_stage, offload
 * and pp. */
void dt__memory_plan_states(const dt_layout *l, double P, double S, double unit, int n, int state_floats,
                            dt_memory_plan *out);

#endif
