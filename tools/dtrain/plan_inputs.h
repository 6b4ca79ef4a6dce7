/* What `dtrain plan` and layout=auto share (plan_inputs.c): the model's
 * profile (measured once per machine and cached), the links' defaults, the
 * planner's inputs from a configuration, and the checks of the model against
 * a layout the planner's blocks cannot make. */
#ifndef DTRAIN_PLAN_INPUTS_H
#define DTRAIN_PLAN_INPUTS_H

#include "dtrain/plan.h"
#include "dtrain_cli.h"

/* c's model profiled at this process's threads for `ranks` ranks of a host
 * (> 1: how they share its cores measured too), from the cache when it
 * holds it. */
dt_status dtrain_plan_profile(const dtrain_config *c, int ranks, bool fresh, bool quiet, dt_plan_model *m);

void dtrain_plan_default_links(dt_plan_links *l, int ranks_per_node);

/* The inputs for c's model on `world` ranks over links (profile made). */
void dtrain_plan_inputs_of(const dtrain_config *c, int world, double memory_limit, dt_plan_inputs *in);

/* A profile measures one process alone; a host's ranks that together run
 * more compute threads than it has cores take turns on them: in->cores_per_node
 * from this process's cores (the cost model does the rest).  Says so once
 * (unless quiet). */
void dtrain_plan_share_cores(dt_plan_inputs *in, bool quiet);

/* Whether c's model can run layout l on `world` ranks where the planner's
 * blocks cannot tell: tp dividing the heads and vocabulary (gpt) or the
 * split widths (mlp), micro_batches dividing batch_size, the pipeline's
 * stages against the blocks.  false with the reason in why. */
bool dtrain_plan_runnable(const dtrain_config *c, const dt_layout *l, int world, const dt_model_desc *d, char *why,
                     size_t len);

#endif
